import crypto from 'node:crypto';
import { createLocalJWKSet, decodeJwt, jwtVerify } from 'jose';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestGateway, expectProblem, type TestGateway } from '../helpers/gateway.js';
import { createAccount, type TestAccount } from '../helpers/accounts.js';
import { enrollDevice, revokeDevice, type EnrolledDevice } from '../helpers/devices.js';
import { waitFor } from '../helpers/wait.js';

let gw: TestGateway;
/** may approve (approve_licenses) */
let approver: TestAccount;
/** may enroll, but not approve */
let unqualified: TestAccount;
/** another tenant that may approve its own licenses */
let stranger: TestAccount;
let pid = 0x2000;

beforeAll(async () => {
  gw = await startTestGateway();
  approver = await createAccount(gw, { capabilities: ['enroll_things', 'approve_licenses'] });
  unqualified = await createAccount(gw, { capabilities: ['enroll_things'] });
  stranger = await createAccount(gw, { capabilities: ['enroll_things', 'approve_licenses'] });
});
afterAll(async () => gw?.close());

const deviceAuth = (d: EnrolledDevice) => ({ headers: { authorization: `TargetToken ${d.enrollmentToken}` } });

async function createModel(account: TestAccount, licenseApproval?: string) {
  const body = { vid: 'FFF3', pid: (pid++).toString(16).toUpperCase(), name: 'licensed model', provisioning_method: 'none', ...(licenseApproval ? { licenseApproval } : {}) };
  const res = await gw.http.post('/api/v1/models', body, { token: account.operator });
  if (res.status !== 201) throw new Error(`model create failed: ${res.status} ${res.text}`);
  return res.body;
}

/** A device (token flow) of a model with the given approval mode. */
async function deviceOf(account: TestAccount, licenseApproval: 'automatic' | 'manual') {
  const model = await createModel(account, licenseApproval);
  return enrollDevice(gw, account, { via: 'token', model: model.descriptor });
}

const request = (d: EnrolledDevice, features?: string[]) =>
  gw.http.post(`/ddi/v1/${d.thingId}/license/request`, features ? { features } : {}, deviceAuth(d));
const outcome = (d: EnrolledDevice, licenseId: string) => gw.http.get(`/ddi/v1/${d.thingId}/license/${licenseId}`, deviceAuth(d));
const approve = (token: string, licenseId: string) => gw.http.post(`/api/v1/licenses/${licenseId}/approve`, undefined, { token });
const deny = (token: string, licenseId: string, body?: unknown) => gw.http.post(`/api/v1/licenses/${licenseId}/deny`, body, { token });

async function pendingRequest(d: EnrolledDevice, features?: string[]): Promise<string> {
  const res = await request(d, features);
  expect(res.status).toBe(202);
  expect(res.body).toEqual({ licenseId: expect.any(String), status: 'pending' });
  return res.body.licenseId;
}

/** The license's actor and its row: the row's decision columns are the store's projection of the snapshot. */
async function actorAndRow(licenseId: string) {
  const [actor] = await gw.db.sql<{ state: string; snapshot: any }[]>`select state, snapshot from actors where type = 'license' and id = ${licenseId}`;
  const [row] = await gw.db.sql<{ decision: string; decided_at: Date | null; decided_by: string | null; expires_at: Date | null; reason: string | null }[]>`
    select decision, decided_at, decided_by, expires_at, reason from device_licenses where id = ${licenseId}`;
  const c = actor.snapshot.context;
  expect(row).toEqual({
    decision: actor.state, decided_at: c.decidedAt ? new Date(c.decidedAt) : null, decided_by: c.decidedBy ?? null,
    expires_at: c.expiresAt ? new Date(c.expiresAt) : null, reason: c.reason ?? null,
  });
  return { state: actor.state, context: c };
}

/** The published license keys (JWKS), as a device would fetch them. */
async function licenseKeys() {
  const res = await gw.http.get('/api/v1/certificates/license-jwks');
  expect(res.status).toBe(200);
  return createLocalJWKSet(res.body);
}

describe('model setting licenseApproval', () => {
  it('defaults to automatic, which grants at once as before', async () => {
    const model = await createModel(approver);
    expect(model.licenseApproval).toBe('automatic');
    const d = await enrollDevice(gw, approver, { via: 'token', model: model.descriptor });
    const res = await request(d, ['ota']);
    expect(res.status).toBe(200);
    expect(Object.keys(res.body).sort()).toEqual(['expiresAt', 'license', 'licenseId']);
    expect(decodeJwt(res.body.license)).toMatchObject({ sub: d.thingId, jti: res.body.licenseId, features: ['ota'] });
    // the device may read an automatic decision too
    const read = await outcome(d, res.body.licenseId);
    expect(read.body).toEqual({ licenseId: res.body.licenseId, status: 'granted', license: expect.any(String), expiresAt: res.body.expiresAt });
    // the same license (ES256 signatures differ each time, so compare what it says)
    expect(decodeJwt(read.body.license)).toEqual(decodeJwt(res.body.license));
    // born granted: its actor holds the decision, and no approval request was announced
    expect(await actorAndRow(res.body.licenseId)).toMatchObject({ state: 'granted', context: { kind: 'request', features: ['ota'] } });
    const [{ n }] = await gw.db.sql<{ n: number }[]>`select count(*)::int as n from domain_events where actor_id = ${res.body.licenseId}`;
    expect(n).toBe(0);
  });

  it('is documented in the OpenAPI description', async () => {
    const doc = (await gw.http.get('/docs/json')).body;
    expect(Object.keys(doc.paths['/ddi/v1/{thingId}/license/request'].post.responses)).toEqual(expect.arrayContaining(['200', '202']));
    expect(doc.paths['/ddi/v1/{thingId}/license/{licenseId}'].get).toBeDefined();
    expect(doc.paths['/api/v1/licenses/{licenseId}/approve'].post).toBeDefined();
    expect(doc.paths['/api/v1/licenses/{licenseId}/deny'].post).toBeDefined();
  });

  it('is shown on the model and validated', async () => {
    const model = await createModel(approver, 'manual');
    expect(model.licenseApproval).toBe('manual');
    expect((await gw.http.get(`/api/v1/models/${model.id}`, { token: approver.viewer })).body.licenseApproval).toBe('manual');
    const bad = await gw.http.post('/api/v1/models', { vid: 'FFF3', pid: 'EEEE', name: 'x', provisioning_method: 'none', licenseApproval: 'sometimes' }, { token: approver.operator });
    expectProblem(bad, 400);
  });
});

describe('manual approval', () => {
  it('request -> 202 pending -> listed -> approved -> the device gets a license that verifies with the published license key', async () => {
    const d = await deviceOf(approver, 'manual');
    const licenseId = await pendingRequest(d, ['ota', 'telemetry']);
    expect((await outcome(d, licenseId)).body).toEqual({ licenseId, status: 'pending' });
    expect(await pendingRequest(d)).toBe(licenseId);

    const list = await gw.http.get('/api/v1/licenses?status=pending', { token: approver.viewer });
    expect(list.status).toBe(200);
    expect(list.body.items).toContainEqual(expect.objectContaining({
      licenseId, thingId: d.thingId, kind: 'request', status: 'pending', features: ['ota', 'telemetry'], decidedAt: null, decidedBy: null, expiresAt: null,
    }));
    const otherList = await gw.http.get('/api/v1/licenses?status=pending', { token: stranger.viewer });
    expect(otherList.body.items.map((l: { licenseId: string }) => l.licenseId)).not.toContain(licenseId);

    // the account is told once (the repeated request above made no second notification)
    const reader = await gw.token({ realm: `acc-${approver.id}`, sub: 'license-watcher', roles: ['viewer'] });
    const notices = await waitFor(async () => {
      const feed = await gw.http.get('/console/notifications/feed', { token: reader, headers: { 'x-account-id': approver.id } });
      const mine = feed.body.items.filter((i: { template: string; data?: { licenseId?: string } }) => i.template === 'license/requested' && i.data?.licenseId === licenseId);
      return mine.length ? mine : undefined;
    }, 15_000, 'license/requested notification');
    expect(notices).toHaveLength(1);
    expect(notices[0]).toMatchObject({ scope: 'tenant', accountId: approver.id, actionUrl: `/licenses/${licenseId}` });
    expect(notices[0].title).toContain('requests a license');

    const before = Date.now();
    const approved = await approve(approver.operator, licenseId);
    expect(approved.status).toBe(200);
    expect(approved.body).toMatchObject({ licenseId, status: 'granted', decidedBy: `operator-${approver.id.slice(0, 8)}` });
    expect(Date.parse(approved.body.decidedAt)).toBeGreaterThanOrEqual(before - 1000);

    const granted = await outcome(d, licenseId);
    expect(granted.status).toBe(200);
    expect(granted.body).toMatchObject({ licenseId, status: 'granted', expiresAt: approved.body.expiresAt });
    const { payload } = await jwtVerify(granted.body.license, await licenseKeys(), { audience: 'device-license', subject: d.thingId, algorithms: ['ES256'] });
    expect(payload).toMatchObject({ jti: licenseId, features: ['ota', 'telemetry'] });
    // validity counts from the approval, not from the request
    expect(payload.exp! * 1000).toBe(Math.floor(Date.parse(approved.body.expiresAt) / 1000) * 1000);
    expect(payload.exp! - payload.iat!).toBe(30 * 86_400);
    expect(payload.iat! * 1000).toBeGreaterThanOrEqual(before - 1000);
    // fetched again: the same claims (an ECDSA signature differs each time)
    expect(decodeJwt((await outcome(d, licenseId)).body.license)).toEqual(payload);
    expect(await actorAndRow(licenseId)).toMatchObject({ state: 'granted', context: { expiresAt: approved.body.expiresAt } });

    // decided once: approving or denying again is a conflict
    expect(expectProblem(await approve(approver.admin, licenseId), 409).detail).toMatch(/already granted/);
    expect(expectProblem(await deny(approver.admin, licenseId), 409).detail).toMatch(/already granted/);
    const pendingNow = await gw.http.get('/api/v1/licenses?status=pending', { token: approver.viewer });
    expect(pendingNow.body.items.map((l: { licenseId: string }) => l.licenseId)).not.toContain(licenseId);

    // renewing an approved license needs no second approval
    const renewed = await gw.http.post(`/ddi/v1/${d.thingId}/license/renew`, { license: granted.body.license }, deviceAuth(d));
    expect(renewed.status).toBe(200);
    expect(decodeJwt(renewed.body.license)).toMatchObject({ features: ['ota', 'telemetry'] });
  });

  it('deny with a reason; the device sees it; a new request is a new pending one', async () => {
    const d = await deviceOf(approver, 'manual');
    const licenseId = await pendingRequest(d);
    const denied = await deny(approver.operator, licenseId, { reason: 'not paid' });
    expect(denied.status).toBe(200);
    expect(denied.body).toMatchObject({ licenseId, status: 'denied', reason: 'not paid', expiresAt: null });
    expect(await actorAndRow(licenseId)).toMatchObject({ state: 'denied', context: { reason: 'not paid', decidedBy: `operator-${approver.id.slice(0, 8)}` } });
    expect((await outcome(d, licenseId)).body).toEqual({ licenseId, status: 'denied', reason: 'not paid' });
    expectProblem(await approve(approver.operator, licenseId), 409);
    const again = await pendingRequest(d);
    expect(again).not.toBe(licenseId);
    // without a body the reason is a default
    expect((await deny(approver.admin, again)).body.reason).toBe('denied by the tenant');
    expectProblem(await deny(approver.operator, again, { reason: 'x'.repeat(501) }), 400);
    expectProblem(await deny(approver.operator, again, { why: 'x' }), 400);
  });

  it('403 without approve_licenses or with the viewer role; reading needs no capability', async () => {
    const d = await deviceOf(unqualified, 'manual');
    const licenseId = await pendingRequest(d);
    const noCap = expectProblem(await approve(unqualified.operator, licenseId), 403);
    expect(noCap.detail).toMatch(/approve_licenses/);
    expectProblem(await deny(unqualified.admin, licenseId), 403);
    expectProblem(await approve(approver.viewer, licenseId), 403);
    const list = await gw.http.get('/api/v1/licenses?status=pending', { token: unqualified.viewer });
    expect(list.body.items.map((l: { licenseId: string }) => l.licenseId)).toEqual([licenseId]);
    expect((await outcome(d, licenseId)).body.status).toBe('pending');
  });

  it('404 for another account\'s license and unknown ids; 400 for malformed ones', async () => {
    const d = await deviceOf(approver, 'manual');
    const licenseId = await pendingRequest(d);
    expectProblem(await approve(stranger.operator, licenseId), 404);
    expectProblem(await deny(stranger.operator, licenseId), 404);
    expectProblem(await approve(approver.operator, crypto.randomUUID()), 404);
    expectProblem(await approve(approver.operator, 'not-a-uuid'), 400);
    expectProblem(await gw.http.get('/api/v1/licenses?status=maybe', { token: approver.viewer }), 400);
    // a device cannot read another thing's license
    const other = await deviceOf(approver, 'manual');
    expectProblem(await outcome(other, licenseId), 404);
    expectProblem(await gw.http.get(`/ddi/v1/${d.thingId}/license/${licenseId}`), 401);
    expect((await outcome(d, licenseId)).body.status).toBe('pending');
  });

  it('approve and deny racing: exactly one wins, the other gets 409', async () => {
    for (let round = 0; round < 3; round++) {
      const d = await deviceOf(approver, 'manual');
      const licenseId = await pendingRequest(d);
      const [a, b] = await Promise.all([approve(approver.operator, licenseId), deny(approver.admin, licenseId, { reason: 'race' })]);
      expect([a.status, b.status].sort()).toEqual([200, 409]);
      expectProblem(a.status === 409 ? a : b, 409);
      const winner = a.status === 200 ? 'granted' : 'denied';
      const final = await outcome(d, licenseId);
      expect(final.body.status).toBe(winner);
      if (winner === 'granted') expect(final.body.license).toEqual(expect.any(String));
      else expect(final.body.reason).toBe('race');
    }
  });

  it('concurrent repeated requests give one pending id', async () => {
    const d = await deviceOf(approver, 'manual');
    const results = await Promise.all(Array.from({ length: 12 }, () => request(d)));
    expect(results.map((r) => r.status)).toEqual(Array(12).fill(202));
    expect(new Set(results.map((r) => r.body.licenseId)).size).toBe(1);
    const [{ n }] = await gw.db.sql<{ n: number }[]>`select count(*)::int as n from device_licenses where thing_id = ${d.thingId}`;
    expect(n).toBe(1);
  });

  it('revoking a thing denies its pending request; it can then be neither approved nor denied (409)', async () => {
    const d = await deviceOf(approver, 'manual');
    const licenseId = await pendingRequest(d);
    await revokeDevice(gw, approver, d.thingId);
    const [row] = await gw.db.sql<{ decision: string; reason: string; decided_by: string | null }[]>`
      select decision, reason, decided_by from device_licenses where id = ${licenseId}`;
    expect(row).toMatchObject({ decision: 'denied', reason: 'thing revoked' });
    expect(row.decided_by).toBeTruthy();
    expect(await actorAndRow(licenseId)).toMatchObject({ state: 'denied', context: { reason: 'thing revoked', decidedBy: row.decided_by } });
    expect(expectProblem(await approve(approver.operator, licenseId), 409).detail).toMatch(/already denied/);
    expect(expectProblem(await deny(approver.operator, licenseId), 409).detail).toMatch(/already denied/);
    const pending = await gw.http.get('/api/v1/licenses?status=pending&limit=100', { token: approver.viewer });
    expect(pending.body.items.map((i: { licenseId: string }) => i.licenseId)).not.toContain(licenseId);
  });

  it('lists with keyset pagination and a status filter', async () => {
    const account = await createAccount(gw, { capabilities: ['enroll_things', 'approve_licenses'] });
    const ids = [];
    for (let i = 0; i < 3; i++) ids.push(await pendingRequest(await deviceOf(account, 'manual')));
    await approve(account.operator, ids[0]);
    const seen: string[] = [];
    let after: string | null = null;
    do {
      const page: { status: number; body: { items: { licenseId: string }[]; next_cursor: string | null } } =
        await gw.http.get(`/api/v1/licenses?status=pending&limit=1${after ? `&after=${after}` : ''}`, { token: account.viewer });
      expect(page.status).toBe(200);
      expect(page.body.items.length).toBeLessThanOrEqual(1);
      seen.push(...page.body.items.map((l) => l.licenseId));
      after = page.body.next_cursor;
    } while (after);
    expect(seen.sort()).toEqual(ids.slice(1).sort());
    const all = await gw.http.get('/api/v1/licenses', { token: account.viewer });
    expect(all.body.items.map((l: { status: string }) => l.status).sort()).toEqual(['granted', 'pending', 'pending']);
  });
});
