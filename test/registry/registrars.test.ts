import crypto from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestGateway, expectProblem, type TestGateway } from '../helpers/gateway.js';
import { createAccount, type TestAccount } from '../helpers/accounts.js';
import { signedHeaders, signingTimestamp } from '../../src/clients/svcSigner.js';
import { approvedFactory, platformToken, registrar, vendorModel } from './helpers.js';

/** Factory registrations, registrars and access requests over real HTTP: every row of the spec's table. */
let gw: TestGateway;
let a: TestAccount;
let b: TestAccount;
let platform: string;
const unknown = () => crypto.randomUUID();

beforeAll(async () => {
  gw = await startTestGateway();
  [a, b] = await Promise.all([createAccount(gw), createAccount(gw)]);
  platform = await platformToken(gw);
});
afterAll(async () => {
  await gw?.close();
});

describe('factory registrations', () => {
  it('request (201, then 200), me (404 before), queue, approve / refuse / revoke with their statuses', async () => {
    const c = await createAccount(gw);
    expectProblem(await gw.http.get('/api/v1/factory-registrations/me', { token: c.viewer }), 404);
    for (const verb of ['approve', 'refuse', 'revoke']) expectProblem(await gw.http.post(`/api/v1/factory-registrations/${c.id}/${verb}`, {}, { token: platform }), 404);
    expectProblem(await gw.http.post('/api/v1/factory-registrations', {}, { token: c.viewer }), 403);
    expectProblem(await gw.http.post('/api/v1/factory-registrations', {}, { token: platform }), 403);
    const first = await gw.http.post('/api/v1/factory-registrations', { note: 'we build sensors' }, { token: c.admin });
    expect(first.status, first.text).toBe(201);
    expect(first.body).toMatchObject({ account_id: c.id, state: 'REQUESTED', note: 'we build sensors', decided_at: null });
    expect((await gw.http.post('/api/v1/factory-registrations', undefined, { token: c.admin })).status).toBe(200);
    expect((await gw.http.get('/api/v1/factory-registrations/me', { token: c.viewer })).body.state).toBe('REQUESTED');

    const queue = await gw.http.get('/api/v1/factory-registrations/pending?limit=100', { token: platform });
    expect(queue.status).toBe(200);
    expect(queue.body.items.map((r: any) => r.account_id)).toContain(c.id);
    expectProblem(await gw.http.get('/api/v1/factory-registrations/pending', { token: c.admin }), 403);

    // 403 for anyone but platform staff
    for (const verb of ['approve', 'refuse', 'revoke']) expectProblem(await gw.http.post(`/api/v1/factory-registrations/${c.id}/${verb}`, {}, { token: c.admin }), 403);
    const approved = await gw.http.post(`/api/v1/factory-registrations/${c.id}/approve`, {}, { token: platform });
    expect(approved.status, approved.text).toBe(200);
    expect(approved.body).toMatchObject({ state: 'APPROVED', decided_by: 'platform-op' });
    expect((await gw.http.get('/api/v1/factory-registrations/pending?limit=100', { token: platform })).body.items.map((r: any) => r.account_id)).not.toContain(c.id);
    // wrong state: 409
    expectProblem(await gw.http.post(`/api/v1/factory-registrations/${c.id}/approve`, {}, { token: platform }), 409);
    expectProblem(await gw.http.post(`/api/v1/factory-registrations/${c.id}/refuse`, {}, { token: platform }), 409);
    const revoked = await gw.http.post(`/api/v1/factory-registrations/${c.id}/revoke`, { reason: 'audit failed' }, { token: platform });
    expect(revoked.body).toMatchObject({ state: 'REVOKED', reason: 'audit failed' });
    expectProblem(await gw.http.post(`/api/v1/factory-registrations/${c.id}/revoke`, {}, { token: platform }), 409);
    // asked again after a revocation: REQUESTED (200); refused from there
    expect((await gw.http.post('/api/v1/factory-registrations', {}, { token: c.admin })).body.state).toBe('REQUESTED');
    expect((await gw.http.post(`/api/v1/factory-registrations/${c.id}/refuse`, {}, { token: platform })).body.state).toBe('REFUSED');
  });

  it('concurrent requests of one account: one 201, the others 200', async () => {
    const c = await createAccount(gw);
    const all = await Promise.all(Array.from({ length: 5 }, () => gw.http.post('/api/v1/factory-registrations', {}, { token: c.admin })));
    expect(all.map((r) => r.status).sort()).toEqual([200, 200, 200, 200, 201]);
  });
});

describe('registrars', () => {
  it('create needs an approved factory registration (403 before); read, list (keyset), PATCH, DELETE', async () => {
    const c = await createAccount(gw);
    expect(expectProblem(await gw.http.post('/api/v1/registrars', { name: 'x' }, { token: c.admin }), 403).detail).toContain('factory registration');
    await approvedFactory(gw, c, platform);
    expectProblem(await gw.http.post('/api/v1/registrars', {}, { token: c.admin }), 400);
    expectProblem(await gw.http.post('/api/v1/registrars', { name: 'x' }, { token: c.viewer }), 403);
    expectProblem(await gw.http.post('/api/v1/registrars', { name: 'x' }), 401);
    const ids: string[] = [];
    for (let i = 0; i < 5; i++) {
      const res = await gw.http.post('/api/v1/registrars', { name: `line ${i}`, description: 'assembly' }, { token: c.operator });
      expect(res.status, res.text).toBe(201);
      expect(res.body).toMatchObject({ account_id: c.id, state: 'PENDING', canonical_model_id: null, description: 'assembly' });
      ids.push(res.body.id);
    }
    const seen: string[] = [];
    let after: string | null = null;
    do {
      const res: any = await gw.http.get(`/api/v1/registrars?limit=2${after ? `&after=${after}` : ''}`, { token: c.viewer });
      seen.push(...res.body.items.map((r: any) => r.id));
      after = res.body.next_cursor;
    } while (after);
    expect(seen).toEqual([...ids].sort());
    expectProblem(await gw.http.get('/api/v1/registrars?after=nope', { token: c.viewer }), 400);
    expectProblem(await gw.http.get('/api/v1/registrars?state=GONE', { token: c.viewer }), 400);
    expectProblem(await gw.http.get(`/api/v1/registrars?account_id=${a.id}`, { token: c.viewer }), 400);

    expect((await gw.http.get(`/api/v1/registrars/${ids[0]}`, { token: c.viewer })).body.name).toBe('line 0');
    expectProblem(await gw.http.get(`/api/v1/registrars/${ids[0]}`, { token: a.viewer }), 404);
    expectProblem(await gw.http.get(`/api/v1/registrars/${unknown()}`, { token: c.viewer }), 404);

    const patched = await gw.http.patch(`/api/v1/registrars/${ids[0]}`, { name: 'renamed' }, { token: c.operator });
    expect(patched.status, patched.text).toBe(200);
    expect(patched.body).toMatchObject({ name: 'renamed', description: 'assembly' });
    expectProblem(await gw.http.patch(`/api/v1/registrars/${ids[0]}`, { state: 'APPROVED' }, { token: c.operator }), 400);
    expectProblem(await gw.http.patch(`/api/v1/registrars/${ids[0]}`, { name: 'x' }, { token: a.admin }), 404);

    expectProblem(await gw.http.delete(`/api/v1/registrars/${ids[1]}`, { token: a.admin }), 404);
    expect((await gw.http.delete(`/api/v1/registrars/${ids[1]}`, { token: c.admin })).status).toBe(204);
    expectProblem(await gw.http.get(`/api/v1/registrars/${ids[1]}`, { token: c.viewer }), 404);
    expectProblem(await gw.http.delete(`/api/v1/registrars/${ids[1]}`, { token: c.admin }), 404);
    expectProblem(await gw.http.patch(`/api/v1/registrars/${ids[1]}`, { name: 'x' }, { token: c.admin }), 404);
    expect((await gw.http.get('/api/v1/registrars?limit=100', { token: c.viewer })).body.items.map((r: any) => r.id)).not.toContain(ids[1]);
  });

  it('approve and reject by a platform operator while PENDING (409 otherwise; 403 for account users); the platform queue', async () => {
    const r1 = await registrar(gw, a, platform, { pending: true });
    const r2 = await registrar(gw, a, platform, { pending: true });
    expectProblem(await gw.http.post(`/api/v1/registrars/${r1.id}/approve`, {}, { token: a.admin }), 403);
    const queue = await gw.http.get('/api/v1/registrars?state=PENDING&limit=100', { token: platform });
    expect(queue.body.items.map((r: any) => r.id)).toEqual(expect.arrayContaining([r1.id, r2.id]));
    expect((await gw.http.get(`/api/v1/registrars?state=PENDING&account_id=${b.id}`, { token: platform })).body.items).toEqual([]);
    const approved = await gw.http.post(`/api/v1/registrars/${r1.id}/approve`, undefined, { token: platform });
    expect(approved.status, approved.text).toBe(200);
    expect(approved.body).toMatchObject({ state: 'APPROVED', decided_by: 'platform-op' });
    expect(expectProblem(await gw.http.post(`/api/v1/registrars/${r1.id}/approve`, {}, { token: platform }), 409)).toMatchObject({ state: 'APPROVED' });
    expectProblem(await gw.http.post(`/api/v1/registrars/${r1.id}/reject`, {}, { token: platform }), 409);
    const rejected = await gw.http.post(`/api/v1/registrars/${r2.id}/reject`, { reason: 'unknown line' }, { token: platform });
    expect(rejected.body).toMatchObject({ state: 'REJECTED', reason: 'unknown line' });
    expectProblem(await gw.http.post(`/api/v1/registrars/${r2.id}/approve`, {}, { token: platform }), 409);
    expectProblem(await gw.http.post(`/api/v1/registrars/${unknown()}/approve`, {}, { token: platform }), 404);
    // concurrent approvals: one 200, the other 409
    const r3 = await registrar(gw, a, platform, { pending: true });
    const both = await Promise.all([0, 1].map(() => gw.http.post(`/api/v1/registrars/${r3.id}/approve`, {}, { token: platform })));
    expect(both.map((r) => r.status).sort()).toEqual([200, 409]);
  });

  it('canonical model is bound once: same again 200, another 409, not the account\'s model 400, other account 404', async () => {
    const m1 = await vendorModel(gw, a);
    const m2 = await vendorModel(gw, a);
    const foreign = await vendorModel(gw, b);
    const r = await registrar(gw, a, platform, { pending: true });
    expectProblem(await gw.http.put(`/api/v1/registrars/${r.id}/canonical-model`, { model_id: foreign.id }, { token: a.operator }), 400);
    expectProblem(await gw.http.put(`/api/v1/registrars/${r.id}/canonical-model`, {}, { token: a.operator }), 400);
    expectProblem(await gw.http.put(`/api/v1/registrars/${r.id}/canonical-model`, { model_id: m1.id }, { token: b.operator }), 404);
    const bound = await gw.http.put(`/api/v1/registrars/${r.id}/canonical-model`, { model_id: m1.id }, { token: a.operator });
    expect(bound.status, bound.text).toBe(200);
    expect(bound.body.canonical_model_id).toBe(m1.id);
    expect((await gw.http.put(`/api/v1/registrars/${r.id}/canonical-model`, { model_id: m1.id }, { token: a.operator })).status).toBe(200);
    const refused = expectProblem(await gw.http.put(`/api/v1/registrars/${r.id}/canonical-model`, { model_id: m2.id }, { token: a.operator }), 409);
    expect(refused.canonical_model_id).toBe(m1.id);
    // bound model cannot be deleted
    expect(expectProblem(await gw.http.delete(`/api/v1/models/${m1.id}`, { token: a.admin }), 409)).toMatchObject({ registrars: 1 });
    // concurrent binds of two models to a fresh registrar: one wins, the other is 409
    const r2 = await registrar(gw, a, platform, { pending: true });
    const race = await Promise.all([m1, m2].map((m) => gw.http.put(`/api/v1/registrars/${r2.id}/canonical-model`, { model_id: m.id }, { token: a.operator })));
    expect(race.map((x) => x.status).sort()).toEqual([200, 409]);
  });
});

describe('registrars and other resources', () => {
  it('a deleted registrar lets go of its canonical model (the model may be deleted then)', async () => {
    const m = await vendorModel(gw, a);
    const r = await registrar(gw, a, platform, { modelId: m.id });
    expectProblem(await gw.http.delete(`/api/v1/models/${m.id}`, { token: a.admin }), 409);
    expect((await gw.http.delete(`/api/v1/registrars/${r.id}`, { token: a.admin })).status).toBe(204);
    expect((await gw.http.delete(`/api/v1/models/${m.id}`, { token: a.admin })).status).toBe(204);
  });

  it("a factory service's signed requests read the account's vendor, registrars and registration, and create nothing", async () => {
    const m = await vendorModel(gw, a);
    const r = await registrar(gw, a, platform);
    const fs = await gw.http.post('/api/v1/factory-services', { role: 'provision', model_id: m.id, endpoint_url: 'https://factory.example' }, { token: a.admin });
    expect(fs.status, fs.text).toBe(201);
    const creds = { accessKeyId: fs.body.access_key_id, secretAccessKey: fs.body.secret_access_key };
    const signed = (method: string, target: string, body?: string) => gw.http.request(method, target, undefined, {
      headers: signedHeaders(creds, { method, target, host: new URL(gw.httpUrl).host, timestamp: signingTimestamp(new Date()), body }), raw: body,
    });
    expect((await signed('GET', `/api/v1/registrars/${r.id}`)).body.id).toBe(r.id);
    expect((await signed('GET', '/api/v1/registrars')).body.items.map((x: any) => x.id)).toContain(r.id);
    expect((await signed('GET', '/api/v1/vendors')).body.account_id).toBe(a.id);
    expect((await signed('GET', '/api/v1/factory-registrations/me')).body.state).toBe('APPROVED');
    expect((await signed('GET', `/api/v1/models/${m.id}/software`)).status).toBe(200);
    expectProblem(await signed('POST', '/api/v1/registrars', JSON.stringify({ name: 'x' })), 403);
    expectProblem(await signed('POST', '/api/v1/eligibility-artifacts', JSON.stringify({})), 403);
  });
});

describe('access requests', () => {
  it('create, list, read (404 cross-account), approve / reject / decide (409 once decided; 403 for the requester)', async () => {
    const r = await registrar(gw, a, platform);
    const pendingReg = await registrar(gw, a, platform, { pending: true });
    const c = await createAccount(gw);
    expectProblem(await gw.http.post('/api/v1/access-requests', { registrar_id: pendingReg.id }, { token: b.operator }), 400);
    expectProblem(await gw.http.post('/api/v1/access-requests', { registrar_id: r.id }, { token: a.operator }), 400);
    expectProblem(await gw.http.get(`/api/v1/registrars/${r.id}`, { token: b.viewer }), 404);
    const made = await gw.http.post('/api/v1/access-requests', { registrar_id: r.id, note: 'we assemble for you' }, { token: b.operator });
    expect(made.status, made.text).toBe(201);
    expect(made.body).toMatchObject({ state: 'PENDING', decision: null, requester_account_id: b.id, owner_account_id: a.id });
    expectProblem(await gw.http.post('/api/v1/access-requests', { registrar_id: r.id }, { token: b.operator }), 409);
    const id = made.body.id;

    expect((await gw.http.get('/api/v1/access-requests?role=owner', { token: a.viewer })).body.items.map((x: any) => x.id)).toContain(id);
    expect((await gw.http.get('/api/v1/access-requests?role=requester&state=PENDING', { token: b.viewer })).body.items.map((x: any) => x.id)).toEqual([id]);
    expect((await gw.http.get('/api/v1/access-requests', { token: c.viewer })).body.items).toEqual([]);
    expect((await gw.http.get(`/api/v1/access-requests/${id}`, { token: b.viewer })).body.id).toBe(id);
    expectProblem(await gw.http.get(`/api/v1/access-requests/${id}`, { token: c.viewer }), 404);
    expectProblem(await gw.http.post(`/api/v1/access-requests/${id}/approve`, {}, { token: c.admin }), 404);
    expectProblem(await gw.http.post(`/api/v1/access-requests/${id}/approve`, {}, { token: b.admin }), 403);
    expectProblem(await gw.http.post(`/api/v1/access-requests/${id}/decide`, { decision: 'MAYBE' }, { token: a.admin }), 400);
    expectProblem(await gw.http.post(`/api/v1/access-requests/${id}/decide`, {}, { token: a.admin }), 400);

    const decided = await gw.http.post(`/api/v1/access-requests/${id}/decide`, { decision: 'APPROVED' }, { token: a.admin });
    expect(decided.status, decided.text).toBe(200);
    expect(decided.body).toMatchObject({ state: 'APPROVED', decision: 'APPROVED' });
    // what it unlocks: the requester reads the registrar (still not its writes or decisions)
    expect((await gw.http.get(`/api/v1/registrars/${r.id}`, { token: b.viewer })).body.id).toBe(r.id);
    expectProblem(await gw.http.patch(`/api/v1/registrars/${r.id}`, { name: 'mine' }, { token: b.admin }), 404);
    expectProblem(await gw.http.get(`/api/v1/registrars/${r.id}`, { token: c.viewer }), 404);
    for (const [path, body] of [['decide', { decision: 'REJECTED' }], ['approve', {}], ['reject', {}]] as const) {
      expectProblem(await gw.http.post(`/api/v1/access-requests/${id}/${path}`, body, { token: a.admin }), 409);
    }
    // reject and approve as shorthand
    const second = await gw.http.post('/api/v1/access-requests', { registrar_id: r.id }, { token: c.operator });
    const rejected = await gw.http.post(`/api/v1/access-requests/${second.body.id}/reject`, { reason: 'not a partner' }, { token: a.admin });
    expect(rejected.body).toMatchObject({ state: 'REJECTED', decision: 'REJECTED', reason: 'not a partner' });
    const third = await gw.http.post('/api/v1/access-requests', { registrar_id: r.id }, { token: c.operator });
    expect(third.status).toBe(201);
    expect((await gw.http.post(`/api/v1/access-requests/${third.body.id}/approve`, undefined, { token: a.admin })).body.decision).toBe('APPROVED');
    expectProblem(await gw.http.get(`/api/v1/access-requests/${unknown()}`, { token: a.viewer }), 404);
  });
});

describe('factory services name registrars', () => {
  it("registrar_id: the account's APPROVED registrar, or one its access request was approved for; anything else 400", async () => {
    const m = await vendorModel(gw, b);
    const create = (registrarId: string) => gw.http.post('/api/v1/factory-services', { role: 'provision', model_id: m.id, endpoint_url: 'https://factory.example', registrar_id: registrarId }, { token: b.admin });
    expectProblem(await create(unknown()), 400);
    const pendingOwn = await registrar(gw, b, platform, { pending: true });
    expectProblem(await create(pendingOwn.id), 400);
    const foreign = await registrar(gw, a, platform);
    expectProblem(await create(foreign.id), 400);
    const request = await gw.http.post('/api/v1/access-requests', { registrar_id: foreign.id }, { token: b.operator });
    expectProblem(await create(foreign.id), 400);
    await gw.http.post(`/api/v1/access-requests/${request.body.id}/approve`, {}, { token: a.admin });
    const ok = await create(foreign.id);
    expect(ok.status, ok.text).toBe(201);
    expect(ok.body.registrar_id).toBe(foreign.id);
    await gw.http.post(`/api/v1/registrars/${pendingOwn.id}/approve`, {}, { token: platform });
    const m2 = await vendorModel(gw, b);
    const own = await gw.http.post('/api/v1/factory-services', { role: 'provision', model_id: m2.id, endpoint_url: 'https://factory.example', registrar_id: pendingOwn.id }, { token: b.admin });
    expect(own.status, own.text).toBe(201);
  });
});
