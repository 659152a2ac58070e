import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { assignable } from '../../src/iam/roles.js';
import { createAccount, type TestAccount } from '../helpers/accounts.js';
import { expectProblem, startTestGateway, type TestGateway } from '../helpers/gateway.js';
import { platformToken, svcHeaders, userWithCredential } from './helpers.js';

/**
 * Issue 32, part 3: an account admin assigns the roles an IAM user's static keys carry
 * (PUT|GET /iam/v1/accounts/{accountId}/users/{principalId}/roles). Two nodes share one database,
 * so every change is checked on the node that did not make it, right after the PUT answered.
 */
let a: TestGateway;
let b: TestGateway;
let acct: TestAccount;
let other: TestAccount;
beforeAll(async () => {
  a = await startTestGateway({ NODE_ID: 'iam-roles-a' });
  b = await startTestGateway({ NODE_ID: 'iam-roles-b', JOBS: 'false' }, { db: a.db });
  acct = await createAccount(a);
  other = await createAccount(a);
});
afterAll(async () => {
  await b?.close();
  await a?.close();
});

type Key = { access_key_id: string; secret_key: string };
const rolesPath = (principalId: string, accountId = acct.id) => `/iam/v1/accounts/${accountId}/users/${principalId}/roles`;
const assign = (principalId: string, roles: unknown, token = acct.admin, accountId = acct.id) => a.http.put(rolesPath(principalId, accountId), { roles }, { token });
/** A key created for a user the gateway never saw sign in (a service account). */
async function serviceKey(principalId: string): Promise<Key> {
  const res = await a.http.post(`/iam/v1/accounts/${acct.id}/credentials`, { principal_id: principalId }, { token: acct.admin });
  expect(res.status, res.text).toBe(201);
  return res.body;
}
const whoami = (gw: TestGateway, key: Key) => gw.http.get('/iam/v1/whoami', { headers: svcHeaders(key) });
/** A route for operators (and admins, viewers) */
const operatorRoute = (gw: TestGateway, key: Key) => gw.http.get('/api/v1/registrars', { headers: svcHeaders(key) });
/** A route for admins only */
const adminRoute = (gw: TestGateway, key: Key) => gw.http.get(`/iam/v1/accounts/${acct.id}/credentials`, { headers: svcHeaders(key) });

describe('roles assigned to a service user', () => {
  it('a key of a user who never signed in is refused, then served on every node as soon as an admin assigns operator', async () => {
    const key = await serviceKey('robot-1');
    // both nodes have cached "no roles" for this user before the change
    for (const gw of [a, b]) {
      expect(expectProblem(await whoami(gw, key), 403).detail).toMatch(/insufficient role.*no roles/);
      expectProblem(await operatorRoute(gw, key), 403);
    }
    expect((await a.http.get(rolesPath('robot-1'), { token: acct.admin })).body).toEqual({
      account_id: acct.id, principal_id: 'robot-1', roles: [], idp_roles: [], key_roles: [], updated_at: null, assigned_by: null,
    });

    const put = await assign('robot-1', ['operator']);
    expect(put.status, put.text).toBe(200);
    expect(put.body).toMatchObject({ account_id: acct.id, principal_id: 'robot-1', roles: ['operator'], idp_roles: [], key_roles: ['operator'], assigned_by: `admin-${acct.id.slice(0, 8)}` });
    expect(new Date(put.body.updated_at).toISOString()).toBe(put.body.updated_at);

    for (const gw of [a, b]) {
      const who = await whoami(gw, key);
      expect(who.status).toBe(200);
      expect(who.body).toMatchObject({ sub: 'robot-1', via: 'credential', account_id: acct.id, roles: ['operator'] });
      expect((await operatorRoute(gw, key)).status).toBe(200);
      expect(expectProblem(await adminRoute(gw, key), 403).detail).toMatch(/insufficient role.*you hold operator/);
    }
    // the user still never signed in: nothing was asserted for it
    expect(await a.db.sql`select 1 from iam_principal_roles where account_id = ${acct.id} and principal_id = 'robot-1'`).toHaveLength(0);
    // (each node's development issuer signs its own tokens)
    const adminOnB = await b.token({ realm: `acc-${acct.id}`, sub: `admin-${acct.id.slice(0, 8)}`, roles: ['admin'] });
    expect((await b.http.get(rolesPath('robot-1'), { token: adminOnB })).body).toMatchObject({ roles: ['operator'], key_roles: ['operator'] });
  });

  it('removal ({"roles": []}) takes effect at once on every node', async () => {
    const key = await serviceKey('robot-2');
    expect((await assign('robot-2', ['viewer', 'viewer'])).body.roles).toEqual(['viewer']);
    for (const gw of [a, b]) expect((await whoami(gw, key)).body.roles).toEqual(['viewer']);

    const removed = await assign('robot-2', []);
    expect(removed.status).toBe(200);
    expect(removed.body).toMatchObject({ roles: [], key_roles: [], updated_at: null, assigned_by: null });
    expect(await a.db.sql`select 1 from iam_assigned_roles where account_id = ${acct.id} and principal_id = 'robot-2'`).toHaveLength(0);
    for (const gw of [a, b]) expectProblem(await whoami(gw, key), 403);
  });

  it('the account id in the path may be upper case: the change still reaches every node at once', async () => {
    const key = await serviceKey('robot-3');
    for (const gw of [a, b]) expectProblem(await whoami(gw, key), 403);
    const put = await assign('robot-3', ['operator'], acct.admin, acct.id.toUpperCase());
    expect(put.status, put.text).toBe(200);
    expect(put.body.account_id).toBe(acct.id);
    for (const gw of [a, b]) expect((await whoami(gw, key)).body.roles).toEqual(['operator']);
  });
});

describe('who may assign what', () => {
  it('operators and viewers may neither assign nor read (403); an admin of another account gets 404', async () => {
    for (const token of [acct.operator, acct.viewer]) {
      expect(expectProblem(await assign('robot-4', ['viewer'], token), 403).detail).toMatch(/insufficient role/);
      expect(expectProblem(await a.http.get(rolesPath('robot-4'), { token }), 403).detail).toMatch(/insufficient role/);
    }
    expectProblem(await assign('robot-4', ['viewer'], other.admin), 404);
    expectProblem(await a.http.get(rolesPath('robot-4'), { token: other.admin }), 404);
    // platform admins act on no account
    expectProblem(await assign('robot-4', ['viewer'], await platformToken(a)), 403);
    expect(await a.db.sql`select 1 from iam_assigned_roles where principal_id = 'robot-4'`).toHaveLength(0);
  });

  it('an admin cannot assign a platform or other non-account role (403), nor an unknown one (400 naming it)', async () => {
    const key = await serviceKey('robot-5');
    expect((await assign('robot-5', ['viewer'])).status).toBe(200);
    for (const role of ['platform-admin', 'platform-operator', 'factory-service', 'notification-publisher']) {
      const res = expectProblem(await assign('robot-5', ['operator', role]), 403);
      expect(res.detail).toContain(`role ${role} cannot be assigned`);
    }
    const unknown = expectProblem(await assign('robot-5', ['operator', 'superuser']), 400);
    expect(unknown.detail).toMatch(/unknown role "superuser".*admin, operator, viewer/);
    // 400 before 403: the request names a role that does not exist at all
    expect(expectProblem(await assign('robot-5', ['platform-admin', 'Admin']), 400).detail).toContain('"Admin"');
    expectProblem(await assign('robot-5', 'operator'), 400);
    expectProblem(await a.http.put(rolesPath('robot-5'), { roles: ['viewer'], extra: true }, { token: acct.admin }), 400);
    // nothing changed
    expect((await a.http.get(rolesPath('robot-5'), { token: acct.admin })).body.roles).toEqual(['viewer']);
    for (const gw of [a, b]) expect((await whoami(gw, key)).body.roles).toEqual(['viewer']);
  });

  it('a caller assigns only account roles at or below the highest it holds (admin > operator > viewer)', () => {
    expect(assignable(['viewer', 'admin', 'operator', 'admin'], ['admin'])).toEqual(['admin', 'operator', 'viewer']);
    expect(assignable(['viewer'], ['operator'])).toEqual(['viewer']);
    expect(() => assignable(['admin'], ['operator'])).toThrow(/role admin cannot be assigned: you do not hold it \(you hold operator\)/);
    expect(() => assignable(['viewer'], ['notification-publisher'])).toThrow(/role viewer cannot be assigned/);
    expect(assignable([], [])).toEqual([]);
  });
});

describe('assigned and identity-provider roles combined', () => {
  it('keys carry the assigned roles instead of the asserted ones while any are assigned; bearer tokens keep their own claims', async () => {
    // dana signed in as viewer: her key carries viewer
    const { token: danaViewer, credential: key } = await userWithCredential(a, acct, 'dana', ['viewer']);
    expect((await whoami(a, key)).body.roles).toEqual(['viewer']);

    // assigned operator replaces (no union with viewer)
    expect((await assign('dana', ['operator'])).body).toMatchObject({ roles: ['operator'], idp_roles: ['viewer'], key_roles: ['operator'] });
    for (const gw of [a, b]) expect((await whoami(gw, key)).body.roles).toEqual(['operator']);
    expect((await a.http.get('/iam/v1/whoami', { token: danaViewer })).body.roles).toEqual(['viewer']);

    // the identity provider now asserts admin: her token is admin, her key stays what the admin assigned
    const danaAdmin = await a.token({ realm: `acc-${acct.id}`, sub: 'dana', roles: ['admin'] });
    expect((await a.http.get('/iam/v1/whoami', { token: danaAdmin })).body.roles).toEqual(['admin']);
    expect((await a.http.get(rolesPath('dana'), { token: acct.admin })).body).toMatchObject({ roles: ['operator'], idp_roles: ['admin'], key_roles: ['operator'] });
    for (const gw of [a, b]) {
      expect((await whoami(gw, key)).body.roles).toEqual(['operator']);
      expectProblem(await adminRoute(gw, key), 403);
    }
    // an assignment narrows a key below the user's sign-in roles
    expect((await a.http.get(`/iam/v1/accounts/${acct.id}/credentials`, { token: danaAdmin })).status).toBe(200);

    // removed: the key falls back to the identity provider's last assertion, on every node
    expect((await assign('dana', [])).body).toMatchObject({ roles: [], idp_roles: ['admin'], key_roles: ['admin'] });
    for (const gw of [a, b]) {
      expect((await whoami(gw, key)).body.roles).toEqual(['admin']);
      expect((await adminRoute(gw, key)).status).toBe(200);
    }
  });

  it('a key holding an assigned admin role may itself assign roles', async () => {
    const admKey = await serviceKey('robot-admin');
    expect((await assign('robot-admin', ['admin'])).status).toBe(200);
    const res = await a.http.put(rolesPath('robot-6'), { roles: ['viewer'] }, { headers: svcHeaders(admKey) });
    expect(res.status, res.text).toBe(200);
    expect(res.body).toMatchObject({ roles: ['viewer'], assigned_by: 'robot-admin' });
  });
});
