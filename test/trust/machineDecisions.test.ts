import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestGateway, expectProblem, type TestGateway } from '../helpers/gateway.js';
import { createAccount, type TestAccount } from '../helpers/accounts.js';
import { createClaimGroup, enrollDevice, revokeDevice } from '../helpers/devices.js';
import { newKey } from '../helpers/rotation.js';
import { ManualClock } from '../../src/lib/clock.js';
import { deviceCertificateKind } from '../../src/trust/kinds.js';

/**
 * Issue 33: trust decisions that depend on a lifecycle are taken by the machines, with the injected
 * clock; the rows show the machines' projections. The clock here runs apart from the wall clock
 * and the database's, so a decision taken from a column or from `now()` would answer differently.
 */
let gw: TestGateway;
let account: TestAccount;
const clock = new ManualClock();
const TOKEN_TTL_S = 3600;
const targetToken = (token: string) => ({ headers: { authorization: `TargetToken ${token}` } });

beforeAll(async () => {
  gw = await startTestGateway({ ENROLLMENT_TOKEN_TTL: String(TOKEN_TTL_S) }, { clock });
  account = await createAccount(gw, { capabilities: ['enroll_things'] });
});
afterAll(async () => gw?.close());

/** Moves the clock a distinct step ahead of the wall clock (never back: certificates are signed by wall time). */
function tick(ms = 3_600_000): string {
  clock.advance(ms);
  return clock.now().toISOString();
}

const certificateRow = async (serial: string) =>
  (await gw.db.sql<{ revoked: boolean; revoked_at: Date | null; awaiting_first_use: boolean }[]>`
    select revoked, revoked_at, awaiting_first_use from device_certificates where serial = ${serial}`)[0];

describe('machine decisions with the injected clock', () => {
  it('an enrollment token authenticates until its machine says it expired, used or not; enrolled_at is the thing machine\'s', async () => {
    const at = tick();
    const d = await enrollDevice(gw, account, { via: 'token' });
    const [row] = await gw.db.sql<{ enrolled_by: string; enrolled_at: Date }[]>`select enrolled_by, enrolled_at from things where id = ${d.thingId}`;
    expect(row.enrolled_by).toBe('enrollment_token');
    expect(row.enrolled_at.toISOString()).toBe(at);
    expect((await gw.http.get(`/ddi/v1/${d.thingId}/device/status`, targetToken(d.enrollmentToken!))).status).toBe(200);
    tick(TOKEN_TTL_S * 1000 - 1);
    expect((await gw.http.get(`/ddi/v1/${d.thingId}/device/status`, targetToken(d.enrollmentToken!))).status).toBe(200);
    tick(1);
    const expired = expectProblem(await gw.http.get(`/ddi/v1/${d.thingId}/device/status`, targetToken(d.enrollmentToken!)), 401);
    expect(expired.detail).toContain('expired');
  });

  it('revocation: each certificate\'s machine revokes it at the clock\'s instant; the CRL and the row show it', async () => {
    const d = await enrollDevice(gw, account);
    const at = tick();
    const revoked = await revokeDevice(gw, account, d.thingId);
    expect(revoked.revokedSerials).toEqual([d.serial]);
    const actor = await gw.gw.actors.get(deviceCertificateKind, d.serial);
    expect(actor?.state).toBe('revoked');
    expect(actor?.snapshot.context.revokedAt).toBe(at);
    expect(await certificateRow(d.serial)).toEqual({ revoked: true, revoked_at: new Date(at), awaiting_first_use: false });
    // the machine refuses a second REVOKE: a repeat revokes nothing
    expect((await revokeDevice(gw, account, d.thingId)).revokedSerials).toEqual([]);
  });

  it('rotation: the renewal waits for its first use, then supersedes the old certificate at that instant', async () => {
    const d = await enrollDevice(gw, account);
    const { csr } = await newKey();
    const renewed = await gw.testHooks.trust.renew(d.thingId, csr);
    const serial = renewed.serial.toLowerCase();
    expect((await gw.gw.actors.get(deviceCertificateKind, serial))?.state).toBe('issued');
    expect(await certificateRow(serial)).toMatchObject({ awaiting_first_use: true, revoked: false });
    // the old certificate used again changes nothing
    await gw.testHooks.trust.certificateUsed(d.thingId, d.serial, new Date());
    expect((await gw.gw.actors.get(deviceCertificateKind, d.serial))?.state).toBe('inUse');
    const at = tick();
    await gw.testHooks.trust.certificateUsed(d.thingId, serial, new Date());
    const [old, current] = await Promise.all([gw.gw.actors.get(deviceCertificateKind, d.serial), gw.gw.actors.get(deviceCertificateKind, serial)]);
    expect(old?.state).toBe('superseded');
    expect(old?.snapshot.context).toMatchObject({ revokedAt: at, supersededBy: serial });
    expect(current?.state).toBe('inUse');
    expect(current?.snapshot.context.usedAt).toBe(at);
    expect(await certificateRow(d.serial)).toEqual({ revoked: true, revoked_at: new Date(at), awaiting_first_use: false });
    expect(await certificateRow(serial)).toEqual({ revoked: false, revoked_at: null, awaiting_first_use: false });
    // a superseded certificate may not renew; the thing itself is not revoked
    await expect(gw.testHooks.trust.renew(d.thingId, (await newKey()).csr, d.serial)).rejects.toMatchObject({ kind: 'refused' });
    expect((await gw.http.get(`/api/v1/things/${d.thingId}`, { token: account.viewer })).body).toMatchObject({ revoked: false });
  });

  it('claim group list: expired as soon as the machine would accept EXPIRE at the injected clock, before the sweep records it', async () => {
    const g = await createClaimGroup(gw, account, { name: 'line 9', maxDevices: 7, ttlDays: 1 });
    const listed = async () => {
      const res = await gw.http.get('/api/v1/things/claim-groups?limit=100', { token: account.viewer });
      expect(res.status).toBe(200);
      return (res.body.items as { id: string }[]).find((i) => i.id === g.id);
    };
    expect(await listed()).toMatchObject({ name: 'line 9', maxDevices: 7, ttlDays: 1, consumed: 0, status: 'active', revoked: false });
    tick(86_400_000 - 1);
    expect(await listed()).toMatchObject({ status: 'active' });
    tick(1);
    expect(await listed()).toMatchObject({ name: 'line 9', maxDevices: 7, ttlDays: 1, status: 'expired', revoked: false });
    // nothing recorded by the list: the row still shows the last event's state until the sweep
    expect((await gw.db.sql`select state from claim_groups where id = ${g.id}`)[0].state).toBe('active');
    expect(await gw.testHooks.trust.expireClaimGroups()).toBeGreaterThanOrEqual(1);
    expect((await gw.db.sql`select state from claim_groups where id = ${g.id}`)[0].state).toBe('expired');
  });

  it('an access code\'s machine takes one use: of two concurrent joins one wins, and its row shows the winner', async () => {
    const d = await enrollDevice(gw, account);
    const code = (await gw.http.post(`/api/v1/things/${d.thingId}/access-code`, undefined, { token: account.operator })).body.accessCode;
    const [a, b] = await Promise.all([createAccount(gw), createAccount(gw)]);
    const at = tick();
    const answers = await Promise.all([a, b].map((x) => gw.http.post('/api/v1/things/join', { access_code: code }, { token: x.operator })));
    expect(answers.map((r) => r.status).sort()).toEqual([200, 403]);
    const winner = answers[0].status === 200 ? a : b;
    const [row] = await gw.db.sql<{ used_at: Date; used_by_account: string }[]>`select used_at, used_by_account from thing_access_codes where thing_id = ${d.thingId}`;
    expect(row.used_at.toISOString()).toBe(at);
    expect(row.used_by_account).toBe(winner.id);
    expect((await gw.db.sql`select account_id from things where id = ${d.thingId}`)[0].account_id).toBe(winner.id);
  });
});
