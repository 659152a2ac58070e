import crypto from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createAccount, grantCapability, type TestAccount } from '../helpers/accounts.js';
import { expectProblem, startTestGateway, type TestGateway } from '../helpers/gateway.js';
import { platformToken, svcHeaders, userWithCredential } from './helpers.js';

let gw: TestGateway;
let platform: string;
beforeAll(async () => {
  gw = await startTestGateway();
  platform = await platformToken(gw);
});
afterAll(() => gw?.close());

const denyDoc = (...Action: string[]) => ({ Version: '2012-10-17', Statement: [{ Effect: 'Deny', Action, Resource: '*' }] });
async function createScp(document: unknown, name = `scp-${crypto.randomUUID().slice(0, 8)}`) {
  const res = await gw.http.post('/platform/v1/scps', { name, document }, { token: platform });
  if (res.status !== 201) throw new Error(`scp create: ${res.status} ${res.text}`);
  return res.body as { id: string; name: string };
}
const attach = (accountId: string, scpId: string) => gw.http.put(`/platform/v1/accounts/${accountId}/scps/${scpId}`, undefined, { token: platform });
const detach = (accountId: string, scpId: string) => gw.http.delete(`/platform/v1/accounts/${accountId}/scps/${scpId}`, { token: platform });
const createCred = (a: TestAccount, token = a.admin) => gw.http.post(`/iam/v1/accounts/${a.id}/credentials`, { principal_id: `u-${crypto.randomUUID().slice(0, 6)}` }, { token });

describe('authorization layers: role, then SCP explicit deny, then capability', () => {
  it('role first: a viewer is refused for its role even when an SCP also denies the action', async () => {
    const a = await createAccount(gw);
    const p = await createScp(denyDoc('iam:Credential:*'));
    expect((await attach(a.id, p.id)).status).toBe(201);
    expect(expectProblem(await createCred(a, a.viewer), 403).detail).toMatch(/^insufficient role/);
    const denied = expectProblem(await createCred(a), 403);
    expect(denied.detail).toMatch(/^action iam:Credential:Create denied by policy/);
    expect(denied.detail).toContain(p.name);
    expect(denied.detail).not.toMatch(/insufficient role|not qualified/);
    expect(await gw.db.sql`select 1 from iam_credentials where account_id = ${a.id}`).toHaveLength(0);
    expect((await detach(a.id, p.id)).status).toBe(204);
    expect((await createCred(a)).status).toBe(201);
  });

  it('SCPs: wildcards, case, several statements, several SCPs; Allow never grants; other accounts unaffected', async () => {
    const a = await createAccount(gw);
    const b = await createAccount(gw);
    const allowAll = await createScp({ Version: '2012-10-17', Statement: [{ Effect: 'Allow', Action: '*', Resource: '*' }] });
    expect((await attach(a.id, allowAll.id)).status).toBe(201);
    expect((await createCred(a)).status).toBe(201);
    expect(expectProblem(await createCred(a, a.viewer), 403).detail).toMatch(/insufficient role/); // Allow grants nothing

    const several = await createScp({ Version: '2012-10-17', Statement: [
      { Sid: 'one', Effect: 'Deny', Action: ['things:Thing:Delete'], Resource: '*' },
      { Sid: 'two', Effect: 'Deny', Action: 'IAM:credential:LIST', Resource: '*' },
    ] });
    expect((await attach(a.id, several.id)).status).toBe(201);
    expect(expectProblem(await gw.http.get(`/iam/v1/accounts/${a.id}/credentials`, { token: a.admin }), 403).detail).toMatch(/iam:Credential:List denied by policy/);
    expect((await createCred(a)).status).toBe(201);
    expect((await gw.http.get(`/iam/v1/accounts/${b.id}/credentials`, { token: b.admin })).status).toBe(200);

    const wildcard = await createScp(denyDoc('iam:*:Cr?ate'));
    expect((await attach(a.id, wildcard.id)).status).toBe(201);
    expect(expectProblem(await createCred(a), 403).detail).toContain(wildcard.name);
    expect((await gw.http.get(`/iam/v1/accounts/${a.id}/scps`, { token: a.admin })).body.map((s: any) => s.id)).toEqual([allowAll.id, several.id, wildcard.id]);

    // SVC callers are subject to the same layers
    const { credential } = await userWithCredential(gw, b, 'svc-admin', ['admin']);
    const denyWho = await createScp(denyDoc('iam:Identity:*'));
    expect((await gw.http.get('/iam/v1/whoami', { headers: svcHeaders(credential) })).status).toBe(200);
    await attach(b.id, denyWho.id);
    expect(expectProblem(await gw.http.get('/iam/v1/whoami', { headers: svcHeaders(credential) }), 403).detail).toMatch(/denied by policy/);
  });

  it('the capability layer runs last; its message and the enroll hint differ from the other two', async () => {
    const iam = gw.testHooks.iam;
    const a = await createAccount(gw);
    const principal = { via: 'jwt' as const, sub: 'x', realm: `acc-${a.id}`, realmKind: 'acc' as const, accountId: a.id, roles: ['operator'] };
    const route = { action: 'things:Thing:Create', capability: 'enroll_things' };
    await expect(iam.checkCapability(principal, route.action, route.capability)).rejects.toMatchObject({
      kind: 'refused', detail: expect.stringMatching(/^account not qualified: things:Thing:Create requires capability enroll_things.*POST \/api\/v1\/things\/join.*access_code/),
    });
    await expect(iam.checkCapability(principal, route.action, 'manage_ota_rollouts')).rejects.toMatchObject({ detail: expect.not.stringMatching(/join/) });
    await grantCapability(gw, a.id, 'enroll_things');
    await expect(iam.checkCapability(principal, route.action, route.capability)).resolves.toBeUndefined();
    expect(iam.checkCapability(principal, route.action, undefined)).toBeUndefined();
  });
});

describe('SCP administration (platform admins)', () => {
  it('create (object or JSON text), list, read, delete; names unique; attached ones cannot be deleted', async () => {
    const name = `n-${crypto.randomUUID().slice(0, 8)}`;
    const doc = denyDoc('things:Thing:Create');
    const created = await gw.http.post('/platform/v1/scps', { name, description: 'no enrolment', document: JSON.stringify(doc) }, { token: platform });
    expect(created.status).toBe(201);
    expect(created.body).toMatchObject({ name, description: 'no enrolment', document: doc, document_size: JSON.stringify(doc).length });
    expectProblem(await gw.http.post('/platform/v1/scps', { name, document: doc }, { token: platform }), 409);
    expect((await gw.http.get(`/platform/v1/scps/${created.body.id}`, { token: platform })).body.id).toBe(created.body.id);
    const operator = await gw.token({ realm: 'platform', sub: 'op', roles: ['platform-operator'] });
    expect((await gw.http.get('/platform/v1/scps', { token: operator })).body.some((s: any) => s.id === created.body.id)).toBe(true);
    expectProblem(await gw.http.post('/platform/v1/scps', { name: 'x', document: doc }, { token: operator }), 403);
    const a = await createAccount(gw);
    expectProblem(await gw.http.post('/platform/v1/scps', { name: 'x', document: doc }, { token: a.admin }), 403);
    await attach(a.id, created.body.id);
    expect((await attach(a.id, created.body.id)).status).toBe(200);
    expectProblem(await gw.http.delete(`/platform/v1/scps/${created.body.id}`, { token: platform }), 409);
    await detach(a.id, created.body.id);
    expectProblem(await detach(a.id, created.body.id), 404);
    expect((await gw.http.delete(`/platform/v1/scps/${created.body.id}`, { token: platform })).status).toBe(204);
    expectProblem(await gw.http.get(`/platform/v1/scps/${created.body.id}`, { token: platform }), 404);
    expectProblem(await attach(a.id, created.body.id), 404);
    expectProblem(await attach(crypto.randomUUID(), crypto.randomUUID()), 404);
  });

  it('invalid documents are 400 with the failing member named', async () => {
    const bad = async (document: unknown) => expectProblem(await gw.http.post('/platform/v1/scps', { name: `b-${crypto.randomUUID().slice(0, 6)}`, document }, { token: platform }), 400).detail;
    expect(await bad('{not json')).toMatch(/not valid JSON/);
    expect(await bad({ Statement: [] })).toMatch(/document\.Version/);
    expect(await bad({ Version: '2012-10-17', Statement: [{ Effect: 'Maybe', Action: ['a:b:c'], Resource: '*' }] })).toMatch(/Effect/);
    expect(await bad({ Version: '2012-10-17', Statement: [{ Effect: 'Deny', Action: ['no spaces'], Resource: '*' }] })).toMatch(/Action/);
    expect(await bad(42)).toMatch(/document/);
    // a document sent as JSON text: its escapes decode to text Postgres cannot store (was a 500)
    const sid = (text: string) => `{"Version":"2012-10-17","Statement":[{"Sid":"${text}","Effect":"Deny","Action":"a:b:c","Resource":"*"}]}`;
    expect(await bad(sid('\\u0000'))).toMatch(/body\.document\.Statement\.0\.Sid: contains a NUL character/);
    expect(await bad(sid('\\ud800'))).toMatch(/body\.document\.Statement\.0\.Sid: .*surrogate/);
    expectProblem(await gw.http.post('/platform/v1/scps', { document: denyDoc('a:b:c') }, { token: platform }), 400);
  });

  it('limits: 5 attached per account (409 naming the quota) and 5120 characters (422 naming the quota)', async () => {
    const a = await createAccount(gw);
    const ids = [];
    for (let i = 0; i < 6; i++) ids.push((await createScp(denyDoc(`svc${i}:Thing:Create`))).id);
    for (const id of ids.slice(0, 5)) expect((await attach(a.id, id)).status).toBe(201);
    const over = expectProblem(await attach(a.id, ids[5]), 409);
    expect(over.detail).toMatch(/scps-attached-per-entity/);
    expect(over.quota_code).toBe('scps-attached-per-entity');
    expect((await gw.http.get(`/platform/v1/accounts/${a.id}/scps`, { token: platform })).body).toHaveLength(5);

    const b = await createAccount(gw);
    const results = await Promise.all(ids.map((id) => attach(b.id, id)));
    expect(results.filter((r) => r.status === 201)).toHaveLength(5);
    expect(results.filter((r) => r.status === 409)).toHaveLength(1);

    const padded = (n: number) => {
      const doc = { Version: '2012-10-17', Statement: [{ Sid: '', Effect: 'Deny', Action: ['a:b:c'], Resource: '*' }] };
      doc.Statement[0].Sid = 'x'.repeat(n - JSON.stringify(doc).length);
      return JSON.stringify(doc);
    };
    const big = expectProblem(await gw.http.post('/platform/v1/scps', { name: 'too-big', document: padded(5121) }, { token: platform }), 422);
    expect(big.detail).toMatch(/scp-document-size/);
    expect(big.quota_code).toBe('scp-document-size');
    // exactly 5120 characters is allowed (Sid is capped at 128, so use a long Resource pattern list)
    const doc = { Version: '2012-10-17', Statement: [{ Effect: 'Deny', Action: ['a:b:c'], Resource: [] as string[] }] };
    while (JSON.stringify(doc).length < 5120 - 12) doc.Statement[0].Resource.push('r'.repeat(Math.min(500, 5120 - 12 - JSON.stringify(doc).length)));
    const text = JSON.stringify(doc);
    const fill = 5120 - text.length;
    const exact = fill > 0 ? text.replace('"a:b:c"', `"a:b:c${'x'.repeat(fill)}"`) : text;
    expect(exact.length).toBe(5120);
    expect((await gw.http.post('/platform/v1/scps', { name: `max-${crypto.randomUUID().slice(0, 6)}`, document: exact }, { token: platform })).status).toBe(201);
  });
});

describe('capabilities (platform admins grant and revoke; account admins read)', () => {
  it('grant, list, revoke; unknown capability 400; unknown account 404; account admins read theirs only', async () => {
    const a = await createAccount(gw);
    const b = await createAccount(gw);
    const read = await gw.http.get(`/iam/v1/accounts/${a.id}/capabilities`, { token: a.admin });
    expect(read.body).toEqual({ account_id: a.id, capabilities: [], grants: [] });
    const granted = await gw.http.put(`/platform/v1/accounts/${a.id}/capabilities/enroll_things`, undefined, { token: platform });
    expect(granted.status).toBe(200);
    expect(granted.body.capabilities).toEqual(['enroll_things']);
    await gw.http.put(`/platform/v1/accounts/${a.id}/capabilities/manage_ota_rollouts`, undefined, { token: platform });
    expect((await gw.http.put(`/platform/v1/accounts/${a.id}/capabilities/enroll_things`, undefined, { token: platform })).body.capabilities).toEqual(['enroll_things', 'manage_ota_rollouts']);
    const mine = await gw.http.get(`/iam/v1/accounts/${a.id}/capabilities`, { token: a.admin });
    expect(mine.body.capabilities).toEqual(['enroll_things', 'manage_ota_rollouts']);
    expect(mine.body.grants[0]).toMatchObject({ capability: 'enroll_things', granted_by: 'platform-root' });
    expectProblem(await gw.http.get(`/iam/v1/accounts/${a.id}/capabilities`, { token: b.admin }), 404);
    expectProblem(await gw.http.get(`/iam/v1/accounts/${a.id}/capabilities`, { token: a.viewer }), 403);
    expectProblem(await gw.http.get(`/iam/v1/accounts/${a.id}/scps`, { token: b.admin }), 404);
    expectProblem(await gw.http.put(`/platform/v1/accounts/${a.id}/capabilities/enroll_things`, undefined, { token: a.admin }), 403);
    expect(expectProblem(await gw.http.put(`/platform/v1/accounts/${a.id}/capabilities/fly`, undefined, { token: platform }), 400).detail).toMatch(/unknown capability/);
    expectProblem(await gw.http.put(`/platform/v1/accounts/${crypto.randomUUID()}/capabilities/enroll_things`, undefined, { token: platform }), 404);
    expect((await gw.http.delete(`/platform/v1/accounts/${a.id}/capabilities/enroll_things`, { token: platform })).status).toBe(204);
    expectProblem(await gw.http.delete(`/platform/v1/accounts/${a.id}/capabilities/enroll_things`, { token: platform }), 404);
    expect((await gw.http.get(`/platform/v1/accounts/${a.id}/capabilities`, { token: platform })).body.capabilities).toEqual(['manage_ota_rollouts']);
  });
});

describe('OpenAPI', () => {
  it('documents every IAM route', async () => {
    const doc = (await gw.http.get('/docs/json')).body;
    for (const p of ['/iam/v1/accounts/{accountId}/credentials', '/iam/v1/accounts/{accountId}/credentials/{credentialId}', '/iam/v1/sts/get-session-token',
      '/iam/v1/sts/sessions', '/iam/v1/sts/revoke-session', '/iam/v1/sts/revoke-all-sessions', '/platform/v1/scps', '/platform/v1/accounts/{accountId}/scps/{scpId}',
      '/platform/v1/accounts/{accountId}/capabilities/{capability}', '/platform/v1/accounts/{accountId}/assignments/{realm}/{principalId}',
      '/iam/v1/accounts/{accountId}/capabilities', '/iam/v1/accounts/{accountId}/scps', '/iam/v1/whoami']) {
      expect(doc.paths[p], p).toBeDefined();
    }
    expect(Object.keys(doc.paths['/iam/v1/accounts/{accountId}/credentials/{credentialId}']).sort()).toEqual(['delete', 'get', 'put']);
  });
});
