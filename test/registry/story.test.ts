import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestGateway, expectProblem, type TestGateway } from '../helpers/gateway.js';
import { createAccount, type TestAccount } from '../helpers/accounts.js';
import { waitFor } from '../helpers/wait.js';
import { platformToken } from './helpers.js';

/**
 * The two-account story over real HTTP: a maker (A) sets up its vendor, model and registrar
 * (approved by a platform operator, canonical model bound once); a partner (B) becomes eligible
 * through an artifact A shares and approves, asks for references, A approves, and things A
 * enrolls later appear in B's repository without another call.
 */
let gw: TestGateway;
let maker: TestAccount;
let partner: TestAccount;
let operator: string;

beforeAll(async () => {
  gw = await startTestGateway();
  [maker, partner] = await Promise.all([createAccount(gw, { name: 'maker' }), createAccount(gw, { name: 'partner' })]);
  operator = await platformToken(gw, 'platform-operator-1');
});
afterAll(async () => gw?.close());

describe('two-account story', () => {
  it('vendor, model, registrar, eligibility, reference request, and later things appear for the partner', async () => {
    // the maker's vendor namespace and model
    const vendor = await gw.http.post('/api/v1/vendors', {}, { token: maker.admin });
    expect(vendor.status).toBe(201);
    const model = await gw.http.post('/api/v1/models', { pid: '0A01', name: 'thermostat', provisioning_method: 'none' }, { token: maker.admin });
    expect(model.status, model.text).toBe(201);
    expect(model.body.vid).toBe(vendor.body.vid);
    const spare = await gw.http.post('/api/v1/models', { pid: '0A02', name: 'spare', provisioning_method: 'none' }, { token: maker.admin });

    // factory registration approved by a platform operator, then a registrar
    expectProblem(await gw.http.post('/api/v1/registrars', { name: 'line A' }, { token: maker.admin }), 403);
    expect((await gw.http.post('/api/v1/factory-registrations', { note: 'thermostats' }, { token: maker.admin })).status).toBe(201);
    const queue = await gw.http.get('/api/v1/factory-registrations/pending', { token: operator });
    expect(queue.body.items.map((r: any) => r.account_id)).toContain(maker.id);
    expect((await gw.http.post(`/api/v1/factory-registrations/${maker.id}/approve`, {}, { token: operator })).body.state).toBe('APPROVED');
    const registrar = await gw.http.post('/api/v1/registrars', { name: 'line A' }, { token: maker.admin });
    expect(registrar.body.state).toBe('PENDING');
    const rid = registrar.body.id;

    // canonical model set once
    expect((await gw.http.put(`/api/v1/registrars/${rid}/canonical-model`, { model_id: model.body.id }, { token: maker.admin })).body.canonical_model_id).toBe(model.body.id);
    expectProblem(await gw.http.put(`/api/v1/registrars/${rid}/canonical-model`, { model_id: spare.body.id }, { token: maker.admin }), 409);

    // approved by the platform operator
    const pendingRegistrars = await gw.http.get('/api/v1/registrars?state=PENDING', { token: operator });
    expect(pendingRegistrars.body.items.map((r: any) => r.id)).toContain(rid);
    expect((await gw.http.post(`/api/v1/registrars/${rid}/approve`, {}, { token: operator })).body.state).toBe('APPROVED');

    // the partner is not eligible yet
    expectProblem(await gw.http.post('/api/v1/reference-requests', { registrar_id: rid }, { token: partner.admin }), 403);

    // eligibility: an artifact shared by URL, redeemed, approved from the maker's inbox
    const artifact = await gw.http.post('/api/v1/eligibility-artifacts', { note: 'partner programme' }, { token: maker.admin });
    const grant = await gw.http.post('/api/v1/eligibility-artifacts/redeem', { url: artifact.body.url }, { token: partner.admin });
    expect(grant.body.state).toBe('PENDING');
    const inbox = await gw.http.get('/api/v1/eligibility-grants?state=PENDING', { token: maker.viewer });
    expect(inbox.body.items.map((g: any) => g.id)).toEqual([grant.body.id]);
    expect((await gw.http.post(`/api/v1/eligibility-grants/${grant.body.id}/approve`, {}, { token: maker.admin })).body.state).toBe('APPROVED');

    // a thing enrolled before the request
    const first = await gw.http.post('/api/v1/enrollments', { model: model.body.descriptor, serial: 'TH-0001' }, { token: maker.operator });
    expect(first.status, first.text).toBe(201);

    // the reference request, approved by the maker
    const request = await gw.http.post('/api/v1/reference-requests', { registrar_id: rid, note: 'service partner' }, { token: partner.admin });
    expect(request.status, request.text).toBe(201);
    expect((await gw.http.get('/api/v1/reference-requests/inbox?state=PENDING', { token: maker.viewer })).body.items.map((r: any) => r.id)).toEqual([request.body.id]);
    const approved = await gw.http.post(`/api/v1/reference-requests/${request.body.id}/approve`, {}, { token: maker.admin });
    expect(approved.body).toMatchObject({ state: 'APPROVED', references_added: 1 });
    const initial = await gw.http.get('/api/v1/thing-references', { token: partner.viewer });
    expect(initial.body.items.map((r: any) => r.thing_id)).toEqual([first.body.thing_id]);

    // things enrolled later appear for the partner without another call
    const later: string[] = [];
    for (const serial of ['TH-0002', 'TH-0003', 'TH-0004']) {
      const res = await gw.http.post('/api/v1/enrollments', { model: model.body.descriptor, serial }, { token: maker.operator });
      expect(res.status).toBe(201);
      later.push(res.body.thing_id);
    }
    const all = await waitFor(async () => {
      const items = (await gw.http.get('/api/v1/thing-references', { token: partner.viewer })).body.items as any[];
      return items.length === 4 ? items : undefined;
    }, 15_000, 'the later things in the partner repository');
    expect(all.map((r) => r.thing_id).sort()).toEqual([first.body.thing_id, ...later].sort());
    expect(all.every((r) => r.owner_account_id === maker.id && r.descriptor === model.body.descriptor)).toBe(true);
    // the maker sees no references of its own things; nobody else sees the partner's
    expect((await gw.http.get('/api/v1/thing-references', { token: maker.viewer })).body.items).toEqual([]);
  });
});

describe('OpenAPI document', () => {
  // [method, path, success status, has a JSON request body]
  const ROUTES: [string, string, string, boolean][] = [
    ['post', '/api/v1/vendors', '201', true], ['get', '/api/v1/vendors', '200', false],
    ['patch', '/api/v1/models/{id}', '200', true], ['delete', '/api/v1/models/{id}', '204', false],
    ['post', '/api/v1/models/{id}/share', '201', true], ['post', '/api/v1/models/import', '201', true],
    ['get', '/api/v1/models/{id}/software', '200', false], ['post', '/api/v1/internal/models', '201', true],
    ['post', '/api/v1/registrars', '201', true], ['get', '/api/v1/registrars', '200', false], ['get', '/api/v1/registrars/{id}', '200', false],
    ['patch', '/api/v1/registrars/{id}', '200', true], ['delete', '/api/v1/registrars/{id}', '204', false],
    ['post', '/api/v1/registrars/{id}/approve', '200', true], ['post', '/api/v1/registrars/{id}/reject', '200', true],
    ['put', '/api/v1/registrars/{id}/canonical-model', '200', true],
    ['post', '/api/v1/access-requests', '201', true], ['get', '/api/v1/access-requests', '200', false], ['get', '/api/v1/access-requests/{id}', '200', false],
    ['post', '/api/v1/access-requests/{id}/approve', '200', true], ['post', '/api/v1/access-requests/{id}/reject', '200', true],
    ['post', '/api/v1/access-requests/{id}/decide', '200', true],
    ['post', '/api/v1/factory-registrations', '201', true], ['get', '/api/v1/factory-registrations/me', '200', false],
    ['get', '/api/v1/factory-registrations/pending', '200', false],
    ['post', '/api/v1/factory-registrations/{account_id}/approve', '200', true], ['post', '/api/v1/factory-registrations/{account_id}/refuse', '200', true],
    ['post', '/api/v1/factory-registrations/{account_id}/revoke', '200', true],
    ['post', '/api/v1/eligibility-artifacts', '201', true], ['get', '/api/v1/eligibility-artifacts', '200', false],
    ['get', '/api/v1/eligibility-artifacts/{id}', '200', false], ['delete', '/api/v1/eligibility-artifacts/{id}', '204', false],
    ['post', '/api/v1/eligibility-artifacts/redeem', '201', true], ['get', '/api/v1/eligibility-grants', '200', false],
    ['post', '/api/v1/eligibility-grants/{id}/approve', '200', true], ['post', '/api/v1/eligibility-grants/{id}/reject', '200', true],
    ['post', '/api/v1/reference-requests', '201', true], ['get', '/api/v1/reference-requests', '200', false],
    ['get', '/api/v1/reference-requests/inbox', '200', false], ['get', '/api/v1/reference-requests/{id}', '200', false],
    ['delete', '/api/v1/reference-requests/{id}', '204', false], ['post', '/api/v1/reference-requests/{id}/approve', '200', true],
    ['post', '/api/v1/reference-requests/{id}/reject', '200', true], ['get', '/api/v1/thing-references', '200', false],
    ['post', '/api/v1/device-deeplinks', '201', true], ['get', '/api/v1/device-deeplinks', '200', false],
    ['delete', '/api/v1/device-deeplinks/{id}', '204', false], ['post', '/api/v1/device-deeplinks/redeem', '200', true],
  ];
  it('lists every route of part 2 with its summary, request and response schemas', async () => {
    const doc = (await gw.http.get('/docs/json')).body;
    for (const [method, path, status, hasBody] of ROUTES) {
      const op = doc.paths?.[path]?.[method];
      expect(op, `${method.toUpperCase()} ${path} is missing`).toBeDefined();
      expect(op.summary, path).toBeTruthy();
      expect(op.responses[status], `${method} ${path} has no ${status} response`).toBeDefined();
      if (status !== '204') expect(op.responses[status].content?.['application/json']?.schema, path).toBeDefined();
      if (hasBody) expect(op.requestBody?.content?.['application/json']?.schema, `${method} ${path} body`).toBeDefined();
      if (path.includes('{')) expect(op.parameters?.some((p: any) => p.in === 'path'), path).toBe(true);
    }
  });
});
