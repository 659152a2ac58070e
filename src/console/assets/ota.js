// OTA page: target filters (a live preview of the things a filter matches while it is edited),
// rollouts created from a filter, their progress per group, and start/pause/resume/cancel.
// Controls the caller's roles do not allow are not offered (data-roles, allowed()).
import { $, allowed, api, el, fmtTime, page, setStatus, WRITERS } from './common.js';

/** the next state's verbs a rollout in `state` accepts */
const VERBS = { READY: ['start', 'cancel'], RUNNING: ['pause', 'cancel'], PAUSED: ['resume', 'cancel'] };
let filters = [];
let timer;

/** The form's query, as the API stores it (only what is set). */
function formQuery() {
  const q = {};
  const model = $('tf-model').value.trim();
  if (model) q.model = model;
  if ($('tf-state').value) q.state = [$('tf-state').value];
  const tags = $('tf-tags').value.split(',').map((t) => t.trim()).filter(Boolean);
  if (tags.length) q.tags = tags;
  if ($('tf-connected').value) q.connected = $('tf-connected').value === 'true';
  return q;
}

const describe = (q) => Object.entries(q).map(([k, v]) => `${k}=${Array.isArray(v) ? v.join(',') : v}`).join(' · ') || 'every thing';

/** The things the form's query matches now (the fleet list with the same filters). */
async function preview() {
  const q = formQuery();
  const params = new URLSearchParams({ limit: '5' });
  for (const [k, v] of Object.entries(q)) params.set(k, Array.isArray(v) ? v.join(',') : String(v));
  try {
    const { items, total, total_estimate: estimate } = await api('GET', `/api/v1/things?${params}`);
    const n = total ?? estimate;
    $('tf-count').textContent = `${total === null ? 'about ' : ''}${n} thing${n === 1 ? '' : 's'}`;
    $('tf-count').dataset.count = String(n);
    $('tf-sample').textContent = items.length ? `(${items.map((t) => t.serial).join(', ')}${n > items.length ? ', …' : ''})` : '';
  } catch (err) {
    $('tf-count').textContent = `preview failed: ${err.message}`;
  }
}
const schedulePreview = () => { clearTimeout(timer); timer = setTimeout(preview, 250); };

async function loadFilters() {
  const { items } = await api('GET', '/api/v1/ota/target-filters?limit=500');
  filters = items;
  $('filter-rows').replaceChildren(...items.map((f) => el('tr', { dataset: { filterId: f.id } },
    el('td', {}, f.name), el('td', { className: 'meta' }, describe(f.query)), el('td', {}, fmtTime(f.updated_at)),
    el('td', {}, allowed(WRITERS) ? el('button', { type: 'button', className: 'delete-filter', onclick: () => deleteFilter(f) }, 'Delete') : null))));
  $('filters-empty').classList.toggle('hidden', items.length > 0);
  $('filters-table').classList.toggle('hidden', items.length === 0);
  $('ro-filter').replaceChildren(...items.map((f) => el('option', { value: f.id }, f.name)));
}

async function deleteFilter(f) {
  try {
    await api('DELETE', `/api/v1/ota/target-filters/${f.id}`);
    await loadFilters();
  } catch (err) {
    setStatus(`error: ${err.message}`);
  }
}

function groupBar(g) {
  const done = g.succeeded + g.failed + g.skipped;
  return el('div', { className: 'group', dataset: { index: String(g.index), state: g.state }, title: `group ${g.index + 1}: ${g.state}` },
    el('span', { className: 'meta' }, `#${g.index + 1} ${g.state.toLowerCase()}`),
    el('progress', { max: Math.max(1, g.total), value: done }),
    el('span', { className: 'meta' }, `${g.succeeded} ok · ${g.failed} failed${g.skipped ? ` · ${g.skipped} skipped` : ''} / ${g.total}`));
}

async function rolloutRow(r) {
  const { items: groups } = await api('GET', `/api/v1/ota/rollouts/${r.id}/groups`);
  const verbs = allowed(WRITERS) ? VERBS[r.state] ?? [] : [];
  return el('tr', { dataset: { rolloutId: r.id, state: r.state } },
    el('td', {}, r.name), el('td', {}, r.software.version), el('td', {}, el('span', { className: 'state' }, r.state)),
    el('td', {}, String(r.total_targets)),
    el('td', { className: 'groups' }, ...groups.map(groupBar)),
    el('td', { title: fmtTime(r.created_at) }, new Date(r.created_at).toLocaleDateString()),
    el('td', { className: 'actions' }, ...verbs.map((verb) => el('button', { type: 'button', className: verb === 'cancel' ? 'danger' : '', dataset: { verb }, onclick: () => control(r, verb) }, verb[0].toUpperCase() + verb.slice(1)))));
}

async function loadRollouts() {
  setStatus('loading…');
  try {
    const { items } = await api('GET', '/api/v1/ota/rollouts?limit=50');
    $('rollout-rows').replaceChildren(...(await Promise.all(items.map(rolloutRow))));
    $('rollouts-empty').classList.toggle('hidden', items.length > 0);
    $('rollouts').classList.toggle('hidden', items.length === 0);
    setStatus('');
  } catch (err) {
    setStatus(`error: ${err.message}`);
  }
}

async function control(r, verb) {
  try {
    await api('POST', `/api/v1/ota/rollouts/${r.id}/${verb}`);
  } catch (err) {
    setStatus(`${verb} failed: ${err.message}`);
    return;
  }
  await loadRollouts();
}

$('filter-form').addEventListener('input', schedulePreview);
$('filter-form').addEventListener('submit', async (e) => {
  e.preventDefault();
  $('tf-result').textContent = '';
  try {
    const f = await api('POST', '/api/v1/ota/target-filters', { name: $('tf-name').value.trim(), query: formQuery() });
    $('tf-result').textContent = `saved ${f.name}`;
    $('tf-result').className = 'ok';
    await loadFilters();
    $('ro-filter').value = f.id;
  } catch (err) {
    $('tf-result').textContent = err.message;
    $('tf-result').className = 'error';
  }
});
$('rollout-form').addEventListener('submit', async (e) => {
  e.preventDefault();
  $('ro-result').textContent = '';
  try {
    const r = await api('POST', '/api/v1/ota/rollouts', {
      name: $('ro-name').value.trim(), filter_id: $('ro-filter').value,
      software: { version: $('ro-version').value.trim(), url: $('ro-url').value.trim(), sha256: $('ro-sha').value.trim(), size: Number($('ro-size').value) },
      groups: Number($('ro-groups').value), success_threshold: Number($('ro-success').value), error_threshold: Number($('ro-error').value),
    });
    $('ro-result').textContent = `created ${r.name}: ${r.total_targets} targets in ${r.groups} groups (READY)`;
    $('ro-result').className = 'ok';
    await loadRollouts();
  } catch (err) {
    $('ro-result').textContent = err.message;
    $('ro-result').className = 'error';
  }
});

let poll;
page({
  async start() {
    await Promise.all([loadFilters().catch((err) => setStatus(`error: ${err.message}`)), loadRollouts()]);
    if (allowed(WRITERS)) await preview();
    // progress moves as devices report: the list is read again every 5 s while the page is open
    poll = setInterval(() => { if (!document.hidden) void loadRollouts(); }, 5000);
  },
  stop() {
    clearInterval(poll);
  },
});
