import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestGateway, expectProblem, type TestGateway } from '../helpers/gateway.js';
import { createAccount, type TestAccount } from '../helpers/accounts.js';
import { createClaimGroup, enrollDevice } from '../helpers/devices.js';
import { ManualClock } from '../../src/lib/clock.js';

let gw: TestGateway;
let account: TestAccount;
/** lifecycle time of the gateway: tests move it instead of editing rows */
const clock = new ManualClock();
const DAY = 86_400_000;

beforeAll(async () => {
  gw = await startTestGateway({}, { clock });
  account = await createAccount(gw, { capabilities: ['enroll_things'] });
});
afterAll(async () => gw?.close());

const claim = (secret: string, serial: string, extra: Record<string, unknown> = {}) =>
  gw.http.post('/ddi/v1/enroll', { provisioningMethod: 'claim_token', claimSecret: secret, manufacturer: 'Acme', model: 'FFF1:8001', serial, ...extra });

async function certificatesOfGroup(groupId: string): Promise<number> {
  const [row] = await gw.db.sql<{ n: number }[]>`
    select count(*)::int as n from device_certificates c join things t on t.id = c.thing_id where t.claim_group_id = ${groupId}`;
  return row.n;
}

describe('claim groups', () => {
  it('creates a group: shared secret shown once, status active', async () => {
    const res = await gw.http.post('/api/v1/things/claim-groups', { name: 'line 7', maxDevices: 3, ttlDays: 2 }, { token: account.operator });
    expect(res.status).toBe(201);
    expect(Object.keys(res.body).sort()).toEqual(['createdAt', 'id', 'maxDevices', 'name', 'sharedSecret', 'ttlDays']);
    const read = await gw.http.get(`/api/v1/things/claim-groups/${res.body.id}`, { token: account.viewer });
    expect(read.status).toBe(200);
    expect(read.body).toMatchObject({ id: res.body.id, consumed: 0, status: 'active', maxDevices: 3, ttlDays: 2, revoked: false });
    expect(read.body.sharedSecret).toBeUndefined();
    const [row] = await gw.db.sql<{ secret_hash: Buffer }[]>`select secret_hash from claim_groups where id = ${res.body.id}`;
    expect(row.secret_hash.length).toBe(32);
    expect(JSON.stringify(await gw.db.sql`select * from actors where id = ${res.body.id}`)).not.toContain(res.body.sharedSecret);
  });

  it('validates input and hides other accounts\' groups', async () => {
    expectProblem(await gw.http.post('/api/v1/things/claim-groups', { name: 'x', maxDevices: 0, ttlDays: 1 }, { token: account.operator }), 400);
    expectProblem(await gw.http.post('/api/v1/things/claim-groups', { name: 'x', maxDevices: 1, ttlDays: 1, extra: 1 }, { token: account.operator }), 400);
    expectProblem(await gw.http.post('/api/v1/things/claim-groups', { name: 'x', maxDevices: 1, ttlDays: 1 }, { token: account.viewer }), 403);
    const g = await createClaimGroup(gw, account);
    const other = await createAccount(gw);
    expectProblem(await gw.http.get(`/api/v1/things/claim-groups/${g.id}`, { token: other.viewer }), 404);
    expectProblem(await gw.http.delete(`/api/v1/things/claim-groups/${g.id}`, { token: other.operator }), 404);
  });

  it('100 concurrent claims against maxDevices 10 give exactly 10 certificates', async () => {
    const g = await createClaimGroup(gw, account, { maxDevices: 10 });
    const results = await Promise.all(Array.from({ length: 100 }, (_, i) => claim(g.sharedSecret, `RACE-${i}`)));
    const ok = results.filter((r) => r.status === 200);
    expect(ok).toHaveLength(10);
    for (const r of results.filter((x) => x.status !== 200)) expect(expectProblem(r, 403).detail).toContain('capped');
    expect(new Set(ok.map((r) => r.body.twinTopicPrefix)).size).toBe(10);
    expect(await certificatesOfGroup(g.id)).toBe(10);
    const status = await gw.http.get(`/api/v1/things/claim-groups/${g.id}`, { token: account.viewer });
    expect(status.body).toMatchObject({ consumed: 10, status: 'capped' });
    // a device that already claimed may still repeat its claim on a capped group
    const first = ok[0];
    const again = results.indexOf(first);
    const repeat = await claim(g.sharedSecret, `RACE-${again}`);
    expect(repeat.status).toBe(200);
    expect(repeat.body.certificate).toBe(first.body.certificate);
  });

  it('20 concurrent claims with the same tuple give one thingId and one certificate', async () => {
    const g = await createClaimGroup(gw, account, { maxDevices: 50 });
    const results = await Promise.all(Array.from({ length: 20 }, () => claim(g.sharedSecret, 'SAME-1')));
    expect(results.map((r) => r.status)).toEqual(Array(20).fill(200));
    expect(new Set(results.map((r) => r.body.twinTopicPrefix)).size).toBe(1);
    expect(new Set(results.map((r) => r.body.certificate)).size).toBe(1);
    expect(new Set(results.map((r) => r.body.privateKey)).size).toBe(1);
    expect(await certificatesOfGroup(g.id)).toBe(1);
    const status = await gw.http.get(`/api/v1/things/claim-groups/${g.id}`, { token: account.viewer });
    expect(status.body.consumed).toBe(1);
  });

  it('concurrent repeats of the claim that fills a group all get that device\'s certificate', async () => {
    const g = await createClaimGroup(gw, account, { maxDevices: 1 });
    const results = await Promise.all(Array.from({ length: 10 }, () => claim(g.sharedSecret, 'FILLS-1')));
    expect(results.map((r) => r.status)).toEqual(Array(10).fill(200));
    expect(new Set(results.map((r) => r.body.certificate)).size).toBe(1);
    expect(expectProblem(await claim(g.sharedSecret, 'FILLS-2'), 403).detail).toContain('capped');
  });

  it('a revoked group refuses claims (403) and its certificates stay valid', async () => {
    const g = await createClaimGroup(gw, account);
    const device = await enrollDevice(gw, account, { claimSecret: g.sharedSecret });
    const del = await gw.http.delete(`/api/v1/things/claim-groups/${g.id}`, { token: account.operator });
    expect(del.status).toBe(200);
    expect(del.body).toMatchObject({ status: 'revoked', revoked: true, consumed: 1 });
    expect(expectProblem(await claim(g.sharedSecret, 'AFTER-REVOKE'), 403).detail).toContain('revoked');
    // revoking again is harmless
    expect((await gw.http.delete(`/api/v1/things/claim-groups/${g.id}`, { token: account.operator })).status).toBe(200);
    const cert = await gw.db.sql<{ revoked: boolean }[]>`select revoked from device_certificates where thing_id = ${device.thingId}`;
    expect(cert).toEqual([{ revoked: false }]);
    const authn = await gw.http.post('/ddi/v1/authn/emqx', { clientid: device.thingId, username: device.thingId, cert_cn: device.thingId }, { headers: { 'x-internal-secret': gw.gw.auth.internalSecret } });
    expect(authn.body).toEqual({ result: 'allow' });
  });

  it('an expired group refuses claims with 403 and reads as expired', async () => {
    const g = await createClaimGroup(gw, account, { ttlDays: 1 });
    expect((await claim(g.sharedSecret, 'BEFORE-EXPIRY')).status).toBe(200);
    clock.advance(DAY);
    // the new claim reaches the machine (CLAIM_MANY refused past the TTL: EXPIRE recorded)
    expect(expectProblem(await claim(g.sharedSecret, 'AFTER-EXPIRY'), 403).detail).toContain('expired');
    expect(expectProblem(await claim(g.sharedSecret, 'BEFORE-EXPIRY'), 403).detail).toContain('expired');
    const status = await gw.http.get(`/api/v1/things/claim-groups/${g.id}`, { token: account.viewer });
    expect(status.body.status).toBe('expired');
    const [row] = await gw.db.sql`select state, consumed from claim_groups where id = ${g.id}`;
    expect(row).toEqual({ state: 'expired', consumed: 1 });
  });

  it('a repeat claim on a group whose TTL just passed is refused, and the expiry is recorded', async () => {
    const g = await createClaimGroup(gw, account, { ttlDays: 1 });
    expect((await claim(g.sharedSecret, 'REPEAT-EXPIRY')).status).toBe(200);
    clock.advance(DAY - 1);
    expect((await claim(g.sharedSecret, 'REPEAT-EXPIRY')).status).toBe(200);
    clock.advance(1);
    expect(expectProblem(await claim(g.sharedSecret, 'REPEAT-EXPIRY'), 403)).toMatchObject({ claimGroupStatus: 'expired' });
    const events = await gw.db.sql`select 1 from domain_events where actor_id = ${g.id} and type = 'claimGroup.expired'`;
    expect(events.length).toBe(1);
  });

  it('a capped group whose TTL passed reads and refuses as expired', async () => {
    const g = await createClaimGroup(gw, account, { maxDevices: 1, ttlDays: 1 });
    expect((await claim(g.sharedSecret, 'CAPPED-1')).status).toBe(200);
    expect(expectProblem(await claim(g.sharedSecret, 'CAPPED-2'), 403)).toMatchObject({ claimGroupStatus: 'capped' });
    clock.advance(DAY);
    expect(expectProblem(await claim(g.sharedSecret, 'CAPPED-2'), 403)).toMatchObject({ claimGroupStatus: 'expired' });
    expect((await gw.http.get(`/api/v1/things/claim-groups/${g.id}`, { token: account.viewer })).body).toMatchObject({ status: 'expired', consumed: 1 });
  });

  it('the claim_groups row shows the machine\'s state and count (projection)', async () => {
    const g = await createClaimGroup(gw, account, { maxDevices: 2, ttlDays: 3 });
    const created = await gw.db.sql`select state, consumed, expires_at from claim_groups where id = ${g.id}`;
    expect(created).toEqual([{ state: 'active', consumed: 0, expires_at: new Date(Date.parse(g.createdAt) + 3 * DAY) }]);
    await Promise.all(['P-1', 'P-2', 'P-3'].map((serial) => claim(g.sharedSecret, serial)));
    expect(await gw.db.sql`select state, consumed from claim_groups where id = ${g.id}`).toEqual([{ state: 'capped', consumed: 2 }]);
    await gw.http.delete(`/api/v1/things/claim-groups/${g.id}`, { token: account.operator });
    expect(await gw.db.sql`select state, consumed from claim_groups where id = ${g.id}`).toEqual([{ state: 'revoked', consumed: 2 }]);
  });

  it('unknown secrets and missing fields are refused', async () => {
    expectProblem(await claim('cgs_unknown', 'X'), 403);
    expectProblem(await gw.http.post('/ddi/v1/enroll', { provisioningMethod: 'claim_token', manufacturer: 'a', model: 'b', serial: 'c' }), 400);
    expectProblem(await gw.http.post('/ddi/v1/enroll', { claimSecret: 'x', manufacturer: 'a', model: 'b' }), 400);
    expectProblem(await gw.http.post('/ddi/v1/enroll', { claimSecret: 'x', manufacturer: 'a', model: 'b', serial: 'c', surprise: true }), 400);
  });
});

describe('enrollment tokens', () => {
  it('POST /api/v1/things needs enroll_things, answers thingId and a token', async () => {
    const plain = await createAccount(gw);
    expectProblem(await gw.http.post('/api/v1/things', { manufacturer: 'Acme', model: 'm', serial: 's' }, { token: plain.operator }), 403);
    const res = await gw.http.post('/api/v1/things', { manufacturer: 'Acme', model: 'm', serial: 'TOKEN-1' }, { token: account.operator });
    expect(res.status).toBe(201);
    expect(res.body.thingId).toMatch(/^[0-9a-f-]{36}$/);
    expect(res.body.enrollmentToken).toMatch(/^et_/);
    expect(Date.parse(res.body.expiresAt) - clock.now().getTime()).toBe(24 * 3600_000);
    expectProblem(await gw.http.post('/api/v1/things', { manufacturer: 'Acme', model: 'm', serial: 'TOKEN-1' }, { token: account.operator }), 409);
    const [row] = await gw.db.sql<{ h: Buffer }[]>`select enrollment_token_hash as h from things where id = ${res.body.thingId}`;
    expect(row.h.length).toBe(32);
  });

  it('a token used twice at once works once', async () => {
    const res = await gw.http.post('/api/v1/things', { manufacturer: 'Acme', model: 'm', serial: 'TOKEN-RACE' }, { token: account.operator });
    const [a, b] = await Promise.all([1, 2].map(() => gw.http.post('/ddi/v1/enroll', { enrollmentToken: res.body.enrollmentToken })));
    const statuses = [a.status, b.status].sort();
    expect(statuses).toEqual([200, 403]);
    const winner = a.status === 200 ? a : b;
    expect(winner.body.twinTopicPrefix).toBe(`devices/${res.body.thingId}`);
    expectProblem(await gw.http.post('/ddi/v1/enroll', { enrollmentToken: res.body.enrollmentToken }), 403);
    const certs = await gw.db.sql`select 1 from device_certificates where thing_id = ${res.body.thingId}`;
    expect(certs.length).toBe(1);
  });

  it('an expired token is refused; an unknown one is 401', async () => {
    const res = await gw.http.post('/api/v1/things', { manufacturer: 'Acme', model: 'm', serial: 'TOKEN-OLD' }, { token: account.operator });
    clock.advance(DAY);
    expect(expectProblem(await gw.http.post('/ddi/v1/enroll', { enrollmentToken: res.body.enrollmentToken }), 403).detail).toContain('expired');
    // the machine recorded the expiry; the token stays unusable
    expect((await gw.db.sql`select state from actors where type = 'enrollmentToken' and id = ${res.body.thingId}`)[0].state).toBe('expired');
    expect(expectProblem(await gw.http.post('/ddi/v1/enroll', { enrollmentToken: res.body.enrollmentToken }), 403).detail).toContain('expired');
    expect(await gw.db.sql`select 1 from device_certificates where thing_id = ${res.body.thingId}`).toHaveLength(0);
    expectProblem(await gw.http.post('/ddi/v1/enroll', { enrollmentToken: 'et_nope' }), 401);
  });

  it('a token works until the last instant before its expiry; its use is projected onto the thing', async () => {
    const res = await gw.http.post('/api/v1/things', { manufacturer: 'Acme', model: 'm', serial: 'TOKEN-LAST' }, { token: account.operator });
    const [before] = await gw.db.sql`select enrollment_token_expires_at, enrollment_token_used_at from things where id = ${res.body.thingId}`;
    expect(before).toEqual({ enrollment_token_expires_at: new Date(res.body.expiresAt), enrollment_token_used_at: null });
    clock.set(Date.parse(res.body.expiresAt) - 1);
    const enrolled = await gw.http.post('/ddi/v1/enroll', { enrollmentToken: res.body.enrollmentToken });
    expect(enrolled.status).toBe(200);
    const [after] = await gw.db.sql`select enrollment_token_used_at, enrolled_by, enrolled_at from things where id = ${res.body.thingId}`;
    expect(after).toEqual({ enrollment_token_used_at: clock.now(), enrolled_by: 'enrollment_token', enrolled_at: clock.now() });
    expect(expectProblem(await gw.http.post('/ddi/v1/enroll', { enrollmentToken: res.body.enrollmentToken }), 403).detail).toContain('already used');
    const events = await gw.db.sql`select type from domain_events where actor_type = 'enrollmentToken' and actor_id = ${res.body.thingId}`;
    expect(events.map((e) => e.type)).toEqual(['enrollmentToken.used']);
  });

  it('ENROLLMENT_TOKEN_TTL sets the lifetime', async () => {
    const short = await startTestGateway({ ENROLLMENT_TOKEN_TTL: '60' });
    try {
      const acc = await createAccount(short, { capabilities: ['enroll_things'] });
      const res = await short.http.post('/api/v1/things', { manufacturer: 'Acme', model: 'm', serial: 's' }, { token: acc.operator });
      const ttl = Date.parse(res.body.expiresAt) - Date.now();
      expect(ttl).toBeLessThanOrEqual(60_000);
      expect(ttl).toBeGreaterThan(0);
    } finally {
      await short.close();
    }
  });
});

describe('claims on two nodes', () => {
  it('60 concurrent claims split over two nodes against maxDevices 10 give exactly 10 certificates', async () => {
    const second = await startTestGateway({ NODE_ID: 'trust-claims-b' }, { db: gw.db, clock });
    try {
      const g = await createClaimGroup(gw, account, { maxDevices: 10 });
      const results = await Promise.all(Array.from({ length: 60 }, (_, i) =>
        (i % 2 ? second : gw).http.post('/ddi/v1/enroll', { provisioningMethod: 'claim_token', claimSecret: g.sharedSecret, manufacturer: 'Acme', model: 'm', serial: `TWO-${i % 30}` })));
      const ok = results.filter((r) => r.status === 200);
      for (const r of results.filter((x) => x.status !== 200)) expectProblem(r, 403);
      const things = new Set(ok.map((r) => r.body.twinTopicPrefix));
      expect(things.size).toBe(10);
      expect(await certificatesOfGroup(g.id)).toBe(10);
      const status = await gw.http.get(`/api/v1/things/claim-groups/${g.id}`, { token: account.viewer });
      expect(status.body).toMatchObject({ consumed: 10, status: 'capped' });
    } finally {
      await second.stop();
    }
  });
});

describe('access codes on the gateway clock', () => {
  it('an access code joins until the last instant of its 7 days, not after', async () => {
    const other = await createAccount(gw, { capabilities: ['enroll_things'] });
    const [early, late] = [await enrollDevice(gw, account), await enrollDevice(gw, account)];
    const issue = async (thingId: string) => (await gw.http.post(`/api/v1/things/${thingId}/access-code`, undefined, { token: account.operator })).body;
    const [a, b] = [await issue(early.thingId), await issue(late.thingId)];
    expect(Date.parse(a.expiresAt)).toBe(clock.now().getTime() + 7 * DAY);
    clock.set(Date.parse(a.expiresAt) - 1);
    expect((await gw.http.post('/api/v1/things/join', { access_code: a.accessCode }, { token: other.operator })).status).toBe(200);
    clock.set(Date.parse(b.expiresAt));
    expectProblem(await gw.http.post('/api/v1/things/join', { access_code: b.accessCode }, { token: other.operator }), 403);
    // still the first account's
    expect((await gw.http.get(`/api/v1/things/${late.thingId}`, { token: account.viewer })).status).toBe(200);
    expectProblem(await gw.http.get(`/api/v1/things/${late.thingId}`, { token: other.viewer }), 404);
  });
});
