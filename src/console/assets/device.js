// Device page /console/things/{id}: identity, certificate, connectivity (live), live telemetry
// chart (WebSocket), history chart, twin with a desired-state editor, commands, revoke.
import { $, api, ApiError, el, fmtTime, fmtValue, liveSocket, page, relative, setStatus } from './common.js';
import { lineChart } from './chart.js';

const thingId = decodeURIComponent(location.pathname.split('/').filter(Boolean).pop() ?? '');
const base = `/api/v1/things/${encodeURIComponent(thingId)}`;
/** live points kept per key */
const LIVE_POINTS = 120;
const FINAL = new Set(['succeeded', 'failed', 'expired']);

const live = { values: {}, series: new Map() };
let thing;
let desiredVersion = 0;
let sockets = [];
let liveChart;
let historyChart;

const json = (v) => JSON.stringify(v, null, 2);

function facts(dl, pairs) {
  dl.replaceChildren(...pairs.flatMap(([k, v, cls]) => [el('dt', {}, k), el('dd', cls ? { className: cls } : {}, v ?? '—')]));
}

/** Reads the thing again (connectivity, certificate, revocation) and shows it. */
async function refreshDetail() {
  thing = await api('GET', base);
  const t = thing;
  $('title').textContent = `${t.model} · ${t.serial}`;
  document.title = `${t.serial} · Device Gateway console`;
  $('revoke-name').textContent = t.serial;
  facts($('identity'), [
    ['Thing id', t.id, 'thing-id'],
    ['Manufacturer', t.manufacturer],
    ['Model', t.model],
    ['Serial', t.serial, 'serial'],
    ['State', t.state, 'state'],
    ['Tags', t.tags.length ? t.tags.join(', ') : 'none'],
    ['Claim group', t.claim_group_id],
    ['Enrolled', t.enrolled_at ? `${fmtTime(t.enrolled_at)}${t.enrolled_by ? ` by ${t.enrolled_by}` : ''}` : null],
    ['Created', fmtTime(t.created_at)],
    ['Revoked', t.revoked ? `yes, ${fmtTime(t.revoked_at)}` : 'no', t.revoked ? 'revoked-flag' : ''],
  ]);
  const c = t.certificate;
  facts($('certificate'), c ? [
    ['Serial', c.serial, 'cert-serial'],
    ['Expires', `${fmtTime(c.not_after)} (${relative(c.not_after)})`, 'cert-expiry'],
    ['Revoked', c.revoked ? 'yes' : 'no'],
  ] : [['Certificate', 'none issued']]);
  const k = t.connectivity;
  showConnected(t.connected);
  facts($('connectivity'), [
    ['Connected', t.connected ? `yes, since ${fmtTime(k?.connected_at)}` : 'no', 'connected'],
    ['Last seen', k?.last_seen ? `${fmtTime(k.last_seen)} (${relative(k.last_seen)})` : 'never'],
    ['Disconnected', fmtTime(k?.disconnected_at)],
    ['MQTT protocol', k?.protocol_version === 5 ? 'MQTT 5' : k?.protocol_version === 4 ? 'MQTT 3.1.1' : '—'],
  ]);
  $('revoke').disabled = t.revoked;
  $('revoked-badge').classList.toggle('hidden', !t.revoked);
}

function showConnected(connected) {
  $('conn').classList.toggle('connected', connected);
  $('conn-text').textContent = connected ? 'connected' : 'offline';
}

async function refreshTwin() {
  const twin = await api('GET', `${base}/twin`);
  $('reported').textContent = json(twin.reported.state);
  $('reported-version').textContent = `version ${twin.reported.version}${twin.reported.updatedAt ? ` · ${fmtTime(twin.reported.updatedAt)}` : ''}`;
  desiredVersion = twin.desired.version;
  $('desired-version').textContent = `version ${twin.desired.version}${twin.desired.updatedAt ? ` · ${fmtTime(twin.desired.updatedAt)}` : ''}`;
  if (!$('desired').dataset.dirty) $('desired').value = json(twin.desired.state);
}

// ---------------------------------------------------------------- live telemetry

function showValues() {
  const keys = Object.keys(live.values).sort();
  $('values').replaceChildren(...keys.map((key) => el('span', { className: 'value', dataset: { key } }, key, el('b', {}, fmtValue(live.values[key])))));
  if (!keys.length) $('values').append(el('span', { className: 'meta' }, 'No telemetry yet.'));
  $('h-keys').replaceChildren(...keys.map((key) => el('option', { value: key })));
  if (!$('h-key').value) $('h-key').value = keys.find((key) => typeof live.values[key] === 'number') ?? '';
}

function onTelemetry(m) {
  if (!m.telemetry) return;
  const t = new Date(m.at).getTime();
  for (const [key, v] of Object.entries(m.telemetry)) {
    live.values[key] = v;
    if (typeof v !== 'number' || !Number.isFinite(v)) continue;
    let points = live.series.get(key);
    if (!points) live.series.set(key, (points = []));
    points.push({ t, v });
    if (points.length > LIVE_POINTS) points.shift();
  }
  showValues();
  showLiveChart();
}

/** The live chart shows one key (keys differ in scale); the select lists every numeric key seen. */
function showLiveChart() {
  const select = $('live-key');
  const keys = [...live.series.keys()].sort();
  if (keys.join('\n') !== [...select.options].map((o) => o.value).join('\n')) {
    const chosen = select.value;
    select.replaceChildren(...keys.map((key) => el('option', { value: key }, key)));
    select.value = keys.includes(chosen) ? chosen : keys[0];
  }
  const key = select.value;
  liveChart.render(key ? [{ name: key, points: live.series.get(key) }] : []);
}

// ---------------------------------------------------------------- history

async function loadHistory() {
  const key = $('h-key').value.trim();
  if (!key) {
    $('h-status').textContent = 'Choose a key.';
    return;
  }
  const to = new Date();
  const from = new Date(to.getTime() - Number($('h-range').value));
  const q = new URLSearchParams({ key, from: from.toISOString(), to: to.toISOString() });
  const bucket = $('h-bucket').value;
  if (bucket) q.set('bucket', bucket);
  $('h-status').textContent = 'loading…';
  try {
    const h = await api('GET', `${base}/telemetry?${q}`);
    if (h.buckets) {
      const rows = h.buckets.filter((b) => b.count > 0);
      historyChart.render([{ name: `${key} (avg per ${bucket})`, points: rows.map((b) => ({ t: Date.parse(b.start), v: b.avg })), band: rows.map((b) => ({ t: Date.parse(b.start), lo: b.min, hi: b.max })) }]);
      $('h-status').textContent = `${rows.length} bucket${rows.length === 1 ? '' : 's'} of ${bucket} (band: min to max)`;
    } else {
      const points = h.points.filter((p) => typeof p.value === 'number').map((p) => ({ t: Date.parse(p.at), v: p.value }));
      historyChart.render([{ name: key, points }]);
      const skipped = h.points.length - points.length;
      $('h-status').textContent = `${points.length} point${points.length === 1 ? '' : 's'}${skipped ? ` (${skipped} not numeric)` : ''}${h.nextFrom ? ' · the oldest part of the range only: choose a resolution to see all of it' : ''}`;
    }
  } catch (err) {
    $('h-status').textContent = `error: ${err.message}`;
  }
}

// ---------------------------------------------------------------- twin, commands, revoke

function result(id, ok, text) {
  $(id).className = ok ? 'ok' : 'error';
  $(id).textContent = text;
}

async function saveDesired(e) {
  e.preventDefault();
  let desired;
  try {
    desired = JSON.parse($('desired').value);
  } catch (err) {
    return result('desired-result', false, `not JSON: ${err.message}`);
  }
  if (!desired || typeof desired !== 'object' || Array.isArray(desired)) return result('desired-result', false, 'the desired state must be a JSON object');
  try {
    const saved = await api('PUT', `${base}/twin/desired`, { desired, ifVersion: desiredVersion });
    delete $('desired').dataset.dirty;
    result('desired-result', true, `saved as version ${saved.version}; sent to the device`);
  } catch (err) {
    result('desired-result', false, err.status === 409 ? `changed meanwhile: ${err.message}` : err.message);
  }
  await refreshTwin();
}

async function sendCommand(e) {
  e.preventDefault();
  const body = { name: $('c-name').value.trim() };
  const raw = $('c-payload').value.trim();
  if (raw) {
    try {
      body.payload = JSON.parse(raw);
    } catch (err) {
      return showCommand('error', `payload is not JSON: ${err.message}`);
    }
  }
  if ($('c-ttl').value) body.ttlSeconds = Number($('c-ttl').value);
  $('c-send').disabled = true;
  showCommand('sending', 'sending…');
  try {
    const r = await api('POST', `${base}/commands`, body);
    if (body.ttlSeconds === undefined) {
      showCommand('completed', 'completed', r.response);
    } else if (FINAL.has(r.status)) {
      // the device answered before the 202 was sent: its reply is read with the stored command, at once
      await followCommand(r.id, 0);
    } else {
      showCommand(r.status, `${r.status} (expires ${fmtTime(r.expiresAt)})`);
      await followCommand(r.id);
    }
  } catch (err) {
    const what = err instanceof ApiError && err.status === 409 ? 'not delivered' : err instanceof ApiError && err.status === 504 ? 'timed out' : 'refused';
    showCommand('error', `${what}: ${err.message}`);
  } finally {
    $('c-send').disabled = false;
  }
}

function showCommand(status, text, response) {
  $('c-status').textContent = text;
  $('c-status').className = status === 'error' || status === 'failed' || status === 'expired' ? 'error' : status === 'completed' || status === 'succeeded' ? 'ok' : 'meta';
  $('c-status').dataset.status = status;
  $('c-result').classList.toggle('hidden', response === undefined);
  $('c-result').textContent = response === undefined ? '' : json(response);
}

/** Polls a command sent with a time to live until it succeeded, failed or expired (the first read after `wait` ms). */
async function followCommand(id, wait = 1000) {
  for (;;) {
    await new Promise((r) => setTimeout(r, wait));
    wait = 1000;
    const c = await api('GET', `${base}/commands/${encodeURIComponent(id)}`);
    const final = FINAL.has(c.status);
    showCommand(c.status, `${c.status}${c.deliveredAt ? ` · delivered ${fmtTime(c.deliveredAt)}` : ''}${final ? '' : ` · expires ${fmtTime(c.expiresAt)}`}`, final && c.status !== 'expired' ? c.response : undefined);
    if (final || !sockets.length) return;
  }
}

function askRevoke() {
  $('revoke-dialog').returnValue = '';
  $('revoke-dialog').showModal();
}

async function revoke() {
  if ($('revoke-dialog').returnValue !== 'revoke') return;
  try {
    const r = await api('DELETE', base);
    result('revoke-result', true, `revoked: ${r.revokedSerials.length} certificate(s) on the CRL${r.disconnected ? '; the device was disconnected' : ''}`);
    await refreshDetail();
  } catch (err) {
    result('revoke-result', false, err.message);
  }
}

// ---------------------------------------------------------------- start

$('desired').addEventListener('input', () => { $('desired').dataset.dirty = '1'; });
$('desired-form').addEventListener('submit', (e) => void saveDesired(e));
$('command-form').addEventListener('submit', (e) => void sendCommand(e));
$('history-form').addEventListener('submit', (e) => {
  e.preventDefault();
  void loadHistory();
});
$('revoke').onclick = askRevoke;
$('live-key').onchange = showLiveChart;
$('revoke-dialog').addEventListener('close', () => void revoke());

page({
  async start() {
    liveChart = lineChart($('live-chart'), { emptyText: 'Waiting for telemetry…' });
    historyChart = lineChart($('history-chart'), { emptyText: 'Choose a key and a range.' });
    try {
      await refreshDetail();
    } catch (err) {
      setStatus('');
      $('not-found').textContent = err.status === 404 || err.status === 400 ? `Thing ${thingId} was not found in this account.` : `error: ${err.message}`;
      $('not-found').classList.remove('hidden');
      return;
    }
    $('device').classList.remove('hidden');
    live.values = { ...(thing.telemetry?.values ?? {}) };
    showValues();
    setStatus('');
    await refreshTwin().catch((err) => setStatus(`twin: ${err.message}`));
    sockets = [
      liveSocket(`${base}/telemetry/stream`, { onMessage: onTelemetry, onStatus: (s) => { $('live').textContent = s; } }),
      liveSocket(`/api/v1/things/connectivity/stream?thingId=${encodeURIComponent(thingId)}`, {
        onMessage: (m) => {
          if (m.type !== 'connectivity') return;
          showConnected(m.connected);
          void refreshDetail().then(refreshTwin).catch(() => {});
        },
        onOpen: () => void refreshDetail().catch(() => {}),
      }),
    ];
    if ($('h-key').value) void loadHistory();
  },
  stop() {
    for (const s of sockets) s.close();
    sockets = [];
  },
});
