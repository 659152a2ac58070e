import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createAccount, type TestAccount } from '../helpers/accounts.js';
import { expectProblem, startTestGateway, type TestGateway } from '../helpers/gateway.js';
import { staticCredentialKind } from '../../src/iam/credentials.js';
import { idcUser, svc, svcHeaders, userWithCredential } from './helpers.js';

let gw: TestGateway;
let node2: TestGateway;
let acct: TestAccount;
beforeAll(async () => {
  gw = await startTestGateway({ NODE_ID: 'iam-svc-a' });
  node2 = await startTestGateway({ NODE_ID: 'iam-svc-b', JOBS: 'false' }, { db: gw.db });
  acct = await createAccount(gw);
});
afterAll(async () => {
  await node2?.close();
  await gw?.close();
});

describe('SVC authentication (spec error table, 401 rows for static keys)', () => {
  it('authenticates as the credential principal and account with the roles the IdP last asserted', async () => {
    const { credential } = await userWithCredential(gw, acct, 'svc-alice', ['operator']);
    const res = await gw.http.get('/iam/v1/whoami', { headers: svcHeaders(credential) });
    expect(res.status).toBe(200);
    expect(res.body).toEqual({ sub: 'svc-alice', realm: `acc-${acct.id}`, via: 'credential', account_id: acct.id, roles: ['operator'], access_key_id: credential.access_key_id });
    // operator cannot manage credentials (role layer)
    expect(expectProblem(await gw.http.get(`/iam/v1/accounts/${acct.id}/credentials`, { headers: svcHeaders(credential) }), 403).detail).toMatch(/insufficient role/);
    // the identity provider now asserts admin: the credential follows (on every node)
    const admin = await gw.token({ realm: `acc-${acct.id}`, sub: 'svc-alice', roles: ['admin'] });
    expect((await gw.http.get('/iam/v1/whoami', { token: admin })).body.roles).toEqual(['admin']);
    for (const node of [gw, node2]) {
      const list = await node.http.get(`/iam/v1/accounts/${acct.id}/credentials`, { headers: svcHeaders(credential) });
      expect(list.status).toBe(200);
    }
  });

  it('a user the IdP never asserted roles for has no access', async () => {
    const res = await gw.http.post(`/iam/v1/accounts/${acct.id}/credentials`, { principal_id: 'never-signed-in' }, { token: acct.admin });
    expect(expectProblem(await gw.http.get('/iam/v1/whoami', { headers: svcHeaders(res.body) }), 403).detail).toMatch(/insufficient role.*no roles/);
  });

  it('credential format invalid', async () => {
    const cases = [
      'SVC !!!notbase64',
      `SVC ${Buffer.from('no-colon-here').toString('base64')}`,
      `SVC ${Buffer.from('AKIA0123456789ABCDEF:' + 'a'.repeat(54)).toString('base64')}`,
      `SVC ${Buffer.from('AKSV0123456789abcdef:' + 'a'.repeat(54)).toString('base64')}`,
      `SVC ${Buffer.from('AKSV0123456789ABCDEF:short').toString('base64')}`,
      'SVC',
    ];
    for (const authorization of cases) {
      const b = expectProblem(await gw.http.get('/iam/v1/whoami', { headers: { authorization } }), 401);
      expect(b.detail).toMatch(authorization === 'SVC' ? /no svc credentials/ : /credential format invalid/);
    }
  });

  it('credential not found', async () => {
    const b = expectProblem(await gw.http.get('/iam/v1/whoami', { headers: { authorization: svc('AKSV0123456789ABCDEF', 'a'.repeat(54)) } }), 401);
    expect(b.detail).toMatch(/credential not found/);
  });

  it('secret key invalid', async () => {
    const { credential } = await userWithCredential(gw, acct, 'svc-bob', ['viewer']);
    const wrong = credential.secret_key.slice(0, -1) + (credential.secret_key.endsWith('A') ? 'B' : 'A');
    const b = expectProblem(await gw.http.get('/iam/v1/whoami', { headers: { authorization: svc(credential.access_key_id, wrong) } }), 401);
    expect(b.detail).toMatch(/secret key invalid/);
  });

  it('credential inactive: takes effect on the very next request on every node, and back', async () => {
    const { credential } = await userWithCredential(gw, acct, 'svc-carol', ['viewer']);
    // warm both nodes' caches
    for (const node of [gw, node2]) expect((await node.http.get('/iam/v1/whoami', { headers: svcHeaders(credential) })).status).toBe(200);
    const off = await gw.http.put(`/iam/v1/accounts/${acct.id}/credentials/${credential.id}`, { status: 'INACTIVE' }, { token: acct.admin });
    expect(off.status).toBe(200);
    for (const node of [node2, gw]) {
      const b = expectProblem(await node.http.get('/iam/v1/whoami', { headers: svcHeaders(credential) }), 401);
      expect(b.detail).toMatch(/credential inactive/);
    }
    // node 2 verifies tokens of its own development issuer (its own PUBLIC_BASE_URL)
    const admin2 = await node2.token({ realm: `acc-${acct.id}`, sub: 'admin-2', roles: ['admin'] });
    const on = await node2.http.put(`/iam/v1/accounts/${acct.id}/credentials/${credential.id}`, { status: 'ACTIVE' }, { token: admin2 });
    expect(on.status).toBe(200);
    for (const node of [gw, node2]) {
      const res = await node.http.get('/iam/v1/whoami', { headers: svcHeaders(credential) });
      expect(res.status, res.text).toBe(200);
    }
    // deletion, too
    expect((await node2.http.delete(`/iam/v1/accounts/${acct.id}/credentials/${credential.id}`, { token: admin2 })).status).toBe(204);
    expect(expectProblem(await gw.http.get('/iam/v1/whoami', { headers: svcHeaders(credential) }), 401).detail).toMatch(/not found/);
  });

  it('a revoked temporary credential is refused on the very next request on the other node', async () => {
    const fed = await idcUser(gw, acct.id, 'svc-fed', ['viewer']);
    const c = (await gw.http.post('/iam/v1/sts/get-session-token', { account_id: acct.id }, { token: fed })).body;
    for (const node of [gw, node2]) expect((await node.http.get('/iam/v1/whoami', { headers: svcHeaders(c) })).status).toBe(200);
    const revoked = await gw.http.post('/iam/v1/sts/revoke-session', { access_key_id: c.access_key_id }, { token: fed, headers: { 'x-account-id': acct.id } });
    expect(revoked.status).toBe(200);
    expect(expectProblem(await node2.http.get('/iam/v1/whoami', { headers: svcHeaders(c) }), 401).detail).toMatch(/revoked/);
  });

  it('an acknowledged invalidation has reached every live node when it resolves', async () => {
    const a = gw.testHooks.iam;
    const b = node2.testHooks.iam;
    b.cacheSet('cap', 'probe-account', new Set(['x']));
    expect(b.cachePeek('cap', 'probe-account')).toBeDefined();
    await a.invalidate(['cap:probe-account'], { wait: true });
    expect(b.cachePeek('cap', 'probe-account')).toBeUndefined();
  });

  it('the hot path is served from the node cache (no database read per request)', async () => {
    const { credential } = await userWithCredential(gw, acct, 'svc-erin', ['viewer']);
    expect((await gw.http.get('/iam/v1/whoami', { headers: svcHeaders(credential) })).status).toBe(200);
    // the machine switches it off behind the service's back (no invalidation): the projected row
    // says INACTIVE, yet the node still answers from its cache, so it does not read the row again
    await gw.gw.actors.send(staticCredentialKind, credential.id, { type: 'DEACTIVATE', at: gw.gw.clock.now().toISOString() });
    expect((await gw.db.sql`select status from iam_credentials where id = ${credential.id}`)[0].status).toBe('INACTIVE');
    for (let i = 0; i < 5; i++) expect((await gw.http.get('/iam/v1/whoami', { headers: svcHeaders(credential) })).status).toBe(200);
    await gw.testHooks.iam.invalidate([`cred:${credential.access_key_id}`], { wait: true });
    expect(expectProblem(await gw.http.get('/iam/v1/whoami', { headers: svcHeaders(credential) }), 401).detail).toMatch(/inactive/);
  });

  it('a node that missed an invalidation message drops its caches at its next heartbeat', async () => {
    const b = node2.testHooks.iam;
    await b.cacheBeat(); // catch up with earlier tests
    b.cacheSet('cred', 'AKSV00000000000000AA', { stale: true });
    await b.cacheBeat();
    expect(b.cachePeek('cred', 'AKSV00000000000000AA')).toBeDefined();
    // an invalidation whose message never reached node 2 (only the generation moved)
    await gw.db.sql`update iam_cache_generation set n = n + 1`;
    await b.cacheBeat();
    expect(b.cachePeek('cred', 'AKSV00000000000000AA')).toBeUndefined();
  });

  it('last_used_at is kept up to date (batched, not a write per request)', async () => {
    const { credential } = await userWithCredential(gw, acct, 'svc-dan', ['admin']);
    const before = (await gw.http.get(`/iam/v1/accounts/${acct.id}/credentials/${credential.id}`, { token: acct.admin })).body;
    expect(before.last_used_at).toBeNull();
    expect((await gw.http.get('/iam/v1/whoami', { headers: svcHeaders(credential) })).status).toBe(200);
    const after = (await gw.http.get(`/iam/v1/accounts/${acct.id}/credentials/${credential.id}`, { token: acct.admin })).body;
    expect(after.last_used_at).not.toBeNull();
  });

  it('an unsupported scheme names SVC', async () => {
    const b = expectProblem(await gw.http.get('/iam/v1/whoami', { headers: { authorization: 'Digest x' } }), 401);
    expect(b.detail).toMatch(/SVC/);
  });
});
