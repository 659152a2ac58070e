import crypto from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ManualClock } from '../../src/lib/clock.js';
import { signedHeaders, signingTimestamp, type Credentials } from '../../src/clients/svcSigner.js';
import { startTestGateway, expectProblem, type HttpResponse, type TestGateway } from '../helpers/gateway.js';
import { createAccount, type TestAccount } from '../helpers/accounts.js';
import { waitFor } from '../helpers/wait.js';
import { platformToken, registrar } from '../registry/helpers.js';

/**
 * Signed calls across the whole factory surface (issue 32, part 2), over real HTTP and Postgres:
 * every row of document 2's factory-surface table is either allowed by a provision-role
 * service's default policy, or refused with a 403 naming its action and allowed once an admin
 * widens the policy (platform operators' rows: refused, and never grantable). Then narrowing,
 * who may set a policy, a signature beside a bearer token, the model scope, and a second node.
 */
const clock = new ManualClock();
let gw: TestGateway;
let a: TestAccount;
let b: TestAccount;
let doc: any;
let pid = 0x3000 + Math.floor(Math.random() * 0x1000);

interface Model { id: string; descriptor: string }
interface Service { id: string; creds: Credentials }

async function model(account: TestAccount): Promise<Model> {
  const res = await gw.http.post('/api/v1/models', { vid: 'FFF7', pid: (pid++).toString(16).toUpperCase(), name: 'surface model', provisioning_method: 'none' }, { token: account.admin });
  expect(res.status, res.text).toBe(201);
  return { id: res.body.id, descriptor: res.body.descriptor };
}

async function service(account: TestAccount, modelId: string, role: 'identify' | 'provision' = 'provision'): Promise<Service> {
  const res = await gw.http.post('/api/v1/factory-services', { role, model_id: modelId, endpoint_url: 'https://factory.example' }, { token: account.admin });
  expect(res.status, res.text).toBe(201);
  return { id: res.body.id, creds: { accessKeyId: res.body.access_key_id, secretAccessKey: res.body.secret_access_key } };
}

async function enroll(account: TestAccount, m: Model, serial: string): Promise<string> {
  const res = await gw.http.post('/api/v1/enrollments', { model: m.descriptor, serial }, { token: account.operator });
  expect(res.status, res.text).toBe(201);
  return res.body.thing_id;
}

/** A signed request at the clock's time; the clock moves a second first, so no two are one signature (a replay). */
async function signed(creds: Credentials, method: string, target: string, body?: unknown, extra: Record<string, string> = {}, node: TestGateway = gw): Promise<HttpResponse> {
  clock.advance(1000);
  const raw = body === undefined ? undefined : JSON.stringify(body);
  const headers = signedHeaders(creds, { method, target, host: new URL(node.httpUrl).host, timestamp: signingTimestamp(clock.now()), body: raw });
  return node.http.request(method, target, undefined, { headers: { ...headers, ...(raw === undefined ? {} : { 'content-type': 'application/json' }), ...extra }, raw });
}

const policyPath = (s: Service) => `/api/v1/factory-services/${s.id}/policy`;
const refusedFor = (res: HttpResponse, action: string) => {
  const p = expectProblem(res, 403);
  expect(p.type).toMatch(/insufficient-permission$/);
  expect(p.detail).toContain(`does not allow ${action}`);
  expect(p.action).toBe(action);
};
/** Past authorization: whatever the operation answers, it is not a credential or permission refusal. */
const allowed = (res: HttpResponse, what: string) => expect([401, 403], `${what}: ${res.status} ${res.text}`).not.toContain(res.status);

// the world the rows act on
let mA: Model;
let mB: Model;
let mC: Model;
let svc: Service;
let spare: Service;
let thingA: string;
let thingB: string;
let registrarId: string;
const unknown = crypto.randomUUID();

beforeAll(async () => {
  gw = await startTestGateway({}, { clock });
  [a, b] = await Promise.all([createAccount(gw), createAccount(gw)]);
  registrarId = (await registrar(gw, a, await platformToken(gw))).id;
  [mA, mB, mC] = [await model(a), await model(a), await model(a)];
  svc = await service(a, mA.id);
  spare = await service(a, mC.id, 'identify');
  thingA = await enroll(a, mA, 'SURF-A');
  thingB = await enroll(a, mB, 'SURF-B');
  doc = (await gw.http.get('/docs/json')).body;
});
afterAll(async () => {
  await gw?.close();
});

/**
 * The spec's factory-surface table (document 2, "Endpoints"), one row each: method, path, the
 * action (the spec leaves factory-eligibility's blank; the route carries
 * Thing:ReadFactoryEligibility), and what a provision-role service's default policy does with it:
 * `allow`, `grant` (refused until an admin grants it) or `never` (platform operators' rows).
 */
type Default = 'allow' | 'grant' | 'never';
interface Row { method: string; path: string; action: string; def: Default; target: () => string; body?: () => unknown }
const row = (method: string, path: string, action: string, def: Default, target: () => string, body?: () => unknown): Row => ({ method, path, action, def, target, body });

const ROWS: Row[] = [
  row('GET', '/api/v1/access-requests', 'AccessRequest:List', 'allow', () => '/api/v1/access-requests'),
  row('GET', '/api/v1/access-requests/{id}', 'AccessRequest:Read', 'allow', () => `/api/v1/access-requests/${unknown}`),
  row('POST', '/api/v1/access-requests/{id}/approve', 'AccessRequest:Approve', 'grant', () => `/api/v1/access-requests/${unknown}/approve`, () => ({})),
  row('POST', '/api/v1/access-requests/{id}/decide', 'AccessRequest:Decide', 'grant', () => `/api/v1/access-requests/${unknown}/decide`, () => ({ decision: 'APPROVED' })),
  row('POST', '/api/v1/access-requests/{id}/reject', 'AccessRequest:Reject', 'grant', () => `/api/v1/access-requests/${unknown}/reject`, () => ({})),
  row('GET', '/api/v1/device-deeplinks', 'DeviceDeeplink:List', 'allow', () => '/api/v1/device-deeplinks'),
  row('POST', '/api/v1/device-deeplinks', 'DeviceDeeplink:Create', 'grant', () => '/api/v1/device-deeplinks', () => ({ thing_id: thingA })),
  row('DELETE', '/api/v1/device-deeplinks/{id}', 'DeviceDeeplink:Delete', 'grant', () => `/api/v1/device-deeplinks/${unknown}`),
  row('POST', '/api/v1/device-deeplinks/redeem', 'DeviceDeeplink:Redeem', 'grant', () => '/api/v1/device-deeplinks/redeem', () => ({ token: 'dlk_unknown' })),
  row('GET', '/api/v1/eligibility-artifacts', 'EligibilityArtifact:List', 'allow', () => '/api/v1/eligibility-artifacts'),
  row('POST', '/api/v1/eligibility-artifacts', 'EligibilityArtifact:Create', 'grant', () => '/api/v1/eligibility-artifacts', () => ({})),
  row('DELETE', '/api/v1/eligibility-artifacts/{id}', 'EligibilityArtifact:Revoke', 'grant', () => `/api/v1/eligibility-artifacts/${unknown}`),
  row('GET', '/api/v1/eligibility-artifacts/{id}', 'EligibilityArtifact:Read', 'allow', () => `/api/v1/eligibility-artifacts/${unknown}`),
  row('POST', '/api/v1/eligibility-artifacts/redeem', 'EligibilityArtifact:Redeem', 'grant', () => '/api/v1/eligibility-artifacts/redeem', () => ({ token: 'elg_unknown' })),
  row('GET', '/api/v1/eligibility-grants', 'EligibilityGrant:List', 'allow', () => '/api/v1/eligibility-grants'),
  row('POST', '/api/v1/eligibility-grants/{id}/approve', 'EligibilityGrant:Approve', 'grant', () => `/api/v1/eligibility-grants/${unknown}/approve`, () => ({})),
  row('POST', '/api/v1/eligibility-grants/{id}/reject', 'EligibilityGrant:Reject', 'grant', () => `/api/v1/eligibility-grants/${unknown}/reject`, () => ({ reason: 'no' })),
  row('GET', '/api/v1/enrollments', 'Enrollment:List', 'allow', () => '/api/v1/enrollments'),
  row('POST', '/api/v1/enrollments', 'Enrollment:Create', 'allow', () => '/api/v1/enrollments', () => ({ model: mA.descriptor, serial: `SURF-${crypto.randomUUID().slice(0, 8)}` })),
  row('GET', '/api/v1/enrollments/{id}', 'Enrollment:Read', 'allow', () => `/api/v1/enrollments/${thingA}`),
  row('POST', '/api/v1/factory-registrations', 'FactoryRegistration:Request', 'grant', () => '/api/v1/factory-registrations', () => ({})),
  row('POST', '/api/v1/factory-registrations/{account_id}/approve', 'FactoryRegistration:Approve', 'never', () => `/api/v1/factory-registrations/${a.id}/approve`, () => ({})),
  row('POST', '/api/v1/factory-registrations/{account_id}/refuse', 'FactoryRegistration:Refuse', 'never', () => `/api/v1/factory-registrations/${a.id}/refuse`, () => ({})),
  row('POST', '/api/v1/factory-registrations/{account_id}/revoke', 'FactoryRegistration:Revoke', 'never', () => `/api/v1/factory-registrations/${a.id}/revoke`, () => ({})),
  row('GET', '/api/v1/factory-registrations/me', 'FactoryRegistration:Read', 'allow', () => '/api/v1/factory-registrations/me'),
  row('GET', '/api/v1/factory-registrations/pending', 'FactoryRegistration:List', 'never', () => '/api/v1/factory-registrations/pending'),
  row('GET', '/api/v1/factory-services', 'FactoryService:List', 'allow', () => '/api/v1/factory-services'),
  row('POST', '/api/v1/factory-services', 'FactoryService:Create', 'grant', () => '/api/v1/factory-services', () => ({ role: 'provision', model_id: mC.id, endpoint_url: 'https://factory.example' })),
  row('GET', '/api/v1/factory-services/{id}', 'FactoryService:Read', 'allow', () => `/api/v1/factory-services/${spare.id}`),
  row('PATCH', '/api/v1/factory-services/{id}', 'FactoryService:Update', 'grant', () => `/api/v1/factory-services/${spare.id}`, () => ({ endpoint_url: 'https://other.example' })),
  row('DELETE', '/api/v1/factory-services/{id}', 'FactoryService:Delete', 'grant', () => `/api/v1/factory-services/${spare.id}`),
  row('POST', '/api/v1/factory-services/{id}/confirm-rotation', 'FactoryService:ConfirmRotation', 'allow', () => `/api/v1/factory-services/${svc.id}/confirm-rotation`),
  row('POST', '/api/v1/factory-services/{id}/expedite-drain', 'FactoryService:Drain', 'grant', () => `/api/v1/factory-services/${spare.id}/expedite-drain`),
  row('POST', '/api/v1/factory-services/{id}/health-check', 'FactoryService:HealthCheck', 'allow', () => `/api/v1/factory-services/${svc.id}/health-check`),
  row('POST', '/api/v1/factory-services/{id}/rotate-credentials', 'FactoryService:RotateCredentials', 'allow', () => `/api/v1/factory-services/${svc.id}/rotate-credentials`),
  row('GET', '/api/v1/identity-blacklist', 'IdentityBlacklist:List', 'allow', () => '/api/v1/identity-blacklist'),
  row('GET', '/api/v1/identity-blacklist/check', 'IdentityBlacklist:Check', 'allow', () => '/api/v1/identity-blacklist/check?sn=SURF-NONE'),
  row('GET', '/api/v1/identity-blacklist/deltas', 'IdentityBlacklist:ListDeltas', 'allow', () => '/api/v1/identity-blacklist/deltas'),
  row('GET', '/api/v1/identity-blacklist/snapshot.signed', 'IdentityBlacklist:GetSnapshot', 'allow', () => '/api/v1/identity-blacklist/snapshot.signed'),
  row('POST', '/api/v1/internal/models', 'Model:CreateInternal', 'never', () => '/api/v1/internal/models', () => ({ account_id: a.id, vid: 'FFF7', pid: 'FFFF', name: 'internal', provisioning_method: 'none' })),
  row('GET', '/api/v1/models', 'Model:List', 'allow', () => '/api/v1/models'),
  row('POST', '/api/v1/models', 'Model:Create', 'grant', () => '/api/v1/models', () => ({ vid: 'FFF7', pid: (pid++).toString(16).toUpperCase(), name: 'made by a service', provisioning_method: 'none' })),
  row('GET', '/api/v1/models/{id}', 'Model:Read', 'allow', () => `/api/v1/models/${mA.id}`),
  row('PATCH', '/api/v1/models/{id}', 'Model:Update', 'grant', () => `/api/v1/models/${mA.id}`, () => ({ description: 'changed by its factory service' })),
  row('DELETE', '/api/v1/models/{id}', 'Model:Delete', 'grant', () => `/api/v1/models/${mA.id}`),
  row('POST', '/api/v1/models/{id}/share', 'Model:Share', 'grant', () => `/api/v1/models/${mA.id}/share`, () => ({})),
  row('GET', '/api/v1/models/{id}/software', 'Model:Read', 'allow', () => `/api/v1/models/${mA.id}/software`),
  row('POST', '/api/v1/models/import', 'Model:Import', 'grant', () => '/api/v1/models/import', () => ({ token: 'mdl_unknown' })),
  row('GET', '/api/v1/provisioning-runs', 'ProvisioningRun:List', 'allow', () => '/api/v1/provisioning-runs'),
  row('GET', '/api/v1/provisioning-runs/{id}', 'ProvisioningRun:Read', 'allow', () => `/api/v1/provisioning-runs/${unknown}`),
  row('GET', '/api/v1/reference-requests', 'ReferenceRequest:List', 'allow', () => '/api/v1/reference-requests'),
  row('POST', '/api/v1/reference-requests', 'ReferenceRequest:Create', 'grant', () => '/api/v1/reference-requests', () => ({ note: 'no registrar: a 400 once authorized' })),
  row('GET', '/api/v1/reference-requests/{id}', 'ReferenceRequest:Read', 'allow', () => `/api/v1/reference-requests/${unknown}`),
  row('DELETE', '/api/v1/reference-requests/{id}', 'ReferenceRequest:Revoke', 'grant', () => `/api/v1/reference-requests/${unknown}`),
  row('POST', '/api/v1/reference-requests/{id}/approve', 'ReferenceRequest:Approve', 'grant', () => `/api/v1/reference-requests/${unknown}/approve`, () => ({})),
  row('POST', '/api/v1/reference-requests/{id}/reject', 'ReferenceRequest:Reject', 'grant', () => `/api/v1/reference-requests/${unknown}/reject`, () => ({ reason: 'no' })),
  row('GET', '/api/v1/reference-requests/inbox', 'ReferenceRequest:ListInbox', 'allow', () => '/api/v1/reference-requests/inbox'),
  row('GET', '/api/v1/registrars', 'Registrar:List', 'allow', () => '/api/v1/registrars'),
  row('POST', '/api/v1/registrars', 'Registrar:Create', 'grant', () => '/api/v1/registrars', () => ({ name: 'line of a service' })),
  row('GET', '/api/v1/registrars/{id}', 'Registrar:Read', 'allow', () => `/api/v1/registrars/${registrarId}`),
  row('PATCH', '/api/v1/registrars/{id}', 'Registrar:Update', 'grant', () => `/api/v1/registrars/${registrarId}`, () => ({ description: 'changed by a service' })),
  row('DELETE', '/api/v1/registrars/{id}', 'Registrar:Delete', 'grant', () => `/api/v1/registrars/${unknown}`),
  row('POST', '/api/v1/registrars/{id}/approve', 'Registrar:Approve', 'never', () => `/api/v1/registrars/${registrarId}/approve`, () => ({})),
  row('PUT', '/api/v1/registrars/{id}/canonical-model', 'Registrar:Update', 'grant', () => `/api/v1/registrars/${unknown}/canonical-model`, () => ({ model_id: mA.id })),
  row('POST', '/api/v1/registrars/{id}/reject', 'Registrar:Reject', 'never', () => `/api/v1/registrars/${registrarId}/reject`, () => ({})),
  row('GET', '/api/v1/things/{id}/factory-eligibility', 'Thing:ReadFactoryEligibility', 'allow', () => `/api/v1/things/${thingA}/factory-eligibility`),
  row('POST', '/api/v1/things/{id}/factory-handover', 'Thing:Handover', 'allow', () => `/api/v1/things/${thingA}/factory-handover`),
  row('POST', '/api/v1/things/{id}/provision', 'Thing:Provision', 'allow', () => `/api/v1/things/${unknown}/provision`),
  row('POST', '/api/v1/things/{id}/provisioning-result', 'Thing:Provision', 'allow', () => `/api/v1/things/${thingA}/provisioning-result`, () => ({ leg: 'provision', outcome: 'SUCCEEDED' })),
  row('GET', '/api/v1/things/{id}/state', 'Thing:ReadState', 'allow', () => `/api/v1/things/${thingA}/state`),
  row('GET', '/api/v1/things/resolve', 'Thing:List', 'allow', () => `/api/v1/things/resolve?model=${encodeURIComponent(mA.descriptor)}&serial=SURF-A`),
  row('GET', '/api/v1/vendors', 'Vendor:Read', 'allow', () => '/api/v1/vendors'),
  row('POST', '/api/v1/vendors', 'Vendor:Assign', 'grant', () => '/api/v1/vendors', () => ({})),
];

/** The OpenAPI path of a spec path (route parameters are named thingId under /things). */
const openapiPath = (p: string) => (p.startsWith('/api/v1/things/{id}') ? p.replace('{id}', '{thingId}') : p);

describe('every row of the factory-surface table, signed by a provision-role service', () => {
  it('the table is the spec\'s 73 rows, each a route of the gateway', () => {
    expect(ROWS).toHaveLength(73);
    for (const r of ROWS) expect(doc.paths[openapiPath(r.path)]?.[r.method.toLowerCase()], `${r.method} ${r.path}`).toBeDefined();
  });

  it.each(ROWS.map((r) => [`${r.method} ${r.path}`, r] as const))('%s', async (_name, r) => {
    const action = `factory:${r.action}`;
    const call = () => signed(svc.creds, r.method, r.target(), r.body?.());
    if (r.def === 'allow') {
      const res = await call();
      allowed(res, `${r.method} ${r.path}`);
      // rotating its own key: the new secret verifies from now on (the old one until confirmed)
      if (r.action === 'FactoryService:RotateCredentials') svc.creds = { ...svc.creds, secretAccessKey: res.body.secret_access_key };
      return;
    }
    refusedFor(await call(), action);
    if (r.def === 'never') {
      const put = await gw.http.put(policyPath(svc), { allow: [action] }, { token: a.admin });
      expect(expectProblem(put, 400).detail).toContain(action);
      expect(expectProblem(put, 400).detail).toContain('never granted');
      return;
    }
    // an admin widens the default by this action: allowed; back to the default
    const current = (await gw.http.get(policyPath(svc), { token: a.viewer })).body;
    expect(current.default).toBe(true);
    const put = await gw.http.put(policyPath(svc), { allow: [...current.allow, action] }, { token: a.admin });
    expect(put.status, put.text).toBe(200);
    expect(put.body).toMatchObject({ default: false, factory_service_id: svc.id });
    expect(put.body.allow).toContain(action);
    allowed(await call(), `${r.method} ${r.path} once granted`);
    expect((await gw.http.delete(policyPath(svc), { token: a.admin })).body.default).toBe(true);
  });
});

describe('policies', () => {
  it('the defaults per role: both read; provision also enrolls and hands over, identify does not', async () => {
    const m = await model(a);
    const identify = await service(a, m.id, 'identify');
    const provision = await service(a, m.id, 'provision');
    const [pi, pp] = [(await gw.http.get(policyPath(identify), { token: a.viewer })).body, (await gw.http.get(policyPath(provision), { token: a.operator })).body];
    expect(pi).toMatchObject({ role: 'identify', default: true });
    expect(pi.allow).toEqual(expect.arrayContaining(['factory:Model:List', 'factory:Thing:ReadState', 'factory:Thing:Provision', 'factory:FactoryService:RotateCredentials']));
    expect(pi.allow).not.toContain('factory:Enrollment:Create');
    expect(pp.allow).toEqual(expect.arrayContaining(['factory:Enrollment:Create', 'factory:Thing:Handover']));
    expect(pi.allow.every((x: string) => pp.allow.includes(x))).toBe(true);
    refusedFor(await signed(identify.creds, 'POST', '/api/v1/enrollments', { model: m.descriptor, serial: 'ID-1' }), 'factory:Enrollment:Create');
    expect((await signed(provision.creds, 'POST', '/api/v1/enrollments', { model: m.descriptor, serial: 'ID-1' })).status).toBe(201);
    expect((await signed(identify.creds, 'GET', '/api/v1/enrollments')).status).toBe(200);
  });

  it('narrowing the default refuses a read it allowed; the other reads stay; DELETE restores the default', async () => {
    const m = await model(a);
    const s = await service(a, m.id);
    expect((await signed(s.creds, 'GET', '/api/v1/models')).status).toBe(200);
    const current = (await gw.http.get(policyPath(s), { token: a.admin })).body.allow as string[];
    const put = await gw.http.put(policyPath(s), { allow: current.filter((x) => x !== 'factory:Model:List') }, { token: a.admin });
    expect(put.status, put.text).toBe(200);
    const refused = await signed(s.creds, 'GET', '/api/v1/models');
    refusedFor(refused, 'factory:Model:List');
    expect(refused.body.detail).toContain(`factory service ${s.id}'s policy`);
    expect(refused.body.detail).toContain('an account admin set');
    expect((await signed(s.creds, 'GET', `/api/v1/models/${m.id}`)).status).toBe(200);
    expect((await gw.http.get(policyPath(s), { token: a.viewer })).body).toMatchObject({ default: false, allow: current.filter((x) => x !== 'factory:Model:List') });
    // an empty list: nothing at all
    expect((await gw.http.put(policyPath(s), { allow: [] }, { token: a.admin })).body.allow).toEqual([]);
    refusedFor(await signed(s.creds, 'GET', `/api/v1/models/${m.id}`), 'factory:Model:Read');
    expect((await gw.http.delete(policyPath(s), { token: a.admin })).body).toMatchObject({ default: true, allow: current });
    expect((await signed(s.creds, 'GET', '/api/v1/models')).status).toBe(200);
    // stored distinct and sorted
    const dup = await gw.http.put(policyPath(s), { allow: ['factory:Thing:ReadState', 'factory:Model:List', 'factory:Thing:ReadState'] }, { token: a.admin });
    expect(dup.body.allow).toEqual(['factory:Model:List', 'factory:Thing:ReadState']);
  });

  it('only admins write (403 for operators, viewers and the service itself); admin, operator and viewer read; 404 across accounts', async () => {
    const s = await service(a, (await model(a)).id);
    const body = { allow: ['factory:Model:List'] };
    for (const token of [a.operator, a.viewer]) expect(expectProblem(await gw.http.put(policyPath(s), body, { token }), 403).detail).toContain('factory:FactoryService:PutPolicy');
    expectProblem(await gw.http.delete(policyPath(s), { token: a.operator }), 403);
    refusedFor(await signed(s.creds, 'PUT', policyPath(s), body), 'factory:FactoryService:PutPolicy');
    refusedFor(await signed(s.creds, 'GET', policyPath(s)), 'factory:FactoryService:GetPolicy');
    for (const token of [a.admin, a.operator, a.viewer]) expect((await gw.http.get(policyPath(s), { token })).status).toBe(200);
    expectProblem(await gw.http.get(policyPath(s), { token: b.admin }), 404);
    expectProblem(await gw.http.put(policyPath(s), body, { token: b.admin }), 404);
    expectProblem(await gw.http.put(`/api/v1/factory-services/${crypto.randomUUID()}/policy`, body, { token: a.admin }), 404);
    expectProblem(await gw.http.get(policyPath(s), {}), 401);
  });

  it('400 naming the entry: unknown actions, platform operators\' actions, tenant-plane actions, the policy itself; bad bodies; nothing stored', async () => {
    const s = await service(a, (await model(a)).id);
    const cases: [unknown, RegExp][] = [
      [{ allow: ['factory:Model:List', 'factory:Model:Fly'] }, /allow\[1\]: "factory:Model:Fly" is an unknown action/],
      [{ allow: ['iam:Nothing:Here'] }, /allow\[0\]: "iam:Nothing:Here" is an unknown action/],
      [{ allow: ['iam:Credential:Create'] }, /allow\[0\]: "iam:Credential:Create" is not an action of the factory surface a service may be granted/],
      [{ allow: ['*'] }, /allow\[0\]: "\*" is an unknown action/],
      [{ allow: ['factory:Model:CreateInternal'] }, /"factory:Model:CreateInternal" is never granted to a factory service: platform operators/],
      [{ allow: ['factory:Registrar:Approve'] }, /"factory:Registrar:Approve" is never granted/],
      [{ allow: ['factory:FactoryService:PutPolicy'] }, /may not widen its own policy/],
      [{ allow: ['factory:Thing:Annihilate'] }, /"factory:Thing:Annihilate" is not an action of the factory surface a service may be granted/],
      [{ allow: 'factory:Model:List' }, /allow/],
      [{ allow: ['factory:Model:List'], deny: [] }, /deny/],
      [{}, /allow/],
    ];
    for (const [body, detail] of cases) {
      const res = await gw.http.put(policyPath(s), body, { token: a.admin });
      expect(expectProblem(res, 400).detail, JSON.stringify(body)).toMatch(detail);
    }
    expect((await gw.http.get(policyPath(s), { token: a.admin })).body.default).toBe(true);
  });

  it('409 once the service is soft-deleted', async () => {
    const s = await service(a, (await model(a)).id);
    expect((await gw.http.delete(`/api/v1/factory-services/${s.id}`, { token: a.admin })).status).toBe(204);
    expect(expectProblem(await gw.http.put(policyPath(s), { allow: [] }, { token: a.admin }), 409).detail).toMatch(/SOFT_DELETED/);
  });

  it('a policy change reaches every node at once (the cached signing identity is dropped cluster-wide)', async () => {
    const m = await model(a);
    const s = await service(a, m.id);
    const second = await startTestGateway({ NODE_ID: 'surface-node-b' }, { db: gw.db, clock });
    try {
      // the second node caches the identity with the default policy
      expect((await signed(s.creds, 'GET', '/api/v1/models', undefined, {}, second)).status).toBe(200);
      const put = await gw.http.put(policyPath(s), { allow: ['factory:Model:Read'] }, { token: a.admin });
      expect(put.status, put.text).toBe(200);
      await waitFor(async () => (await signed(s.creds, 'GET', '/api/v1/models', undefined, {}, second)).status === 403, 10_000, 'node b to apply the new policy');
      expect((await signed(s.creds, 'GET', `/api/v1/models/${m.id}`, undefined, {}, second)).status).toBe(200);
    } finally {
      await second.close();
    }
  });
});

describe('a request with signature headers is judged by its signature alone', () => {
  it('an invalid signature is 401 even beside a valid bearer token; so is a lone signature header', async () => {
    const good = await gw.http.get('/api/v1/models', { token: a.admin });
    expect(good.status).toBe(200);
    clock.advance(1000);
    const headers = signedHeaders(svc.creds, { method: 'GET', target: '/api/v1/models', host: new URL(gw.httpUrl).host, timestamp: signingTimestamp(clock.now()) });
    const bad = await gw.http.get('/api/v1/models', { token: a.admin, headers: { ...headers, 'x-svc-signature': '0'.repeat(64) } });
    expect(expectProblem(bad, 401).detail).toMatch(/signature does not match/);
    const lone = await gw.http.get('/api/v1/models', { token: a.admin, headers: { 'x-svc-signature': '0'.repeat(64) } });
    expect(expectProblem(lone, 401).detail).toMatch(/lacks the X-SVC-Access-Key-Id header/);
    const unknownKey = await gw.http.get('/api/v1/models', { token: a.admin, headers: { ...headers, 'x-svc-access-key-id': 'AKSV0000000000000000' } });
    expectProblem(unknownKey, 401);
  });

  it('a valid signature beside an Authorization header is the service, not the user', async () => {
    const body = { role: 'identify', model_id: mB.id, endpoint_url: 'https://factory.example' };
    // the admin's token alone could register it; with the service's signature it is the service's call
    refusedFor(await signed(svc.creds, 'POST', '/api/v1/factory-services', body, { authorization: `Bearer ${a.admin}` }), 'factory:FactoryService:Create');
    const bySvc = await signed(svc.creds, 'GET', '/api/v1/models', undefined, { authorization: `Bearer ${b.admin}` });
    expect(bySvc.status).toBe(200);
    expect(bySvc.body.items.map((x: { id: string }) => x.id)).toEqual([mA.id]);
  });
});

describe('model scope: a service of model A reaches model A only', () => {
  it('things, enrollments and models of model B read as absent (404); lists hold model A only', async () => {
    const c = svc.creds;
    expect((await signed(c, 'GET', `/api/v1/things/${thingA}/state`)).status).toBe(200);
    expectProblem(await signed(c, 'GET', `/api/v1/things/${thingB}/state`), 404);
    expectProblem(await signed(c, 'GET', `/api/v1/things/${thingB}/factory-eligibility`), 404);
    expectProblem(await signed(c, 'GET', `/api/v1/enrollments/${thingB}`), 404);
    expectProblem(await signed(c, 'GET', `/api/v1/things/resolve?model=${encodeURIComponent(mB.descriptor)}&serial=SURF-B`), 404);
    expectProblem(await signed(c, 'POST', `/api/v1/things/${thingB}/factory-handover`), 404);
    expectProblem(await signed(c, 'POST', `/api/v1/things/${thingB}/provision`), 404);
    expectProblem(await signed(c, 'GET', `/api/v1/models/${mB.id}`), 404);
    expectProblem(await signed(c, 'GET', `/api/v1/models/${mB.id}/software`), 404);
    expect((await signed(c, 'GET', `/api/v1/models/${mA.id}`)).body.id).toBe(mA.id);
    expect((await signed(c, 'GET', '/api/v1/models')).body).toEqual({ items: [expect.objectContaining({ id: mA.id })], next_cursor: null });
    const enrollments = (await signed(c, 'GET', '/api/v1/enrollments?limit=100')).body.items.map((x: { thing_id: string }) => x.thing_id);
    expect(enrollments).toContain(thingA);
    expect(enrollments).not.toContain(thingB);
    // the account's users see both
    expect((await gw.http.get(`/api/v1/things/${thingB}/state`, { token: a.viewer })).status).toBe(200);
    expect((await gw.http.get('/api/v1/models?limit=100', { token: a.viewer })).body.items.map((x: { id: string }) => x.id)).toEqual(expect.arrayContaining([mA.id, mB.id]));
  });

  it('a granted model write still reaches model A only', async () => {
    const current = (await gw.http.get(policyPath(svc), { token: a.admin })).body.allow as string[];
    expect((await gw.http.put(policyPath(svc), { allow: [...current, 'factory:Model:Update', 'factory:Model:Share'] }, { token: a.admin })).status).toBe(200);
    try {
      expectProblem(await signed(svc.creds, 'PATCH', `/api/v1/models/${mB.id}`, { description: 'not mine' }), 404);
      expectProblem(await signed(svc.creds, 'POST', `/api/v1/models/${mB.id}/share`, {}), 404);
      expect((await gw.http.get(`/api/v1/models/${mB.id}`, { token: a.viewer })).body.description).not.toBe('not mine');
      expect((await signed(svc.creds, 'PATCH', `/api/v1/models/${mA.id}`, { description: 'mine' })).body.description).toBe('mine');
    } finally {
      await gw.http.delete(policyPath(svc), { token: a.admin });
    }
  });

  it('another account\'s service sees nothing of this account (404)', async () => {
    const other = await service(b, (await model(b)).id);
    expectProblem(await signed(other.creds, 'GET', `/api/v1/things/${thingA}/state`), 404);
    expectProblem(await signed(other.creds, 'GET', `/api/v1/factory-services/${svc.id}`), 404);
    expectProblem(await signed(other.creds, 'GET', `/api/v1/models/${mA.id}`), 404);
  });
});
