// Provisioning page: claim groups (shared secret shown once), enrollment tokens, factory services
// (health check, credential rotation), provisioning runs with their legs. Controls the caller's
// roles do not allow are not offered.
import { $, allowed, api, el, fmtTime, page, relative, setStatus, showSecret, WRITERS } from './common.js';

const ADMIN = ['admin'];

async function loadGroups() {
  const { items } = await api('GET', '/api/v1/things/claim-groups?limit=200');
  $('group-rows').replaceChildren(...items.map((g) => el('tr', { dataset: { groupId: g.id, status: g.status } },
    el('td', {}, el('a', { href: `/console/things?claim_group=${encodeURIComponent(g.id)}` }, g.name)),
    el('td', {}, el('span', { className: 'state' }, g.status)),
    el('td', {}, `${g.consumed} / ${g.maxDevices}`),
    el('td', { title: fmtTime(g.expiresAt) }, g.expiresAt ? relative(g.expiresAt) : '—'),
    el('td', {}, allowed(WRITERS) && !g.revoked && g.status !== 'expired'
      ? el('button', { type: 'button', className: 'danger revoke-group', onclick: () => revokeGroup(g) }, 'Revoke secret') : null))));
}

async function revokeGroup(g) {
  try {
    await api('DELETE', `/api/v1/things/claim-groups/${g.id}`);
  } catch (err) {
    setStatus(`revoke failed: ${err.message}`);
  }
  await loadGroups();
}

function health(s) {
  if (!s.last_health_check_at) return el('span', { className: 'meta' }, 'never checked');
  const ok = s.last_health_check_status === 'HEALTHY';
  return el('span', { className: ok ? 'ok' : 'error', title: fmtTime(s.last_health_check_at) },
    `${ok ? 'healthy' : 'unhealthy'}${s.last_health_check_latency_ms !== null ? ` · ${s.last_health_check_latency_ms} ms` : ''}${s.last_health_check_error ? ` · ${s.last_health_check_error}` : ''} · ${relative(s.last_health_check_at)}`);
}

async function loadServices() {
  const { items } = await api('GET', '/api/v1/factory-services?limit=100');
  $('service-rows').replaceChildren(...items.map((s) => {
    const active = s.state === 'ACTIVE';
    const actions = [];
    if (active && allowed(WRITERS)) actions.push(el('button', { type: 'button', className: 'check', onclick: () => serviceAction(s, 'health-check') }, 'Check health'));
    if (active && allowed(ADMIN)) {
      actions.push(s.rotation_pending
        ? el('button', { type: 'button', className: 'confirm-rotation', onclick: () => serviceAction(s, 'confirm-rotation') }, 'Retire old secret')
        : el('button', { type: 'button', className: 'rotate', onclick: () => serviceAction(s, 'rotate-credentials') }, 'Rotate secret'));
    }
    return el('tr', { dataset: { serviceId: s.id } },
      el('td', {}, s.role), el('td', { className: 'meta' }, s.model_id.slice(0, 8)), el('td', {}, s.endpoint_url),
      el('td', {}, el('code', {}, s.access_key_id), s.rotation_pending ? el('div', { className: 'meta' }, 'rotation pending: both secrets work') : null),
      el('td', {}, s.state), el('td', { className: 'health' }, health(s)), el('td', { className: 'actions' }, ...actions));
  }));
  $('services-empty').classList.toggle('hidden', items.length > 0);
  $('services').classList.toggle('hidden', items.length === 0);
}

async function serviceAction(s, verb) {
  try {
    const res = await api('POST', `/api/v1/factory-services/${s.id}/${verb}`);
    if (res?.secret_access_key) showSecret(`New secret of ${s.access_key_id} (the old one works until you retire it)`, res.secret_access_key);
  } catch (err) {
    setStatus(`${verb} failed: ${err.message}`);
  }
  await loadServices();
}

function leg(l) {
  const last = l.history[l.history.length - 1];
  return el('div', { className: `leg ${l.state.toLowerCase()}`, dataset: { leg: l.name, state: l.state } },
    el('b', {}, l.name), ` ${l.state.toLowerCase()} · ${l.attempts} attempt${l.attempts === 1 ? '' : 's'}`,
    l.error || last?.error ? el('div', { className: 'error' }, l.error ?? last.error) : null);
}

async function loadRuns() {
  setStatus('loading…');
  try {
    const state = $('run-state').value;
    const { items } = await api('GET', `/api/v1/provisioning-runs?limit=50${state ? `&state=${state}` : ''}`);
    $('run-rows').replaceChildren(...items.map((r) => el('tr', { dataset: { runId: r.id, state: r.state } },
      el('td', {}, el('a', { href: `/console/things/${encodeURIComponent(r.thing_id)}` }, r.thing_id.slice(0, 8))),
      el('td', {}, el('span', { className: 'state' }, r.state)),
      el('td', { title: fmtTime(r.started_at) }, relative(r.started_at)),
      el('td', {}, ...r.legs.map(leg)),
      el('td', { className: 'error' }, r.error ?? ''))));
    $('runs-empty').classList.toggle('hidden', items.length > 0);
    $('runs').classList.toggle('hidden', items.length === 0);
    setStatus('');
  } catch (err) {
    setStatus(`error: ${err.message}`);
  }
}

$('group-form').addEventListener('submit', async (e) => {
  e.preventDefault();
  try {
    const g = await api('POST', '/api/v1/things/claim-groups', { name: $('cg-name').value.trim(), maxDevices: Number($('cg-max').value), ttlDays: Number($('cg-ttl').value) });
    showSecret(`Shared secret of claim group ${g.name}`, g.sharedSecret);
    $('group-form').reset();
    await loadGroups();
  } catch (err) {
    setStatus(`claim group: ${err.message}`);
  }
});
$('token-form').addEventListener('submit', async (e) => {
  e.preventDefault();
  $('et-result').textContent = '';
  try {
    const t = await api('POST', '/api/v1/things', { manufacturer: $('et-manufacturer').value.trim(), model: $('et-model').value.trim(), serial: $('et-serial').value.trim() });
    showSecret(`Enrollment token of ${$('et-serial').value.trim()} (thing ${t.thingId}; expires ${fmtTime(t.expiresAt)})`, t.enrollmentToken);
  } catch (err) {
    $('et-result').textContent = err.message;
    $('et-result').className = 'error';
  }
});
$('run-state').onchange = () => void loadRuns();

page({
  async start() {
    const fail = (what) => (err) => setStatus(`${what}: ${err.message}`);
    await Promise.all([loadGroups().catch(fail('claim groups')), loadServices().catch(fail('factory services')), loadRuns()]);
  },
});
