// Console page of the device gateway: the notification feed with live updates (SSE).
// Every text is inserted with textContent (never innerHTML).
(() => {
  'use strict';
  const API = '/console/notifications';
  const $ = (id) => document.getElementById(id);
  const state = { token: sessionStorage.getItem('gw.token'), account: sessionStorage.getItem('gw.account') || '', items: new Map(), source: null, lastEventId: null };

  async function api(method, path, body) {
    const headers = { authorization: `Bearer ${state.token}` };
    if (state.account) headers['x-account-id'] = state.account;
    if (body !== undefined) headers['content-type'] = 'application/json';
    const res = await fetch(API + path, { method, headers, body: body === undefined ? undefined : JSON.stringify(body), credentials: 'same-origin' });
    if (res.status === 401) {
      signOut('Your session expired; sign in again.');
      throw new Error('unauthorized');
    }
    if (!res.ok) {
      const p = await res.json().catch(() => ({}));
      throw new Error(p.detail || `${res.status}`);
    }
    return res.status === 204 ? null : res.json();
  }

  function setStatus(text) {
    $('status').textContent = text;
  }

  async function refreshCount() {
    const { count } = await api('GET', '/unseen/count');
    const badge = $('badge');
    badge.textContent = String(count);
    badge.classList.toggle('zero', count === 0);
  }

  function render(n) {
    let li = document.querySelector(`li[data-id="${CSS.escape(n.id)}"]`);
    if (!li) {
      li = document.createElement('li');
      li.dataset.id = n.id;
    }
    li.className = `item sev-${n.severity}${n.read ? '' : ' unread'}`;
    li.replaceChildren();
    const content = document.createElement('div');
    content.className = 'content';
    const title = document.createElement('div');
    title.className = 'title';
    title.textContent = n.title;
    const body = document.createElement('div');
    body.className = 'body';
    body.textContent = n.body.trim();
    const meta = document.createElement('div');
    meta.className = 'meta';
    meta.textContent = `${n.severity} · ${n.categoryId} · ${n.scope === 'tenant' ? 'account' : 'personal'} · ${new Date(n.createdAt).toLocaleString()}${n.dismissed ? ' · dismissed' : ''}`;
    content.append(title, body, meta);
    li.append(content);
    if (!n.read) li.append(actionButton('Mark read', 'mark-read', () => act(n, 'read')));
    if (!n.dismissed) li.append(actionButton('Dismiss', 'dismiss', () => act(n, 'dismiss')));
    return li;
  }

  function actionButton(label, className, onclick) {
    const b = document.createElement('button');
    b.type = 'button';
    b.textContent = label;
    b.className = className;
    b.onclick = onclick;
    return b;
  }

  function showEmpty() {
    $('empty').classList.toggle('hidden', $('feed').children.length > 0);
  }

  async function loadFeed() {
    const q = $('show-dismissed').checked ? '?limit=100&dismissed=true' : '?limit=100';
    const { items } = await api('GET', `/feed${q}`);
    state.items = new Map(items.map((n) => [n.id, n]));
    $('feed').replaceChildren(...items.map(render));
    showEmpty();
    await refreshCount();
  }

  async function act(n, what) {
    try {
      await api('PATCH', `/${encodeURIComponent(n.id)}/${what}`);
      if (what === 'read') {
        n.read = true;
        render(n);
      } else {
        remove(n.id);
      }
      await refreshCount();
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
    void refreshCount();
  }

  async function connect() {
    state.source?.close();
    // EventSource cannot send Authorization: exchange the bearer token for the stream cookie first.
    await api('POST', '/stream/auth');
    const url = state.lastEventId ? `${API}/stream?lastEventId=${encodeURIComponent(state.lastEventId)}` : `${API}/stream`;
    const es = new EventSource(url, { withCredentials: true });
    state.source = es;
    es.addEventListener('open', () => setStatus('live'));
    es.addEventListener('notification', onEvent);
    es.addEventListener('error', () => {
      if (es.readyState === EventSource.CLOSED) {
        // refused (cookie expired after an hour): repeat the exchange and resume from the last id
        setStatus('reconnecting…');
        setTimeout(() => state.token && state.source === es && connect().catch((e) => setStatus(`offline: ${e.message}`)), 2000);
      } else {
        setStatus('reconnecting…');
      }
    });
  }

  async function start() {
    $('signin').classList.add('hidden');
    $('app').classList.remove('hidden');
    $('signout').classList.remove('hidden');
    $('who').textContent = state.account ? `account ${state.account.slice(0, 8)}…` : '';
    try {
      await loadFeed();
      await connect();
    } catch (err) {
      setStatus(`error: ${err.message}`);
    }
  }

  function signOut(message) {
    state.source?.close();
    state.source = null;
    state.token = null;
    sessionStorage.removeItem('gw.token');
    sessionStorage.removeItem('gw.account');
    $('app').classList.add('hidden');
    $('signout').classList.add('hidden');
    $('signin').classList.remove('hidden');
    $('signin-error').textContent = message || '';
  }

  $('signin').addEventListener('submit', async (e) => {
    e.preventDefault();
    $('signin-error').textContent = '';
    const realm = $('realm').value.trim();
    let token = $('token').value.trim();
    try {
      if (!token) {
        const roles = $('roles').value.split(',').map((r) => r.trim()).filter(Boolean);
        const res = await fetch('/dev/token', { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ realm, sub: $('sub').value.trim(), roles }) });
        const body = await res.json();
        if (!res.ok) throw new Error(body.detail || `token request failed (${res.status})`);
        token = body.access_token;
      }
      state.token = token;
      state.account = $('account').value.trim() || (realm.startsWith('acc-') ? realm.slice(4) : '');
      sessionStorage.setItem('gw.token', state.token);
      sessionStorage.setItem('gw.account', state.account);
      await start();
    } catch (err) {
      $('signin-error').textContent = err.message;
    }
  });
  $('signout').onclick = () => signOut();
  $('read-all').onclick = async () => {
    await api('PATCH', '/read-all');
    await loadFeed();
  };
  $('dismiss-all').onclick = async () => {
    await api('PATCH', '/dismiss-all');
    await loadFeed();
  };
  $('show-dismissed').onchange = () => void loadFeed();

  if (state.token) void start();
})();
