// Notifications page: the feed with live updates (SSE); notifications about a thing link to its device page.
import { $, api, el, page, refreshBadge, setStatus } from './common.js';

const API = '/console/notifications';
const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;
const state = { items: new Map(), source: null, lastEventId: null };


/** The device page of the thing a notification is about (its action URL, else data.thingId), if any. */
function deviceLink(n) {
  const fromUrl = /^\/things\/([^/?#]+)$/.exec(n.actionUrl ?? '')?.[1];
  const id = fromUrl ? decodeURIComponent(fromUrl) : n.data?.thingId;
  return typeof id === 'string' && UUID.test(id) ? `/console/things/${encodeURIComponent(id.toLowerCase())}` : undefined;
}

function render(n) {
  let li = document.querySelector(`li[data-id="${CSS.escape(n.id)}"]`);
  if (!li) li = el('li', { dataset: { id: n.id } });
  li.className = `item sev-${n.severity}${n.read ? '' : ' unread'}`;
  const link = deviceLink(n);
  const meta = `${n.severity} · ${n.categoryId} · ${n.scope === 'tenant' ? 'account' : 'personal'} · ${new Date(n.createdAt).toLocaleString()}${n.dismissed ? ' · dismissed' : ''}`;
  li.replaceChildren(
    el('div', { className: 'content' },
      el('div', { className: 'title' }, n.title),
      el('div', { className: 'body' }, n.body.trim()),
      el('div', { className: 'meta' }, meta, link ? ' · ' : '', link ? el('a', { className: 'device-link', href: link }, 'Open device') : null)),
    n.read ? null : el('button', { type: 'button', className: 'mark-read', onclick: () => act(n, 'read') }, 'Mark read'),
    n.dismissed ? null : el('button', { type: 'button', className: 'dismiss', onclick: () => act(n, 'dismiss') }, 'Dismiss'),
  );
  return li;
}

const showEmpty = () => $('empty').classList.toggle('hidden', $('feed').children.length > 0);

async function loadFeed() {
  const q = $('show-dismissed').checked ? '?limit=100&dismissed=true' : '?limit=100';
  const { items } = await api('GET', `${API}/feed${q}`);
  state.items = new Map(items.map((n) => [n.id, n]));
  $('feed').replaceChildren(...items.map(render));
  showEmpty();
  await refreshBadge();
}

async function act(n, what) {
  try {
    await api('PATCH', `${API}/${encodeURIComponent(n.id)}/${what}`);
    if (what === 'read') {
      n.read = true;
      render(n);
    } else {
      remove(n.id);
    }
    await refreshBadge();
  } catch (err) {
    setStatus(`failed: ${err.message}`);
  }
}

function remove(id) {
  if ($('show-dismissed').checked) {
    const n = state.items.get(id);
    if (n) {
      n.dismissed = true;
      render(n);
    }
    return;
  }
  state.items.delete(id);
  document.querySelector(`li[data-id="${CSS.escape(id)}"]`)?.remove();
  showEmpty();
}

function onEvent(ev) {
  state.lastEventId = ev.lastEventId || state.lastEventId;
  const data = JSON.parse(ev.data);
  if (data.type === 'created') {
    const n = data.notification;
    state.items.set(n.id, n);
    $('feed').prepend(render(n));
    showEmpty();
  } else if (data.type === 'dismissed') {
    remove(data.id);
  } else if (data.type === 'dismissed-all') {
    void loadFeed();
  }
  void refreshBadge();
}

async function connect() {
  state.source?.close();
  // EventSource cannot send Authorization: exchange the bearer token for the stream cookie first.
  await api('POST', `${API}/stream/auth`);
  const url = state.lastEventId ? `${API}/stream?lastEventId=${encodeURIComponent(state.lastEventId)}` : `${API}/stream`;
  const es = new EventSource(url, { withCredentials: true });
  state.source = es;
  es.addEventListener('open', () => setStatus('live'));
  es.addEventListener('notification', onEvent);
  es.addEventListener('error', () => {
    setStatus('reconnecting…');
    // refused (cookie expired after an hour): repeat the exchange and resume from the last id
    if (es.readyState === EventSource.CLOSED) setTimeout(() => state.source === es && connect().catch((e) => setStatus(`offline: ${e.message}`)), 2000);
  });
}

$('read-all').onclick = async () => {
  await api('PATCH', `${API}/read-all`);
  await loadFeed();
};
$('dismiss-all').onclick = async () => {
  await api('PATCH', `${API}/dismiss-all`);
  await loadFeed();
};
$('show-dismissed').onchange = () => void loadFeed();

page({
  async start() {
    try {
      await loadFeed();
      await connect();
    } catch (err) {
      setStatus(`error: ${err.message}`);
    }
  },
  stop() {
    state.source?.close();
    state.source = null;
  },
});
