// Shared by every console page: sign-in (development token issuer or a pasted token), the API
// client, a WebSocket with the bearer subprotocol, and DOM helpers. Text goes in with
// textContent only, never parsed as markup: device data is untrusted.

export const $ = (id) => document.getElementById(id);

/** `el('td', { className: 'x' }, 'text', child)`: an element with properties and children (strings become text nodes). */
export function el(tag, props = {}, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(props)) {
    if (k === 'dataset') Object.assign(node.dataset, v);
    else if (k.startsWith('on')) node.addEventListener(k.slice(2), v);
    else node[k] = v;
  }
  node.append(...children.filter((c) => c !== null && c !== undefined && c !== false).map((c) => (typeof c === 'string' ? c : c instanceof Node ? c : String(c))));
  return node;
}

export const session = {
  token: sessionStorage.getItem('gw.token'),
  account: sessionStorage.getItem('gw.account') || '',
  /** the caller's roles (GET /iam/v1/whoami at sign-in) */
  roles: [],
};

/** Roles that may change things in an account (the APIs' WRITE routes). */
export const WRITERS = ['admin', 'operator'];

/** Does the caller hold one of `roles`? A control it does not allow is not offered. */
export const allowed = (roles) => roles.some((r) => session.roles.includes(r));

/** Hides every element whose data-roles (comma-separated) the caller holds none of. */
export function applyRoles(root = document) {
  for (const node of root.querySelectorAll('[data-roles]')) {
    const ok = allowed(node.dataset.roles.split(','));
    node.classList.toggle('hidden', !ok);
    if ('disabled' in node && !ok) node.disabled = true;
  }
}

/**
 * A telemetry value as the device sent it: numbers to the digits they were sent with, without
 * the binary-float noise of a conversion (21.300000000000001 is shown 21.3); others as JSON.
 */
export function fmtValue(v) {
  if (typeof v === 'number') return Number.isFinite(v) ? String(Number(v.toPrecision(15))) : String(v);
  return typeof v === 'string' ? v : JSON.stringify(v);
}

/** An API answer that is not 2xx: its status and problem detail. */
export class ApiError extends Error {
  constructor(status, problem) {
    super(problem.detail || problem.title || `HTTP ${status}`);
    this.status = status;
    this.problem = problem;
  }
}

let onSignOut = () => {};

/** fetch with the bearer token and X-Account-Id; JSON in and out; throws ApiError. */
export async function api(method, path, body) {
  const headers = { authorization: `Bearer ${session.token}` };
  if (session.account) headers['x-account-id'] = session.account;
  if (body !== undefined) headers['content-type'] = 'application/json';
  const res = await fetch(path, { method, headers, body: body === undefined ? undefined : JSON.stringify(body), credentials: 'same-origin' });
  if (res.status === 401) {
    signOut('Your session expired; sign in again.');
    throw new ApiError(401, { detail: 'unauthorized' });
  }
  if (!res.ok) throw new ApiError(res.status, await res.json().catch(() => ({})));
  return res.status === 204 ? null : res.json();
}

/**
 * A WebSocket to `path` authenticated by the bearer subprotocol (browsers cannot set headers on
 * a WebSocket); calls onMessage with each parsed JSON message. Reconnects after a drop (not
 * after close()), backing off while it is refused, and calls onOpen at every subscription, so a
 * page can reload what it may have missed.
 */
export function liveSocket(path, { onMessage, onStatus = () => {}, onOpen = () => {} }) {
  let ws;
  let stopped = false;
  let failures = 0;
  const open = () => {
    const url = `${location.protocol === 'https:' ? 'wss' : 'ws'}://${location.host}${path}`;
    ws = new WebSocket(url, ['bearer', session.token]);
    onStatus('connecting…');
    ws.onmessage = (ev) => {
      const m = JSON.parse(ev.data);
      if (m.type === 'subscribed') {
        failures = 0;
        onStatus('live');
        onOpen();
      }
      onMessage(m);
    };
    ws.onclose = () => {
      if (stopped || !session.token) return;
      failures++;
      onStatus(failures > 2 ? 'live updates unavailable, retrying…' : 'reconnecting…');
      setTimeout(() => !stopped && session.token && open(), Math.min(60_000, 1000 * 2 ** failures));
    };
  };
  open();
  return { close: () => { stopped = true; ws.close(); } };
}

export const fmtTime = (iso) => (iso ? new Date(iso).toLocaleString() : '—');

/** "in 3 days" / "5 minutes ago" */
export function relative(iso) {
  if (!iso) return '';
  const s = (new Date(iso).getTime() - Date.now()) / 1000;
  const units = [['day', 86400], ['hour', 3600], ['minute', 60], ['second', 1]];
  const [unit, size] = units.find(([, n]) => Math.abs(s) >= n) ?? units[3];
  return new Intl.RelativeTimeFormat('en', { numeric: 'auto' }).format(Math.round(s / size), unit);
}

/**
 * The unseen-notification badge kept live on every page: the notification stream (an
 * EventSource after the cookie exchange) refreshes it at each change; reconnects by itself.
 */
let badgeSource;
export async function liveBadge() {
  badgeSource?.close();
  await api('POST', '/console/notifications/stream/auth');
  badgeSource = new EventSource('/console/notifications/stream', { withCredentials: true });
  badgeSource.addEventListener('notification', () => void refreshBadge().catch(() => {}));
  badgeSource.addEventListener('open', () => void refreshBadge().catch(() => {}));
}

export async function refreshBadge() {
  const { count } = await api('GET', '/console/notifications/unseen/count');
  $('badge').textContent = String(count);
  $('badge').classList.toggle('zero', count === 0);
  $('badge').classList.remove('hidden');
}

export function signOut(message) {
  session.token = null;
  sessionStorage.removeItem('gw.token');
  sessionStorage.removeItem('gw.account');
  onSignOut();
  badgeSource?.close();
  badgeSource = undefined;
  session.roles = [];
  $('app').classList.add('hidden');
  $('signout').classList.add('hidden');
  $('signin').classList.remove('hidden');
  $('who').textContent = '';
  $('badge').classList.add('hidden');
  $('signin-error').textContent = message || '';
}

/**
 * Runs the page: `start()` once signed in (now, when the tab holds a token, or after the form);
 * `stop()` on sign-out.
 */
export function page({ start, stop = () => {} }) {
  onSignOut = stop;
  document.querySelector(`nav a[data-nav="${document.body.dataset.page === 'device' ? 'fleet' : document.body.dataset.page}"]`)?.classList.add('active');
  const run = async () => {
    $('signin').classList.add('hidden');
    $('app').classList.remove('hidden');
    $('signout').classList.remove('hidden');
    try {
      const me = await api('GET', '/iam/v1/whoami');
      session.roles = me.roles ?? [];
      if (!session.account && me.account_id) session.account = me.account_id;
    } catch {
      session.roles = [];
    }
    $('who').textContent = `${session.account ? `account ${session.account.slice(0, 8)}… · ` : ''}${session.roles.join(', ') || 'no roles'}`;
    applyRoles();
    refreshBadge().catch(() => {});
    if (document.body.dataset.page !== 'notifications') liveBadge().catch(() => {});
    await start();
  };
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
      session.token = token;
      session.account = $('account').value.trim() || (realm.startsWith('acc-') ? realm.slice(4) : '');
      sessionStorage.setItem('gw.token', session.token);
      sessionStorage.setItem('gw.account', session.account);
      await run();
    } catch (err) {
      $('signin-error').textContent = err.message;
    }
  });
  $('signout').onclick = () => signOut();
  if (session.token) void run();
  else $('signin').classList.remove('hidden');
}

/** The page's status line. */
export const setStatus = (text) => { $('status').textContent = text; };

/** A secret the API returns once: shown in the page's #secret-once box until dismissed, never stored by the page. */
export function showSecret(title, value) {
  $('secret-title').textContent = title;
  $('secret-value').textContent = value;
  $('secret-once').classList.remove('hidden');
  $('secret-dismiss').onclick = () => {
    $('secret-value').textContent = '';
    $('secret-once').classList.add('hidden');
  };
}
