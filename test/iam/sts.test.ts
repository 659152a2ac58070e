import crypto from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createAccount, type TestAccount } from '../helpers/accounts.js';
import { expectProblem, startTestGateway, type TestGateway } from '../helpers/gateway.js';
import { CLEANUP_JOB } from '../../src/iam/index.js';
import { ManualClock } from '../../src/lib/clock.js';
import { waitFor } from '../helpers/wait.js';
import { idcUser, platformToken, svc, svcHeaders } from './helpers.js';

let gw: TestGateway;
/** STS time (issue, expiry, revocation, cleanup) follows this clock; JWTs keep the wall clock. */
const clock = new ManualClock();
let acct: TestAccount;
let idc: string;
beforeAll(async () => {
  gw = await startTestGateway({}, { clock });
  acct = await createAccount(gw);
  idc = await idcUser(gw, acct.id, 'fed-ann', ['operator']);
});
afterAll(() => gw?.close());

const sessionToken = (token: string, body: unknown) => gw.http.post('/iam/v1/sts/get-session-token', body, { token });

describe('STS', () => {
  it('400 for a JWT of an acc-* realm or of the platform realm (and for SVC credentials)', async () => {
    for (const token of [acct.admin, await platformToken(gw)]) {
      const b = expectProblem(await sessionToken(token, { account_id: acct.id }), 400);
      expect(b.detail).toMatch(/only a bearer JWT from an identity-center realm/);
      expectProblem(await gw.http.get(`/iam/v1/sts/sessions?accountId=${acct.id}`, { token, headers: { 'x-account-id': acct.id } }), 400);
      expectProblem(await gw.http.post('/iam/v1/sts/revoke-session', { access_key_id: 'ASIA0000000000000000' }, { token, headers: { 'x-account-id': acct.id } }), 400);
      expectProblem(await gw.http.post('/iam/v1/sts/revoke-all-sessions', { account_id: acct.id }, { token, headers: { 'x-account-id': acct.id } }), 400);
    }
    const creds = (await sessionToken(idc, { account_id: acct.id })).body;
    expectProblem(await gw.http.post('/iam/v1/sts/get-session-token', { account_id: acct.id }, { headers: svcHeaders(creds) }), 400);
    expectProblem(await gw.http.post('/iam/v1/sts/get-session-token', { account_id: acct.id }), 401);
    // authentication comes before body validation
    expectProblem(await gw.http.post('/iam/v1/sts/get-session-token', { bogus: 1 }), 401);
    expect(expectProblem(await sessionToken(acct.admin, { bogus: 1 }), 400).detail).toMatch(/identity-center/);
  });

  it('issues temporary credentials in the spec formats; they authenticate with the assignment roles', async () => {
    const issuedAt = clock.now().getTime();
    const res = await sessionToken(idc, { account_id: acct.id });
    expect(res.status).toBe(200);
    const c = res.body;
    expect(Object.keys(c).sort()).toEqual(['access_key_id', 'expiration', 'secret_key', 'session_token']);
    expect(c.access_key_id).toMatch(/^ASIA[0-9A-F]{16}$/);
    expect(c.secret_key).toMatch(/^[A-Za-z0-9_-]{54}$/);
    expect(c.session_token).toMatch(/^[A-Za-z0-9_-]{43}$/);
    expect(Date.parse(c.expiration)).toBe(issuedAt + 3600_000);
    const [row] = await gw.db.sql`select secret_hash, session_token_hash from iam_credentials where access_key_id = ${c.access_key_id}`;
    expect(Buffer.from(row.session_token_hash).equals(crypto.createHash('sha256').update(c.session_token).digest())).toBe(true);
    const who = await gw.http.get('/iam/v1/whoami', { headers: svcHeaders(c) });
    expect(who.body).toMatchObject({ sub: 'fed-ann', realm: 'idc-corp', account_id: acct.id, roles: ['operator'], via: 'credential' });
  });

  it('duration_seconds: 900..43200, integer; account_id required and a UUID', async () => {
    expect((await sessionToken(idc, { account_id: acct.id, duration_seconds: 900 })).status).toBe(200);
    const long = await sessionToken(idc, { account_id: acct.id, duration_seconds: 43200 });
    expect(Date.parse(long.body.expiration)).toBe(clock.now().getTime() + 43200_000);
    for (const duration_seconds of [899, 43201, 1000.5, '3600']) {
      expect(expectProblem(await sessionToken(idc, { account_id: acct.id, duration_seconds }), 400).detail).toMatch(/duration_seconds/);
    }
    expect(expectProblem(await sessionToken(idc, {}), 400).detail).toMatch(/account_id/);
    expect(expectProblem(await sessionToken(idc, { account_id: 'nope' }), 400).detail).toMatch(/account_id/);
  });

  it('403 for an account the caller is not assigned to', async () => {
    const other = await createAccount(gw);
    expect(expectProblem(await sessionToken(idc, { account_id: other.id }), 403).detail).toMatch(/not assigned/);
    const stranger = await gw.token({ realm: 'idc-corp', sub: 'stranger', roles: ['admin'] });
    expectProblem(await sessionToken(stranger, { account_id: acct.id }), 403);
    expectProblem(await gw.http.get(`/iam/v1/sts/sessions?accountId=${acct.id}`, { token: stranger, headers: { 'x-account-id': acct.id } }), 403);
  });

  it('401 rows for temporary keys: session token missing, invalid; expired', async () => {
    const c = (await sessionToken(idc, { account_id: acct.id, duration_seconds: 900 })).body;
    const auth = svc(c.access_key_id, c.secret_key);
    expect(expectProblem(await gw.http.get('/iam/v1/whoami', { headers: { authorization: auth } }), 401).detail).toMatch(/session token missing/);
    const other = (await sessionToken(idc, { account_id: acct.id })).body;
    for (const t of [other.session_token, 'short', c.session_token.slice(0, -1) + '!']) {
      expect(expectProblem(await gw.http.get('/iam/v1/whoami', { headers: { authorization: auth, 'x-session-token': t } }), 401).detail).toMatch(/session token invalid/);
    }
    expect(expectProblem(await gw.http.get('/iam/v1/whoami', { headers: { authorization: svc(c.access_key_id, other.secret_key), 'x-session-token': c.session_token } }), 401).detail).toMatch(/secret key invalid/);
    expect((await gw.http.get('/iam/v1/whoami', { headers: svcHeaders(c) })).status).toBe(200);
    // one second before its expiry it still works (from the cache); at its expiry it does not
    clock.advance(899_000);
    expect((await gw.http.get('/iam/v1/whoami', { headers: svcHeaders(c) })).status).toBe(200);
    clock.advance(1_000);
    expect(expectProblem(await gw.http.get('/iam/v1/whoami', { headers: svcHeaders(c) }), 401).detail).toMatch(/credential expired/);
    expect((await gw.http.get('/iam/v1/whoami', { headers: svcHeaders(other) })).status).toBe(200);
  });

  it('sessions listing, revoke-session, revoke-all-sessions; revoked credentials are 401 (revoked)', async () => {
    const acct2 = await createAccount(gw);
    const bea = await idcUser(gw, acct2.id, 'fed-bea', ['viewer']);
    const h = { 'x-account-id': acct2.id };
    const s1 = (await sessionToken(bea, { account_id: acct2.id })).body;
    const s2 = (await sessionToken(bea, { account_id: acct2.id, duration_seconds: 7200 })).body;
    const s3 = (await sessionToken(bea, { account_id: acct2.id })).body;
    clock.advance(60_000);
    const usedAt = clock.now().toISOString();
    expect((await gw.http.get('/iam/v1/whoami', { headers: svcHeaders(s1) })).status).toBe(200);
    // someone else's session in the same account is not listed and cannot be revoked by bea
    const cid = await idcUser(gw, acct2.id, 'fed-cid', ['admin']);
    const other = (await sessionToken(cid, { account_id: acct2.id })).body;

    const list = await gw.http.get(`/iam/v1/sts/sessions?accountId=${acct2.id}`, { token: bea, headers: h });
    expect(list.status).toBe(200);
    expect(list.body.map((x: any) => x.access_key_id).sort()).toEqual([s1, s2, s3].map((x) => x.access_key_id).sort());
    const item = list.body.find((x: any) => x.access_key_id === s1.access_key_id);
    expect(Object.keys(item).sort()).toEqual(['access_key_id', 'created_at', 'description', 'expires_at', 'id', 'last_used_at', 'principal_id', 'principal_type', 'status']);
    expect(item).toMatchObject({ status: 'ACTIVE', principal_id: 'fed-bea', principal_type: 'federated', expires_at: s1.expiration });
    expect(item.last_used_at).toBe(usedAt);
    // never used: its creation time
    expect(list.body.find((x: any) => x.access_key_id === s2.access_key_id).last_used_at).toBe(list.body.find((x: any) => x.access_key_id === s2.access_key_id).created_at);

    expectProblem(await gw.http.get(`/iam/v1/sts/sessions?accountId=${acct2.id}`, { token: bea }), 400);
    expectProblem(await gw.http.get(`/iam/v1/sts/sessions?accountId=${acct2.id}`, { token: bea, headers: { 'x-account-id': acct.id } }), 400);
    expectProblem(await gw.http.get(`/iam/v1/sts/sessions?accountId=${acct2.id}`, { token: bea, headers: { 'x-account-id': 'nope' } }), 400);
    expectProblem(await gw.http.get('/iam/v1/sts/sessions', { token: bea, headers: h }), 400);

    const revoked = await gw.http.post('/iam/v1/sts/revoke-session', { access_key_id: s1.access_key_id }, { token: bea, headers: h });
    expect(revoked.status).toBe(200);
    // a plain row: revocation is its revoked_at (the clock's instant); status is the static credentials' projection only
    const [row] = await gw.db.sql`select status, revoked_at from iam_credentials where access_key_id = ${s1.access_key_id}`;
    expect(row).toEqual({ status: null, revoked_at: clock.now() });
    expect(revoked.body).toEqual({ message: expect.any(String), access_key_id: s1.access_key_id });
    expect(expectProblem(await gw.http.get('/iam/v1/whoami', { headers: svcHeaders(s1) }), 401).detail).toMatch(/revoked/);
    expectProblem(await gw.http.post('/iam/v1/sts/revoke-session', { access_key_id: s1.access_key_id }, { token: bea, headers: h }), 404);
    expectProblem(await gw.http.post('/iam/v1/sts/revoke-session', { access_key_id: other.access_key_id }, { token: bea, headers: h }), 404);
    expectProblem(await gw.http.post('/iam/v1/sts/revoke-session', {}, { token: bea, headers: h }), 400);
    expect(expectProblem(await gw.http.post('/iam/v1/sts/revoke-session', { access_key_id: 'AKSV0000000000000000' }, { token: bea, headers: h }), 400).detail).toMatch(/access_key_id/);

    expectProblem(await gw.http.post('/iam/v1/sts/revoke-all-sessions', { account_id: acct.id }, { token: bea, headers: h }), 400);
    const all = await gw.http.post('/iam/v1/sts/revoke-all-sessions', { account_id: acct2.id }, { token: bea, headers: h });
    expect(all.body).toEqual({ message: expect.any(String), revoked_count: 2 });
    for (const s of [s2, s3]) expect(expectProblem(await gw.http.get('/iam/v1/whoami', { headers: svcHeaders(s) }), 401).detail).toMatch(/revoked/);
    expect((await gw.http.get(`/iam/v1/sts/sessions?accountId=${acct2.id}`, { token: bea, headers: h })).body).toEqual([]);
    expect((await gw.http.get('/iam/v1/whoami', { headers: svcHeaders(other) })).status).toBe(200);
    expect((await gw.http.post('/iam/v1/sts/revoke-all-sessions', { account_id: acct2.id }, { token: bea, headers: h })).body.revoked_count).toBe(0);
  });

  it('an idc JWT reaches an account through X-Account-Id and its assignment only', async () => {
    const who = await gw.http.get('/iam/v1/whoami', { token: idc, headers: { 'x-account-id': acct.id } });
    expect(who.body).toMatchObject({ account_id: acct.id, roles: ['operator'] });
    expect(expectProblem(await gw.http.get('/iam/v1/whoami', { token: idc }), 403).detail).toMatch(/no roles/);
    const other = await createAccount(gw);
    expectProblem(await gw.http.get('/iam/v1/whoami', { token: idc, headers: { 'x-account-id': other.id } }), 403);
    expectProblem(await gw.http.get('/iam/v1/whoami', { token: idc, headers: { 'x-account-id': 'x' } }), 400);
  });

  it('removing an assignment stops its temporary credentials at once', async () => {
    const acct3 = await createAccount(gw);
    const dee = await idcUser(gw, acct3.id, 'fed-dee', ['admin']);
    const c = (await sessionToken(dee, { account_id: acct3.id })).body;
    expect((await gw.http.get('/iam/v1/whoami', { headers: svcHeaders(c) })).body.roles).toEqual(['admin']);
    const platform = await platformToken(gw);
    const list = await gw.http.get(`/platform/v1/accounts/${acct3.id}/assignments`, { token: platform });
    expect(list.body).toMatchObject([{ realm: 'idc-corp', principal_id: 'fed-dee', roles: ['admin'] }]);
    expect((await gw.http.delete(`/platform/v1/accounts/${acct3.id}/assignments/idc-corp/fed-dee`, { token: platform })).status).toBe(204);
    expectProblem(await gw.http.get('/iam/v1/whoami', { headers: svcHeaders(c) }), 403);
    expectProblem(await gw.http.delete(`/platform/v1/accounts/${acct3.id}/assignments/idc-corp/fed-dee`, { token: platform }), 404);
    expectProblem(await gw.http.put(`/platform/v1/accounts/${acct3.id}/assignments/corp/x`, { roles: ['admin'] }, { token: platform }), 400);
    expectProblem(await gw.http.put(`/platform/v1/accounts/${acct3.id}/assignments/idc-corp/x`, { roles: ['root'] }, { token: platform }), 400);
    expectProblem(await gw.http.put(`/platform/v1/accounts/${crypto.randomUUID()}/assignments/idc-corp/x`, { roles: ['admin'] }, { token: platform }), 404);
    expectProblem(await gw.http.put(`/platform/v1/accounts/${acct3.id}/assignments/idc-corp/x`, { roles: ['admin'] }, { token: acct3.admin }), 403);
  });

  it('expired temporary credentials are deleted by the hourly durable job', async () => {
    const c = (await sessionToken(idc, { account_id: acct.id, duration_seconds: 900 })).body;
    const kept = (await sessionToken(idc, { account_id: acct.id, duration_seconds: 3600 })).body;
    const schedules = await gw.db.sql`select name, cron from pgboss.schedule where name = ${CLEANUP_JOB}`;
    expect(schedules).toEqual([{ name: CLEANUP_JOB, cron: '0 * * * *' }]);
    await gw.testHooks.iam.cleanupExpiredSessions(); // earlier tests' expired sessions
    clock.advance(899_000);
    expect(await gw.testHooks.iam.cleanupExpiredSessions()).toBe(0);
    clock.advance(1_000);
    const deleted = await gw.testHooks.iam.cleanupExpiredSessions();
    expect(deleted).toBeGreaterThanOrEqual(1);
    expect(await gw.db.sql`select 1 from iam_credentials where access_key_id = ${c.access_key_id}`).toHaveLength(0);
    expect(await gw.db.sql`select 1 from iam_credentials where kind = 'temporary' and expires_at <= ${clock.now()}`).toHaveLength(0);
    expect((await gw.http.get('/iam/v1/whoami', { headers: svcHeaders(kept) })).status).toBe(200);
    // the durable job itself (as the scheduler would queue it) does the same
    clock.advance(2700_000);
    await gw.gw.jobs.send(CLEANUP_JOB, {});
    await waitFor(async () => (await gw.db.sql`select 1 from iam_credentials where access_key_id = ${kept.access_key_id}`).length === 0, 20_000, 'cleanup job');
    expect(expectProblem(await gw.http.get('/iam/v1/whoami', { headers: svcHeaders(kept) }), 401).detail).toMatch(/not found/);
  });
});
