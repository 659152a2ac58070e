import 'reflect-metadata';
import * as x509 from '@peculiar/x509';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestGateway, expectProblem, type TestGateway } from '../helpers/gateway.js';
import { createAccount, type TestAccount } from '../helpers/accounts.js';
import { enrollDevice, revokeDevice } from '../helpers/devices.js';
import { ManualClock, isoNow } from '../../src/lib/clock.js';
import { thingKind } from '../../src/trust/kinds.js';
import { lifecycleRepo } from '../../src/trust/lifecycle.js';

let gw: TestGateway;
let account: TestAccount;
let other: TestAccount;
const clock = new ManualClock(new Date('2026-11-23T10:00:00.000Z'));
const MINUTE = 60_000;

beforeAll(async () => {
  gw = await startTestGateway({}, { clock });
  account = await createAccount(gw, { capabilities: ['enroll_things'] });
  other = await createAccount(gw);
});
afterAll(async () => gw?.close());

const post = (thingId: string, verb: string, token = account.operator) => gw.http.post(`/api/v1/things/${thingId}/${verb}`, undefined, { token });
const stateOf = (thingId: string, token = account.viewer) => gw.http.get(`/api/v1/things/${thingId}/state`, { token });
/** What the PROVISION saga (not built yet) will send: the factory legs done. */
async function throughFactory(thingId: string) {
  await gw.gw.actors.send(thingKind, thingId, { type: 'PROVISION', at: isoNow(clock) });
  clock.advance(MINUTE);
  await gw.gw.actors.send(thingKind, thingId, { type: 'FACTORY_DONE', at: isoNow(clock) });
}
async function crlSerials(): Promise<string[]> {
  const res = await fetch(`${gw.httpUrl}/api/v1/certificates/crl`);
  return new x509.X509Crl(Buffer.from(await res.arrayBuffer())).entries.map((e) => e.serialNumber.toLowerCase());
}

describe('thing lifecycle over HTTP', () => {
  it('goes ROLLEDOFF -> ... -> ACTIVATED <-> DEACTIVATED -> ANNIHILATED (revoked, on the CRL), one log row per change in order', async () => {
    const device = await enrollDevice(gw, account);
    const id = device.thingId;
    const enrolled = await stateOf(id);
    expect(enrolled.status).toBe(200);
    expect(enrolled.body.state).toBe('ROLLEDOFF');

    clock.advance(MINUTE);
    await throughFactory(id);
    expect((await stateOf(id)).body).toEqual({ state: 'IN_FACTORY', updated_at: isoNow(clock) });
    // wrong state: the detail names the current one, nothing changes
    const early = expectProblem(await post(id, 'activate'), 409);
    expect(early.detail).toContain('IN_FACTORY');
    expect(expectProblem(await post(id, 'deactivate'), 409).detail).toContain('IN_FACTORY');

    const times: string[] = [];
    for (const [verb, state] of [['factory-handover', 'HANDOVER_PENDING'], ['activate', 'ACTIVATED'], ['deactivate', 'DEACTIVATED'], ['activate', 'ACTIVATED']]) {
      clock.advance(MINUTE);
      times.push(isoNow(clock));
      const res = await post(id, verb);
      expect(res.status).toBe(200);
      expect(res.body).toEqual({ state, updated_at: isoNow(clock) });
    }
    expect(expectProblem(await post(id, 'activate'), 409).detail).toContain('ACTIVATED');
    expect(expectProblem(await post(id, 'factory-handover'), 409).detail).toContain('ACTIVATED');

    expect(await crlSerials()).not.toContain(device.serial);
    clock.advance(MINUTE);
    const gone = await post(id, 'annihilate', account.admin);
    expect(gone.status).toBe(200);
    expect(gone.body).toMatchObject({ thingId: id, revoked: true, revokedSerials: [device.serial], state: 'ANNIHILATED', updated_at: isoNow(clock) });
    expect(await crlSerials()).toContain(device.serial);
    const [cert] = await gw.db.sql<{ revoked: boolean }[]>`select revoked from device_certificates where serial = ${device.serial}`;
    expect(cert.revoked).toBe(true);
    // terminal: nothing more, not even a second annihilation
    expect(expectProblem(await post(id, 'annihilate', account.admin), 409).detail).toContain('ANNIHILATED');
    expect(expectProblem(await post(id, 'activate'), 409).detail).toContain('ANNIHILATED');
    expect((await stateOf(id)).body.state).toBe('ANNIHILATED');

    const log = await lifecycleRepo.stateChanges(gw.db.sql, id);
    expect(log.map((r) => [r.from, r.to, r.event])).toEqual([
      ['REGISTERED', 'ROLLEDOFF', 'ENROLL'],
      ['ROLLEDOFF', 'PROVISIONED', 'PROVISION'],
      ['PROVISIONED', 'IN_FACTORY', 'FACTORY_DONE'],
      ['IN_FACTORY', 'HANDOVER_PENDING', 'FACTORY_HANDOVER'],
      ['HANDOVER_PENDING', 'ACTIVATED', 'ACTIVATE'],
      ['ACTIVATED', 'DEACTIVATED', 'DEACTIVATE'],
      ['DEACTIVATED', 'ACTIVATED', 'ACTIVATE'],
      ['ACTIVATED', 'ANNIHILATED', 'ANNIHILATE'],
    ]);
    expect(log.slice(3, 7).map((r) => r.at)).toEqual(times);
    expect(log.every((r) => r.accountId === account.id && r.thingId === id)).toBe(true);
    expect(log.map((r) => r.seq)).toEqual([...log.map((r) => r.seq)].sort((a, b) => a - b));
    // the projection on the row agrees with the machine
    const [row] = await gw.db.sql<{ lifecycle_state: string; revoked_at: Date | null }[]>`select lifecycle_state, revoked_at from things where id = ${id}`;
    expect(row.lifecycle_state).toBe('ANNIHILATED');
    expect(row.revoked_at).not.toBeNull();
  });

  it('a rolled-back transition leaves neither a state change nor a log row', async () => {
    const { thingId } = await enrollDevice(gw, account);
    await throughFactory(thingId);
    const before = await lifecycleRepo.stateChanges(gw.db.sql, thingId);
    await expect(gw.gw.actors.run(async (uow) => {
      await uow.send(thingKind, thingId, { type: 'FACTORY_HANDOVER', at: isoNow(clock) });
      throw new Error('rolled back after the transition');
    })).rejects.toThrow('rolled back');
    expect((await stateOf(thingId)).body.state).toBe('IN_FACTORY');
    expect(await lifecycleRepo.stateChanges(gw.db.sql, thingId)).toEqual(before);
    expect(before).toHaveLength(3);
  });

  it('a registered thing is REGISTERED until its token is used; the enrollment is logged', async () => {
    const created = await gw.http.post('/api/v1/things', { manufacturer: 'Acme', model: 'm-reg', serial: 'REG-1' }, { token: account.operator });
    expect(created.status).toBe(201);
    const id = created.body.thingId;
    expect((await stateOf(id)).body.state).toBe('REGISTERED');
    expect(expectProblem(await post(id, 'activate'), 409).detail).toContain('REGISTERED');
    expect(await lifecycleRepo.stateChanges(gw.db.sql, id)).toEqual([]);
    clock.advance(MINUTE);
    expect((await gw.http.post('/ddi/v1/enroll', { enrollmentToken: created.body.enrollmentToken })).status).toBe(200);
    expect((await stateOf(id)).body).toEqual({ state: 'ROLLEDOFF', updated_at: isoNow(clock) });
    expect((await lifecycleRepo.stateChanges(gw.db.sql, id)).map((r) => [r.from, r.to, r.event])).toEqual([['REGISTERED', 'ROLLEDOFF', 'ENROLL']]);
  });

  it('a revoked thing makes no lifecycle step (409 says so) but can still be annihilated, without a second revocation', async () => {
    const device = await enrollDevice(gw, account);
    await throughFactory(device.thingId);
    await revokeDevice(gw, account, device.thingId);
    const refused = expectProblem(await post(device.thingId, 'factory-handover'), 409);
    expect(refused.detail).toContain('IN_FACTORY');
    expect(refused.detail).toContain('revoked');
    const gone = await post(device.thingId, 'annihilate', account.admin);
    expect(gone.status).toBe(200);
    expect(gone.body).toMatchObject({ state: 'ANNIHILATED', revokedSerials: [] });
    const [{ n }] = await gw.db.sql<{ n: number }[]>`select count(*)::int as n from domain_events where actor_id = ${device.thingId} and type = 'thing.revoked'`;
    expect(n).toBe(1);
  });

  it('other accounts\' and unknown things are 404, bad ids 400, roles 403, no credential 401', async () => {
    const { thingId } = await enrollDevice(gw, account);
    for (const verb of ['factory-handover', 'activate', 'deactivate']) {
      expectProblem(await post(thingId, verb, other.operator), 404);
      expectProblem(await post(crypto.randomUUID(), verb), 404);
      expectProblem(await post('not-a-uuid', verb), 400);
      expectProblem(await post(thingId, verb, account.viewer), 403);
    }
    expectProblem(await post(thingId, 'annihilate', other.admin), 404);
    expectProblem(await post(thingId, 'annihilate', account.operator), 403);
    expectProblem(await stateOf(thingId, other.viewer), 404);
    expectProblem(await stateOf(crypto.randomUUID()), 404);
    expectProblem(await stateOf('nope'), 400);
    expectProblem(await gw.http.get(`/api/v1/things/${thingId}/state`), 401);
    // nothing moved
    expect((await stateOf(thingId)).body.state).toBe('ROLLEDOFF');
  });
});

describe('GET /api/v1/things/resolve', () => {
  it('finds the caller\'s thing by model and serial; 404 when absent or another account\'s; 400 without serial', async () => {
    const device = await enrollDevice(gw, account, { model: 'resolver-1', serial: 'RES-1' });
    const found = await gw.http.get('/api/v1/things/resolve?model=resolver-1&serial=RES-1', { token: account.viewer });
    expect(found.status).toBe(200);
    expect(found.body).toMatchObject({ id: device.thingId, manufacturer: 'Acme', model: 'resolver-1', serial: 'RES-1', state: 'ROLLEDOFF', revoked: false });
    expect((await gw.http.get('/api/v1/things/resolve?model=resolver-1&serial=RES-1&manufacturer=Acme', { token: account.viewer })).body.id).toBe(device.thingId);
    expect(expectProblem(await gw.http.get('/api/v1/things/resolve?model=resolver-1&serial=RES-2', { token: account.viewer }), 404).detail).toContain('RES-2');
    expectProblem(await gw.http.get('/api/v1/things/resolve?model=resolver-1&serial=RES-1', { token: other.viewer }), 404);
    expectProblem(await gw.http.get('/api/v1/things/resolve?model=resolver-1', { token: account.viewer }), 400);
    expectProblem(await gw.http.get('/api/v1/things/resolve?model=resolver-1&serial=RES-1'), 401);
  });

  it('asks for the manufacturer when two manufacturers share the model and serial (409)', async () => {
    await enrollDevice(gw, account, { manufacturer: 'Acme', model: 'twin-1', serial: 'T-1' });
    const globex = await enrollDevice(gw, account, { manufacturer: 'Globex', model: 'twin-1', serial: 'T-1' });
    expect(expectProblem(await gw.http.get('/api/v1/things/resolve?model=twin-1&serial=T-1', { token: account.viewer }), 409).detail).toContain('manufacturer');
    expect((await gw.http.get('/api/v1/things/resolve?model=twin-1&serial=T-1&manufacturer=Globex', { token: account.viewer })).body.id).toBe(globex.thingId);
  });
});
