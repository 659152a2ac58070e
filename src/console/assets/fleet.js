// Fleet page: the registry list (GET /api/v1/things) with filters, keyset paging, and live
// connected/disconnected changes from the account's connectivity stream.
import { $, api, el, fmtTime, liveSocket, page, relative, setStatus } from './common.js';

const FIELDS = ['q', 'state', 'model', 'claim_group', 'connected', 'revoked', 'tags', 'last_seen_after', 'last_seen_before', 'sort', 'limit'];
const DATES = new Set(['last_seen_after', 'last_seen_before']);
const form = $('filters');
/** cursors[i] is the cursor of page i (null: the first page) */
let cursors = [null];
let nextCursor = null;
let socket;
let loading = Promise.resolve();


/** datetime-local (the browser's time zone) <-> ISO 8601 UTC */
const toIso = (local) => (local ? new Date(local).toISOString() : '');
function toLocal(iso) {
  const d = new Date(iso);
  if (Number.isNaN(d.getTime())) return '';
  return new Date(d.getTime() - d.getTimezoneOffset() * 60_000).toISOString().slice(0, 16);
}

/** The filter query of the form (only what is set), as the API wants it. */
function filterQuery() {
  const q = new URLSearchParams();
  for (const name of FIELDS) {
    const value = form.elements[name].value.trim();
    if (value) q.set(name, DATES.has(name) ? toIso(value) : value);
  }
  return q;
}

/** Fills the form from the page's URL (filters survive a reload and can be shared as a link). */
function formFromUrl() {
  const q = new URLSearchParams(location.search);
  for (const name of FIELDS) {
    if (!q.has(name)) continue;
    form.elements[name].value = DATES.has(name) ? toLocal(q.get(name)) : q.get(name);
  }
}

function connCell(connected) {
  return el('td', { className: `conn${connected ? ' connected' : ''}` }, el('span', { className: 'dot' }), connected ? 'connected' : 'offline');
}

function row(t) {
  const cert = t.certificate;
  return el('tr', { dataset: { thingId: t.id } },
    connCell(t.connected),
    el('td', {}, el('a', { href: `/console/things/${encodeURIComponent(t.id)}`, className: 'thing-link' }, t.serial), t.revoked ? el('div', { className: 'revoked-flag' }, 'revoked') : null),
    el('td', {}, t.model, el('div', { className: 'meta' }, t.manufacturer)),
    el('td', {}, el('span', { className: 'state' }, t.state)),
    el('td', {}, ...t.tags.map((tag) => el('span', { className: 'tag' }, tag))),
    el('td', { className: 'last-seen', title: fmtTime(t.last_seen) }, t.last_seen ? relative(t.last_seen) : 'never'),
    el('td', { title: cert ? fmtTime(cert.not_after) : '' }, cert ? relative(cert.not_after) : '—'),
    el('td', { title: fmtTime(t.created_at) }, new Date(t.created_at).toLocaleDateString()),
  );
}

async function load(index) {
  const q = filterQuery();
  if (cursors[index]) q.set('cursor', cursors[index]);
  setStatus('loading…');
  try {
    const { items, next_cursor: next, total, total_estimate: estimate } = await api('GET', `/api/v1/things?${q}`);
    cursors = cursors.slice(0, index + 1);
    nextCursor = next;
    $('rows').replaceChildren(...items.map(row));
    const filtered = [...filterQuery().keys()].some((k) => k !== 'sort' && k !== 'limit');
    $('empty').textContent = filtered ? 'No things match these filters.' : 'This account has no things yet. Enroll a device to see it here.';
    $('empty').classList.toggle('hidden', items.length > 0);
    $('things').classList.toggle('hidden', items.length === 0);
    $('pager').classList.toggle('hidden', items.length === 0 && index === 0);
    const limit = Number(form.elements.limit.value);
    const from = index * limit + 1;
    const of = total !== null ? total.toLocaleString('en') : `about ${estimate.toLocaleString('en')}`;
    $('page-info').textContent = items.length ? `Page ${index + 1} · things ${from.toLocaleString('en')}–${(from + items.length - 1).toLocaleString('en')} of ${of}` : '';
    $('total').textContent = `${of} thing${total === 1 ? '' : 's'}${filtered ? ' match' : ''}`;
    $('total').dataset.total = total !== null ? String(total) : '';
    $('first').disabled = $('prev').disabled = index === 0;
    $('next').disabled = !next;
    $('page-info').dataset.page = String(index + 1);
    setStatus('');
  } catch (err) {
    setStatus(`error: ${err.message}`);
  }
}

/** Loads one page at a time (clicks while a page loads wait their turn). */
const go = (index) => (loading = loading.then(() => load(index)));
const current = () => cursors.length - 1;

function onChange(m) {
  if (m.type !== 'connectivity') return;
  const tr = document.querySelector(`tr[data-thing-id="${CSS.escape(m.thingId)}"]`);
  if (!tr) return;
  tr.cells[0].replaceWith(connCell(m.connected));
  if (m.connected) {
    tr.cells[5].textContent = relative(m.at);
    tr.cells[5].title = fmtTime(m.at);
  }
}

async function loadClaimGroups() {
  try {
    const { items } = await api('GET', '/api/v1/things/claim-groups?limit=200');
    const select = $('f-claim-group');
    const chosen = new URLSearchParams(location.search).get('claim_group');
    select.replaceChildren(el('option', { value: '' }, 'any'), ...items.map((g) => el('option', { value: g.id }, `${g.name} (${g.status})`)));
    if (chosen) select.value = chosen;
  } catch {
    /* the list is a convenience: the filter still works by id from the URL */
  }
}

form.addEventListener('submit', (e) => {
  e.preventDefault();
  history.replaceState(null, '', `${location.pathname}?${filterQuery()}`);
  cursors = [null];
  void go(0);
});
$('reset-filters').onclick = () => {
  // the form's own reset (a control named or id'd "reset" would shadow form.reset)
  HTMLFormElement.prototype.reset.call(form);
  history.replaceState(null, '', location.pathname);
  cursors = [null];
  void go(0);
};
$('next').onclick = () => {
  if (!nextCursor) return;
  cursors.push(nextCursor);
  void go(cursors.length - 1);
};
$('prev').onclick = () => void go(Math.max(0, current() - 1));
$('first').onclick = () => void go(0);

page({
  async start() {
    formFromUrl();
    await loadClaimGroups();
    await go(0);
    socket = liveSocket('/api/v1/things/connectivity/stream', {
      onMessage: onChange,
      onStatus: (s) => { $('live').textContent = s === 'live' ? 'live updates on' : s; },
      // changes before the stream was subscribed (or while it reconnected) are read with the page again
      onOpen: () => void go(current()),
    });
  },
  stop() {
    socket?.close();
  },
});
