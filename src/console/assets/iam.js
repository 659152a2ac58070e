// Access page: the account's static access keys (created with the secret shown once, activated,
// deactivated, deleted) and the roles assigned to its users (what their keys carry). Account
// admins only: other roles are told so and offered nothing.
import { $, allowed, api, el, fmtTime, page, relative, session, setStatus, showSecret } from './common.js';

const base = () => `/iam/v1/accounts/${encodeURIComponent(session.account)}`;

/** users seen on this page: the owners of keys and those whose roles were assigned here */
const users = new Set();

async function loadKeys() {
  const keys = await api('GET', `${base()}/credentials`);
  for (const k of keys) users.add(k.principal_id);
  $('key-rows').replaceChildren(...keys.map((k) => el('tr', { dataset: { keyId: k.id, status: k.status } },
    el('td', {}, el('code', {}, k.access_key_id)), el('td', {}, k.principal_id), el('td', {}, k.description),
    el('td', {}, el('span', { className: k.status === 'ACTIVE' ? 'ok' : 'meta' }, k.status.toLowerCase())),
    el('td', { title: fmtTime(k.last_used_at) }, k.last_used_at ? relative(k.last_used_at) : 'never'),
    el('td', { title: fmtTime(k.created_at) }, new Date(k.created_at).toLocaleDateString()),
    el('td', { className: 'actions' },
      el('button', { type: 'button', className: 'toggle', onclick: () => setStatusOf(k, k.status === 'ACTIVE' ? 'INACTIVE' : 'ACTIVE') }, k.status === 'ACTIVE' ? 'Deactivate' : 'Activate'),
      el('button', { type: 'button', className: 'danger delete', onclick: () => removeKey(k) }, 'Delete')))));
  $('keys-empty').classList.toggle('hidden', keys.length > 0);
  $('keys').classList.toggle('hidden', keys.length === 0);
}

async function setStatusOf(k, status) {
  try {
    await api('PUT', `${base()}/credentials/${k.id}`, { status });
  } catch (err) {
    setStatus(`error: ${err.message}`);
  }
  await loadKeys();
}

async function removeKey(k) {
  if (!confirm(`Delete access key ${k.access_key_id}? Anything using it stops working.`)) return;
  try {
    await api('DELETE', `${base()}/credentials/${k.id}`);
  } catch (err) {
    setStatus(`error: ${err.message}`);
  }
  await loadKeys();
  await loadUsers();
}

async function loadUsers() {
  const rows = await Promise.all([...users].sort().map((u) => api('GET', `${base()}/users/${encodeURIComponent(u)}/roles`)));
  $('user-rows').replaceChildren(...rows.map((r) => el('tr', { dataset: { principal: r.principal_id } },
    el('td', {}, r.principal_id), el('td', { className: 'assigned' }, r.roles.join(', ') || '—'),
    el('td', {}, r.idp_roles.join(', ') || '—'), el('td', { className: 'key-roles' }, r.key_roles.join(', ') || '—'),
    el('td', {}, el('button', { type: 'button', onclick: () => { $('u-principal').value = r.principal_id; $('u-roles').value = r.roles.join(','); $('u-roles').focus(); } }, 'Edit')))));
}

$('key-form').addEventListener('submit', async (e) => {
  e.preventDefault();
  try {
    const k = await api('POST', `${base()}/credentials`, { principal_id: $('k-principal').value.trim(), description: $('k-description').value.trim() || undefined });
    showSecret(`Secret key of ${k.access_key_id} (user ${k.principal_id})`, k.secret_key);
    $('key-form').reset();
    await loadKeys();
    await loadUsers();
  } catch (err) {
    setStatus(`error: ${err.message}`);
  }
});
$('user-form').addEventListener('submit', async (e) => {
  e.preventDefault();
  const principal = $('u-principal').value.trim();
  try {
    await api('PUT', `${base()}/users/${encodeURIComponent(principal)}/roles`, { roles: $('u-roles').value.split(',').map((r) => r.trim()).filter(Boolean) });
    users.add(principal);
    await loadUsers();
    setStatus('');
  } catch (err) {
    setStatus(`error: ${err.message}`);
  }
});

page({
  async start() {
    $('not-admin').classList.toggle('hidden', allowed(['admin']));
    if (!allowed(['admin'])) return;
    try {
      await loadKeys();
      await loadUsers();
      setStatus('');
    } catch (err) {
      setStatus(`error: ${err.message}`);
    }
  },
});
