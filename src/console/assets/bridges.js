// Bridges page: the account's data bridges and rules with their delivery counts, lag and last
// error (GET /api/v1/bridges, /api/v1/rules, polled); operators enable and disable rules.
import { $, allowed, api, el, fmtTime, page, setStatus, WRITERS } from './common.js';

let timer;

function bridgeRow(b) {
  return el('tr', { dataset: { bridgeId: b.id } },
    el('td', {}, b.name), el('td', {}, b.type), el('td', {}, b.url), el('td', {}, el('code', {}, b.subject_prefix)),
    el('td', {}, b.has_credentials ? 'sealed' : 'none'));
}

function ruleRow(r, bridges) {
  const toggle = allowed(WRITERS)
    ? el('button', { type: 'button', className: 'toggle', onclick: () => setEnabled(r, r.status === 'DISABLED') }, r.status === 'DISABLED' ? 'Enable' : 'Disable')
    : null;
  return el('tr', { dataset: { ruleId: r.id, status: r.status } },
    el('td', {}, r.name), el('td', {}, el('code', {}, r.from)), el('td', { className: 'bridge' }, bridges.get(r.bridge_id)?.name ?? r.bridge_id, r.format === 'batch' ? ' (batches)' : ''),
    el('td', { className: `rule-status ${r.status.toLowerCase()}`, title: r.failing_since ? `failing since ${fmtTime(r.failing_since)}` : '' }, r.status),
    el('td', { className: 'delivered' }, String(r.delivered)), el('td', { className: 'failed' }, String(r.failed)),
    el('td', { className: 'lag-messages' }, String(r.lag.messages)), el('td', { className: 'lag-seconds' }, r.lag.seconds.toFixed(1)),
    el('td', { className: 'last-error', title: r.last_error_at ? fmtTime(r.last_error_at) : '' }, r.last_error ?? '—'),
    el('td', {}, toggle));
}

async function setEnabled(r, enabled) {
  try {
    await api('PATCH', `/api/v1/rules/${encodeURIComponent(r.id)}`, { enabled });
    await load();
  } catch (err) {
    setStatus(`error: ${err.message}`);
  }
}

async function load() {
  try {
    const [{ items: bridges }, { items: rules }] = await Promise.all([api('GET', '/api/v1/bridges'), api('GET', '/api/v1/rules')]);
    const byId = new Map(bridges.map((b) => [b.id, b]));
    $('bridge-rows').replaceChildren(...bridges.map(bridgeRow));
    $('rule-rows').replaceChildren(...rules.map((r) => ruleRow(r, byId)));
    $('no-bridges').classList.toggle('hidden', bridges.length > 0);
    $('bridges').classList.toggle('hidden', bridges.length === 0);
    $('no-rules').classList.toggle('hidden', rules.length > 0);
    $('rules').classList.toggle('hidden', rules.length === 0);
    setStatus('');
  } catch (err) {
    setStatus(`error: ${err.message}`);
  }
}

page({
  async start() {
    await load();
    timer = setInterval(load, 3000);
  },
  stop() {
    clearInterval(timer);
  },
});
