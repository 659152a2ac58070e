// Sessions page: the account's connected devices (MQTT protocol, since when, last seen), kept
// live by the connectivity stream; a kick (DELETE /api/v1/things/{id}/session) offered to the
// account's admins and operators.
import { $, allowed, api, el, fmtTime, liveSocket, page, relative, setStatus } from './common.js';

const KICKERS = ['admin', 'operator'];
const PROTOCOL = { 3: 'MQTT 3.1', 4: 'MQTT 3.1.1', 5: 'MQTT 5' };
let socket;
let loading = Promise.resolve();

async function row(t) {
  const d = await api('GET', `/api/v1/things/${t.id}`);
  const c = d.connectivity ?? {};
  return el('tr', { dataset: { thingId: t.id } },
    el('td', {}, el('a', { href: `/console/things/${encodeURIComponent(t.id)}` }, t.serial)),
    el('td', {}, t.model),
    el('td', { className: 'protocol' }, PROTOCOL[c.protocol_version] ?? (c.protocol_version ? `MQTT v${c.protocol_version}` : '—')),
    el('td', { className: 'since', title: fmtTime(c.connected_at) }, c.connected_at ? relative(c.connected_at) : '—'),
    el('td', { title: fmtTime(c.last_seen) }, c.last_seen ? relative(c.last_seen) : '—'),
    el('td', { className: 'node' }, c.node ?? '—'),
    el('td', {}, allowed(KICKERS) ? el('button', { type: 'button', className: 'danger kick', onclick: () => kick(t) }, 'Disconnect') : null));
}

async function load() {
  setStatus('loading…');
  try {
    const { items, total, total_estimate: estimate } = await api('GET', '/api/v1/things?connected=true&limit=100&sort=-last_seen');
    $('rows').replaceChildren(...(await Promise.all(items.map(row))));
    const n = total ?? estimate;
    $('total').textContent = `${total === null ? 'about ' : ''}${n} connected${n > items.length ? ` (the ${items.length} seen last shown)` : ''}`;
    $('total').dataset.total = String(n);
    $('empty').classList.toggle('hidden', items.length > 0);
    $('sessions').classList.toggle('hidden', items.length === 0);
    setStatus('');
  } catch (err) {
    setStatus(`error: ${err.message}`);
  }
}
const reload = () => (loading = loading.then(load));

async function kick(t) {
  try {
    await api('DELETE', `/api/v1/things/${encodeURIComponent(t.id)}/session`);
    setStatus(`${t.serial} disconnected`);
  } catch (err) {
    setStatus(`disconnect failed: ${err.message}`);
  }
}

page({
  async start() {
    await reload();
    socket = liveSocket('/api/v1/things/connectivity/stream', {
      onMessage: (m) => { if (m.type === 'connectivity') void reload(); },
      onStatus: (s) => { $('live').textContent = s === 'live' ? 'live updates on' : s; },
      onOpen: () => void reload(),
    });
  },
  stop() {
    socket?.close();
  },
});
