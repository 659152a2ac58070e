import crypto from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ManualClock } from '../../src/lib/clock.js';
import { startTestGateway, expectProblem, type TestGateway } from '../helpers/gateway.js';
import { createAccount, type TestAccount } from '../helpers/accounts.js';
import { waitFor } from '../helpers/wait.js';
import { eligible, enroll, platformToken, registrar, vendorModel } from './helpers.js';

/**
 * Eligibility artifacts and grants, reference requests with their thing references, and device
 * deeplinks over real HTTP and Postgres. Expiry is moved by the gateway's ManualClock.
 */
const clock = new ManualClock();
let gw: TestGateway;
let a: TestAccount;
let b: TestAccount;
let c: TestAccount;
let platform: string;

beforeAll(async () => {
  gw = await startTestGateway({}, { clock });
  [a, b, c] = await Promise.all([createAccount(gw), createAccount(gw), createAccount(gw)]);
  platform = await platformToken(gw);
});
afterAll(async () => {
  await gw?.close();
});

const refs = async (account: TestAccount, q = '') => (await gw.http.get(`/api/v1/thing-references?limit=100${q}`, { token: account.viewer })).body.items as any[];

describe('eligibility artifacts', () => {
  it('create (201, token and URL once), list, read (404 other accounts), revoke (204), redeem (201 pending grant; 400 expired or revoked; 404 unknown)', async () => {
    expectProblem(await gw.http.post('/api/v1/eligibility-artifacts', { expires_in_seconds: 1 }, { token: a.admin }), 400);
    expectProblem(await gw.http.post('/api/v1/eligibility-artifacts', { scope: 'x' }, { token: a.admin }), 400);
    const made = await gw.http.post('/api/v1/eligibility-artifacts', { note: 'for partners', expires_in_seconds: 3600 }, { token: a.admin });
    expect(made.status, made.text).toBe(201);
    expect(made.body).toMatchObject({ account_id: a.id, status: 'ACTIVE', note: 'for partners', revoked_at: null });
    expect(made.body.token).toMatch(/^ela_[A-Za-z0-9_-]{43}$/);
    expect(made.body.url).toBe(`${gw.httpUrl}/links/eligibility#${made.body.token}`);
    const id = made.body.id;

    const read = await gw.http.get(`/api/v1/eligibility-artifacts/${id}`, { token: a.viewer });
    expect(read.body).toMatchObject({ id, status: 'ACTIVE' });
    expect(read.body.token).toBeUndefined();
    expectProblem(await gw.http.get(`/api/v1/eligibility-artifacts/${id}`, { token: b.admin }), 404);
    expect((await gw.http.get('/api/v1/eligibility-artifacts', { token: a.viewer })).body.items.map((x: any) => x.id)).toContain(id);
    expect((await gw.http.get('/api/v1/eligibility-artifacts', { token: b.viewer })).body.items).toEqual([]);

    // redeem: bad token 400, unknown 404, own 400, then 201 (and the same grant again)
    expectProblem(await gw.http.post('/api/v1/eligibility-artifacts/redeem', { token: 'garbage' }, { token: b.admin }), 400);
    expectProblem(await gw.http.post('/api/v1/eligibility-artifacts/redeem', { token: `ela_${'x'.repeat(43)}` }, { token: b.admin }), 404);
    expectProblem(await gw.http.post('/api/v1/eligibility-artifacts/redeem', { token: made.body.token, url: made.body.url }, { token: b.admin }), 400);
    expectProblem(await gw.http.post('/api/v1/eligibility-artifacts/redeem', { url: made.body.url }, { token: a.admin }), 400);
    const grant = await gw.http.post('/api/v1/eligibility-artifacts/redeem', { url: made.body.url }, { token: b.admin });
    expect(grant.status, grant.text).toBe(201);
    expect(grant.body).toMatchObject({ artifact_id: id, owner_account_id: a.id, requester_account_id: b.id, state: 'PENDING' });
    const again = await gw.http.post('/api/v1/eligibility-artifacts/redeem', { token: made.body.token }, { token: b.admin });
    expect(again.body.id).toBe(grant.body.id);
    // concurrent redemptions by one account converge on one grant
    const racer = await createAccount(gw);
    const race = await Promise.all([0, 1, 2].map(() => gw.http.post('/api/v1/eligibility-artifacts/redeem', { token: made.body.token }, { token: racer.admin })));
    expect(race.map((r) => r.status)).toEqual([201, 201, 201]);
    expect(new Set(race.map((r) => r.body.id)).size).toBe(1);

    // expired: the clock moves past it
    const short = await gw.http.post('/api/v1/eligibility-artifacts', { expires_in_seconds: 60 }, { token: a.admin });
    clock.advance(61_000);
    expect((await gw.http.get(`/api/v1/eligibility-artifacts/${short.body.id}`, { token: a.viewer })).body.status).toBe('EXPIRED');
    expect(expectProblem(await gw.http.post('/api/v1/eligibility-artifacts/redeem', { token: short.body.token }, { token: c.admin }), 400).detail).toContain('expired');

    // revoked: 204 (and again), 404 for other accounts, then redeeming is 400
    expectProblem(await gw.http.delete(`/api/v1/eligibility-artifacts/${id}`, { token: b.admin }), 404);
    expect((await gw.http.delete(`/api/v1/eligibility-artifacts/${id}`, { token: a.admin })).status).toBe(204);
    expect((await gw.http.delete(`/api/v1/eligibility-artifacts/${id}`, { token: a.admin })).status).toBe(204);
    expect((await gw.http.get(`/api/v1/eligibility-artifacts/${id}`, { token: a.viewer })).body.status).toBe('REVOKED');
    expect(expectProblem(await gw.http.post('/api/v1/eligibility-artifacts/redeem', { token: made.body.token }, { token: c.admin }), 400).detail).toContain('revoked');
    expectProblem(await gw.http.delete(`/api/v1/eligibility-artifacts/${crypto.randomUUID()}`, { token: a.admin }), 404);
    // the token is stored as a hash only
    const [row] = await gw.db.sql`select token_hash from eligibility_artifacts where id = ${id}`;
    expect(row.token_hash.length).toBe(32);
  });

  it('grant inbox with a state filter; approve (404 not the owner, 409 decided); reject needs a reason (400)', async () => {
    const d = await createAccount(gw);
    const art = await gw.http.post('/api/v1/eligibility-artifacts', {}, { token: d.admin });
    const g1 = (await gw.http.post('/api/v1/eligibility-artifacts/redeem', { token: art.body.token }, { token: b.admin })).body;
    const g2 = (await gw.http.post('/api/v1/eligibility-artifacts/redeem', { token: art.body.token }, { token: c.admin })).body;
    const inbox = await gw.http.get('/api/v1/eligibility-grants?state=PENDING', { token: d.viewer });
    expect(inbox.body.items.map((g: any) => g.id).sort()).toEqual([g1.id, g2.id].sort());
    expect((await gw.http.get('/api/v1/eligibility-grants?role=requester', { token: b.viewer })).body.items.map((g: any) => g.id)).toContain(g1.id);
    expectProblem(await gw.http.get('/api/v1/eligibility-grants?state=MAYBE', { token: d.viewer }), 400);

    expectProblem(await gw.http.post(`/api/v1/eligibility-grants/${g1.id}/approve`, {}, { token: b.admin }), 404);
    expectProblem(await gw.http.post(`/api/v1/eligibility-grants/${crypto.randomUUID()}/approve`, {}, { token: d.admin }), 404);
    const approved = await gw.http.post(`/api/v1/eligibility-grants/${g1.id}/approve`, {}, { token: d.admin });
    expect(approved.status, approved.text).toBe(200);
    expect(approved.body).toMatchObject({ state: 'APPROVED', decided_by: expect.any(String) });
    expectProblem(await gw.http.post(`/api/v1/eligibility-grants/${g1.id}/approve`, {}, { token: d.admin }), 409);

    expectProblem(await gw.http.post(`/api/v1/eligibility-grants/${g2.id}/reject`, {}, { token: d.admin }), 400);
    expectProblem(await gw.http.post(`/api/v1/eligibility-grants/${g2.id}/reject`, { reason: '   ' }, { token: d.admin }), 400);
    expectProblem(await gw.http.post(`/api/v1/eligibility-grants/${g2.id}/reject`, { reason: 'no' }, { token: c.admin }), 404);
    const rejected = await gw.http.post(`/api/v1/eligibility-grants/${g2.id}/reject`, { reason: 'not a partner' }, { token: d.admin });
    expect(rejected.body).toMatchObject({ state: 'REJECTED', reason: 'not a partner' });
    expectProblem(await gw.http.post(`/api/v1/eligibility-grants/${g2.id}/approve`, {}, { token: d.admin }), 409);
    expect((await gw.http.get('/api/v1/eligibility-grants?state=APPROVED', { token: d.viewer })).body.items.map((g: any) => g.id)).toEqual([g1.id]);
  });
});

describe('reference requests', () => {
  it('create needs approved eligibility (403), an approved registrar with a canonical model (400); list, inbox, read (404 cross-account)', async () => {
    const owner = await createAccount(gw);
    const requester = await createAccount(gw);
    const m = await vendorModel(gw, owner);
    const reg = await registrar(gw, owner, platform, { modelId: m.id });
    const pending = await registrar(gw, owner, platform, { pending: true, modelId: m.id });
    const noModel = await registrar(gw, owner, platform);
    expect(expectProblem(await gw.http.post('/api/v1/reference-requests', { registrar_id: reg.id }, { token: requester.operator }), 403).detail).toContain('eligib');
    await eligible(gw, owner, requester);
    expectProblem(await gw.http.post('/api/v1/reference-requests', { registrar_id: pending.id }, { token: requester.operator }), 400);
    expectProblem(await gw.http.post('/api/v1/reference-requests', { registrar_id: noModel.id }, { token: requester.operator }), 400);
    expectProblem(await gw.http.post('/api/v1/reference-requests', { registrar_id: crypto.randomUUID() }, { token: requester.operator }), 400);
    expectProblem(await gw.http.post('/api/v1/reference-requests', { registrar_id: reg.id }, { token: owner.operator }), 400);
    expectProblem(await gw.http.post('/api/v1/reference-requests', { registrar_id: reg.id, filter: { color: 'red' } }, { token: requester.operator }), 400);
    const made = await gw.http.post('/api/v1/reference-requests', { registrar_id: reg.id, filter: { serial_prefix: 'EU-' } }, { token: requester.operator });
    expect(made.status, made.text).toBe(201);
    expect(made.body).toMatchObject({ state: 'PENDING', registrar_id: reg.id, requester_account_id: requester.id, owner_account_id: owner.id, filter: { serial_prefix: 'EU-' } });
    const id = made.body.id;
    expect((await gw.http.get('/api/v1/reference-requests?state=PENDING', { token: requester.viewer })).body.items.map((r: any) => r.id)).toEqual([id]);
    expect((await gw.http.get('/api/v1/reference-requests?state=APPROVED', { token: requester.viewer })).body.items).toEqual([]);
    expect((await gw.http.get('/api/v1/reference-requests', { token: owner.viewer })).body.items).toEqual([]);
    expect((await gw.http.get('/api/v1/reference-requests/inbox?state=PENDING', { token: owner.viewer })).body.items.map((r: any) => r.id)).toEqual([id]);
    expect((await gw.http.get('/api/v1/reference-requests/inbox', { token: requester.viewer })).body.items).toEqual([]);
    expect((await gw.http.get(`/api/v1/reference-requests/${id}`, { token: owner.viewer })).status).toBe(200);
    expect((await gw.http.get(`/api/v1/reference-requests/${id}`, { token: requester.viewer })).status).toBe(200);
    expectProblem(await gw.http.get(`/api/v1/reference-requests/${id}`, { token: c.viewer }), 404);
    expectProblem(await gw.http.post(`/api/v1/reference-requests/${id}/approve`, {}, { token: c.admin }), 404);
    expectProblem(await gw.http.post(`/api/v1/reference-requests/${id}/approve`, {}, { token: requester.admin }), 404);
    expectProblem(await gw.http.delete(`/api/v1/reference-requests/${id}`, { token: c.admin }), 404);
  });

  it('approve runs the initial reconcile (filter applied); later things appear; revoke (204) stops it and removes its references', async () => {
    const owner = await createAccount(gw);
    const requester = await createAccount(gw);
    const m = await vendorModel(gw, owner);
    const other = await vendorModel(gw, owner);
    const reg = await registrar(gw, owner, platform, { modelId: m.id });
    await eligible(gw, owner, requester);
    const before = [await enroll(gw, owner, m.descriptor, 'EU-1'), await enroll(gw, owner, m.descriptor, 'EU-2')];
    await enroll(gw, owner, m.descriptor, 'US-1');
    await enroll(gw, owner, other.descriptor, 'EU-9');
    const req = (await gw.http.post('/api/v1/reference-requests', { registrar_id: reg.id, filter: { serial_prefix: 'EU-' } }, { token: requester.operator })).body;
    expect(await refs(requester)).toEqual([]);
    const approved = await gw.http.post(`/api/v1/reference-requests/${req.id}/approve`, {}, { token: owner.admin });
    expect(approved.status, approved.text).toBe(200);
    expect(approved.body).toMatchObject({ state: 'APPROVED', references_added: 2 });
    const initial = await refs(requester);
    expect(initial.map((r) => r.thing_id).sort()).toEqual([...before].sort());
    expect(initial[0]).toMatchObject({ owner_account_id: owner.id, source: 'reference_request', reference_request_id: req.id, model_id: m.id, descriptor: m.descriptor, state: 'ROLLEDOFF' });
    expectProblem(await gw.http.post(`/api/v1/reference-requests/${req.id}/approve`, {}, { token: owner.admin }), 409);
    expectProblem(await gw.http.post(`/api/v1/reference-requests/${req.id}/reject`, { reason: 'late' }, { token: owner.admin }), 409);
    expect(await refs(owner)).toEqual([]);

    // things enrolled later appear without another call (the thing.enrolled event)
    const later = await enroll(gw, owner, m.descriptor, 'EU-3');
    await enroll(gw, owner, m.descriptor, 'US-2');
    await waitFor(async () => (await refs(requester)).some((r) => r.thing_id === later), 10_000, 'the later thing to appear');
    expect((await refs(requester)).length).toBe(3);
    expect((await refs(requester, `&reference_request_id=${req.id}`)).length).toBe(3);

    // revoke: 204; the references go; later things no longer appear
    expect((await gw.http.delete(`/api/v1/reference-requests/${req.id}`, { token: requester.operator })).status).toBe(204);
    expect((await gw.http.get(`/api/v1/reference-requests/${req.id}`, { token: requester.viewer })).body.state).toBe('REVOKED');
    expect(await refs(requester)).toEqual([]);
    expect((await gw.http.delete(`/api/v1/reference-requests/${req.id}`, { token: owner.operator })).status).toBe(204);
    await enroll(gw, owner, m.descriptor, 'EU-4');
    const sweepAdded = await sweep();
    expect(sweepAdded).toBe(0);
    expect(await refs(requester)).toEqual([]);
  });

  it('reject needs a reason (400); rejected requests reference nothing and cannot be revoked (409)', async () => {
    const owner = await createAccount(gw);
    const requester = await createAccount(gw);
    const m = await vendorModel(gw, owner);
    const reg = await registrar(gw, owner, platform, { modelId: m.id });
    await eligible(gw, owner, requester);
    await enroll(gw, owner, m.descriptor, 'R-1');
    const req = (await gw.http.post('/api/v1/reference-requests', { registrar_id: reg.id }, { token: requester.operator })).body;
    expectProblem(await gw.http.post(`/api/v1/reference-requests/${req.id}/reject`, {}, { token: owner.admin }), 400);
    expectProblem(await gw.http.post(`/api/v1/reference-requests/${req.id}/reject`, { reason: 'no' }, { token: requester.admin }), 404);
    const rejected = await gw.http.post(`/api/v1/reference-requests/${req.id}/reject`, { reason: 'not now' }, { token: owner.admin });
    expect(rejected.body).toMatchObject({ state: 'REJECTED', reason: 'not now' });
    expect(await refs(requester)).toEqual([]);
    expectProblem(await gw.http.delete(`/api/v1/reference-requests/${req.id}`, { token: requester.operator }), 409);
    expect((await gw.http.get('/api/v1/reference-requests/inbox?state=REJECTED', { token: owner.viewer })).body.items.map((r: any) => r.id)).toEqual([req.id]);
  });

  it('a missed event loses no reference: the sweep over domain_events adds it', async () => {
    const owner = await createAccount(gw);
    const requester = await createAccount(gw);
    const m = await vendorModel(gw, owner);
    const reg = await registrar(gw, owner, platform, { modelId: m.id });
    await eligible(gw, owner, requester);
    const req = (await gw.http.post('/api/v1/reference-requests', { registrar_id: reg.id }, { token: requester.operator })).body;
    await gw.http.post(`/api/v1/reference-requests/${req.id}/approve`, {}, { token: owner.admin });
    const thing = await enroll(gw, owner, m.descriptor, 'MISS-1');
    await waitFor(async () => (await refs(requester)).length === 1, 10_000, 'the event handler');
    // as if the handler had never run (crash between commit and handler)
    await gw.db.sql`delete from thing_references where thing_id = ${thing}`;
    expect(await refs(requester)).toEqual([]);
    expect(await sweep()).toBe(1);
    expect((await refs(requester)).map((r) => r.thing_id)).toEqual([thing]);
  });

  it('deleting the registrar revokes its standing requests', async () => {
    const owner = await createAccount(gw);
    const requester = await createAccount(gw);
    const m = await vendorModel(gw, owner);
    const reg = await registrar(gw, owner, platform, { modelId: m.id });
    await eligible(gw, owner, requester);
    await enroll(gw, owner, m.descriptor, 'DEL-1');
    const req = (await gw.http.post('/api/v1/reference-requests', { registrar_id: reg.id }, { token: requester.operator })).body;
    await gw.http.post(`/api/v1/reference-requests/${req.id}/approve`, {}, { token: owner.admin });
    expect((await refs(requester)).length).toBe(1);
    expect((await gw.http.delete(`/api/v1/registrars/${reg.id}`, { token: owner.admin })).status).toBe(204);
    expect((await gw.http.get(`/api/v1/reference-requests/${req.id}`, { token: requester.viewer })).body.state).toBe('REVOKED');
    expect(await refs(requester)).toEqual([]);
  });
});

/** Runs the reconcile sweep now (the job runs it every minute); answers how many references it added. */
async function sweep(): Promise<number> {
  // the settle window re-reads recent events; move the clock so they count as settled
  clock.advance(10 * 60_000);
  const { References } = await import('../../src/registry/references.js');
  const { createLogger } = await import('../../src/log.js');
  return new References({ sql: gw.db.sql, actors: undefined as never, clock, log: createLogger('silent', false) }).sweep();
}

describe('device deeplinks', () => {
  it('create (201 token + URL; 400 not your thing), list, delete (204, then 404), redeem (200 one reference; 400 bad or expired; 404 unknown)', async () => {
    const m = await vendorModel(gw, a);
    const thing = await enroll(gw, a, m.descriptor, 'DL-1');
    const foreignThing = await enroll(gw, b, (await vendorModel(gw, b)).descriptor, 'DL-B');
    expectProblem(await gw.http.post('/api/v1/device-deeplinks', { thing_id: foreignThing }, { token: a.operator }), 400);
    expectProblem(await gw.http.post('/api/v1/device-deeplinks', { thing_id: 'nope' }, { token: a.operator }), 400);
    const made = await gw.http.post('/api/v1/device-deeplinks', { thing_id: thing }, { token: a.operator });
    expect(made.status, made.text).toBe(201);
    expect(made.body).toMatchObject({ thing_id: thing, redemptions: 0 });
    expect(made.body.token).toMatch(/^dlk_[A-Za-z0-9_-]{43}$/);
    expect(made.body.url).toBe(`${gw.httpUrl}/links/device#${made.body.token}`);
    expect((await gw.http.get('/api/v1/device-deeplinks', { token: a.viewer })).body.items.map((d: any) => d.id)).toContain(made.body.id);
    expect((await gw.http.get('/api/v1/device-deeplinks', { token: b.viewer })).body.items).toEqual([]);

    expectProblem(await gw.http.post('/api/v1/device-deeplinks/redeem', { token: 'dlk_short' }, { token: b.operator }), 400);
    expectProblem(await gw.http.post('/api/v1/device-deeplinks/redeem', { url: 'https://x.example/links/device#nothing' }, { token: b.operator }), 400);
    expectProblem(await gw.http.post('/api/v1/device-deeplinks/redeem', { token: `dlk_${'Z'.repeat(43)}` }, { token: b.operator }), 404);
    expectProblem(await gw.http.post('/api/v1/device-deeplinks/redeem', { token: made.body.token }, { token: a.operator }), 400);
    const redeemed = await gw.http.post('/api/v1/device-deeplinks/redeem', { url: made.body.url }, { token: b.operator });
    expect(redeemed.status, redeemed.text).toBe(200);
    expect(redeemed.body).toMatchObject({ thing_id: thing, owner_account_id: a.id, source: 'device_deeplink', device_deeplink_id: made.body.id, serial: 'DL-1' });
    const again = await gw.http.post('/api/v1/device-deeplinks/redeem', { token: made.body.token }, { token: b.operator });
    expect(again.body.id).toBe(redeemed.body.id);
    expect((await refs(b)).filter((r) => r.thing_id === thing).length).toBe(1);

    // concurrent redemptions by one account: one reference
    const made2 = await gw.http.post('/api/v1/device-deeplinks', { thing_id: thing }, { token: a.operator });
    const race = await Promise.all([0, 1, 2].map(() => gw.http.post('/api/v1/device-deeplinks/redeem', { token: made2.body.token }, { token: c.operator })));
    expect(race.map((r) => r.status)).toEqual([200, 200, 200]);
    expect(new Set(race.map((r) => r.body.id)).size).toBe(1);

    // expiry
    const short = await gw.http.post('/api/v1/device-deeplinks', { thing_id: thing, expires_in_seconds: 60 }, { token: a.operator });
    clock.advance(61_000);
    expect(expectProblem(await gw.http.post('/api/v1/device-deeplinks/redeem', { token: short.body.token }, { token: b.operator }), 400).detail).toContain('expired');

    // delete: 204, then 404; the token stops working; the reference made stays
    expectProblem(await gw.http.delete(`/api/v1/device-deeplinks/${made.body.id}`, { token: b.operator }), 404);
    expect((await gw.http.delete(`/api/v1/device-deeplinks/${made.body.id}`, { token: a.operator })).status).toBe(204);
    expectProblem(await gw.http.delete(`/api/v1/device-deeplinks/${made.body.id}`, { token: a.operator }), 404);
    expectProblem(await gw.http.post('/api/v1/device-deeplinks/redeem', { token: made.body.token }, { token: c.operator }), 404);
    expect((await refs(b)).filter((r) => r.thing_id === thing).length).toBe(1);
  });
});
