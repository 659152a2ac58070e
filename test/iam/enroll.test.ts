import crypto from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createAccount } from '../helpers/accounts.js';
import { expectProblem, startTestGateway, type TestGateway } from '../helpers/gateway.js';
import { platformToken, svcHeaders, userWithCredential } from './helpers.js';

let gw: TestGateway;
let node2: TestGateway;
let platform: string;
beforeAll(async () => {
  gw = await startTestGateway({ NODE_ID: 'iam-enroll-a' });
  node2 = await startTestGateway({ NODE_ID: 'iam-enroll-b', JOBS: 'false' }, { db: gw.db });
  platform = await platformToken(gw);
});
afterAll(async () => {
  await node2?.close();
  await gw?.close();
});

const thing = () => ({ manufacturer: 'Acme', model: 'sensor-1', serial: `SN-${crypto.randomUUID().slice(0, 8)}` });

describe('enroll example (spec): role, then SCP, then capability, then 201', () => {
  it('POST /api/v1/things passes the three layers in order', async () => {
    const a = await createAccount(gw);
    // 1. role: a viewer is refused first, whatever the SCP and the capability say
    const scp = await gw.http.post('/platform/v1/scps', { name: `no-enroll-${a.id.slice(0, 8)}`, document: { Version: '2012-10-17', Statement: [{ Effect: 'Deny', Action: ['factory:Thing:Enroll'], Resource: '*' }] } }, { token: platform });
    expect(scp.status).toBe(201);
    expect((await gw.http.put(`/platform/v1/accounts/${a.id}/scps/${scp.body.id}`, undefined, { token: platform })).status).toBe(201);
    const role = expectProblem(await gw.http.post('/api/v1/things', thing(), { token: a.viewer }), 403);
    expect(role.detail).toMatch(/^insufficient role/);
    // 2. SCP: an operator (role passes) is denied by the policy, before the capability is looked at
    const denied = expectProblem(await gw.http.post('/api/v1/things', thing(), { token: a.operator }), 403);
    expect(denied.detail).toMatch(/^action factory:Thing:Enroll denied by policy/);
    expect((await gw.http.delete(`/platform/v1/accounts/${a.id}/scps/${scp.body.id}`, { token: platform })).status).toBe(204);
    // 3. capability: without enroll_things, 403 with the hint to join by access code
    const unqualified = expectProblem(await gw.http.post('/api/v1/things', thing(), { token: a.operator }), 403);
    expect(unqualified.detail).toMatch(/^account not qualified: factory:Thing:Enroll requires capability enroll_things/);
    expect(unqualified.detail).toMatch(/POST \/api\/v1\/things\/join.*access_code/);
    expect(new Set([role.detail.split(':')[0], denied.detail.split(' ')[0], unqualified.detail.split(':')[0]]).size).toBe(3);
    // 4. granted (on node 2): the next request on node 1 succeeds
    const admin2 = await node2.token({ realm: 'platform', sub: 'root-2', roles: ['platform-admin'] });
    expect((await node2.http.put(`/platform/v1/accounts/${a.id}/capabilities/enroll_things`, undefined, { token: admin2 })).status).toBe(200);
    const created = await gw.http.post('/api/v1/things', thing(), { token: a.operator });
    expect(created.status).toBe(201);
    expect(created.body.thingId).toMatch(/^[0-9a-f-]{36}$/);
    // revoked on node 1: the next request on node 2 is refused again
    expect((await gw.http.delete(`/platform/v1/accounts/${a.id}/capabilities/enroll_things`, { token: platform })).status).toBe(204);
    const op2 = await node2.token({ realm: `acc-${a.id}`, sub: 'op-2', roles: ['operator'] });
    expect(expectProblem(await node2.http.post('/api/v1/things', thing(), { token: op2 }), 403).detail).toMatch(/^account not qualified/);
  });

  it('the same layers apply to SVC credentials; joining by access code needs no capability', async () => {
    const owner = await createAccount(gw, { capabilities: ['enroll_things'] });
    const joiner = await createAccount(gw);
    const { credential } = await userWithCredential(gw, joiner, 'svc-op', ['operator']);
    expect(expectProblem(await gw.http.post('/api/v1/things', thing(), { headers: svcHeaders(credential) }), 403).detail).toMatch(/^account not qualified/);
    const created = await gw.http.post('/api/v1/things', thing(), { token: owner.operator });
    expect(created.status).toBe(201);
    const code = await gw.http.post(`/api/v1/things/${created.body.thingId}/access-code`, undefined, { token: owner.operator });
    expect(code.status).toBe(201);
    const joined = await gw.http.post('/api/v1/things/join', { access_code: code.body.accessCode }, { headers: svcHeaders(credential) });
    expect(joined.status).toBe(200);
    expect(joined.body.accountId).toBe(joiner.id);
  });
});
