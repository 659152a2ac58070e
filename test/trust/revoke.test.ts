import 'reflect-metadata';
import * as x509 from '@peculiar/x509';
import mqtt from 'mqtt';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestGateway, expectProblem, type TestGateway } from '../helpers/gateway.js';
import { createAccount, type TestAccount } from '../helpers/accounts.js';
import { enrollDevice, revokeDevice } from '../helpers/devices.js';
import type { StoredEvent } from '../../src/actors/store.js';
import { ManualClock } from '../../src/lib/clock.js';

let gw: TestGateway;
let account: TestAccount;
const clock = new ManualClock();
const internal = () => ({ headers: { 'x-internal-secret': gw.gw.auth.internalSecret } });

beforeAll(async () => {
  gw = await startTestGateway({}, { clock });
  account = await createAccount(gw, { capabilities: ['enroll_things'] });
});
afterAll(async () => gw?.close());

async function crlSerials(base = gw.httpUrl): Promise<string[]> {
  const res = await fetch(`${base}/api/v1/certificates/crl`);
  return new x509.X509Crl(Buffer.from(await res.arrayBuffer())).entries.map((e) => e.serialNumber.toLowerCase());
}

describe('revocation', () => {
  it('sets the flag, regenerates the CRL, then disconnects; emits thing.revoked; a repeat changes nothing', async () => {
    const device = await enrollDevice(gw, account);
    const client = await mqtt.connectAsync(`mqtts://127.0.0.1:${device.response.mqttBrokerPort}`, {
      key: device.keyPem, cert: device.certPem, ca: device.response.caBundlePem, servername: 'localhost', rejectUnauthorized: true,
      clientId: device.thingId, username: device.thingId, protocolVersion: 5, reconnectPeriod: 0, connectTimeout: 10_000,
    });
    // what is true when the broker drops the device's session: the CRL served and the flag already changed
    const atDrop = new Promise<{ crlHasSerial: boolean; flag: boolean }>((resolve, reject) => {
      client.once('disconnect', () => {
        void (async () => {
          const [row] = await gw.db.sql<{ revoked: boolean }[]>`select revoked from device_certificates where thing_id = ${device.thingId}`;
          return { crlHasSerial: (await crlSerials()).includes(device.serial), flag: row.revoked };
        })().then(resolve, reject);
      });
    });
    const events: StoredEvent[] = [];
    const listener = (e: StoredEvent) => events.push(e);
    gw.gw.bus.on('thing.revoked', listener);
    const crlChanges: number[] = [];
    const off = gw.gw.cluster.on<{ number: number }>('pki.crl-changed', ({ number }) => { crlChanges.push(number); });
    try {
      expect(await crlSerials()).not.toContain(device.serial);
      const first = await revokeDevice(gw, account, device.thingId);
      expect(first).toMatchObject({ thingId: device.thingId, revoked: true, revokedSerials: [device.serial], disconnected: true });
      expect(await atDrop).toEqual({ crlHasSerial: true, flag: true });
      expect(await crlSerials()).toContain(device.serial);
      expect(crlChanges).toEqual([first.crlNumber]);
      const second = await revokeDevice(gw, account, device.thingId);
      expect(second).toMatchObject({ thingId: device.thingId, revoked: true, revokedSerials: [], disconnected: false });
      // the machine refused the second REVOKE: no new CRL, no broadcast
      expect(second.crlNumber).toBe(first.crlNumber);
      expect(await gw.testHooks.trust.crlNumber()).toBe(first.crlNumber);
      expect(crlChanges).toEqual([first.crlNumber]);
      expect(events.filter((e) => e.actorId === device.thingId)).toHaveLength(1);
      expect(events[0]).toMatchObject({ accountId: account.id, payload: { thingId: device.thingId, serial: device.serial } });
      expect(typeof events[0].payload.by).toBe('string');
    } finally {
      client.end(true);
      gw.gw.bus.off('thing.revoked', listener);
      off();
    }
  });

  it('a revoked device cannot enroll again nor authenticate at the broker callback', async () => {
    const secret = (await gw.http.post('/api/v1/things/claim-groups', { name: 'g', maxDevices: 5, ttlDays: 1 }, { token: account.operator })).body.sharedSecret;
    const device = await enrollDevice(gw, account, { claimSecret: secret, serial: 'REVOKED-1' });
    const ids = { clientid: device.thingId, username: device.thingId, cert_cn: device.thingId };
    expect((await gw.http.post('/ddi/v1/authn/emqx', ids, internal())).body.result).toBe('allow');
    await revokeDevice(gw, account, device.thingId);
    expect((await gw.http.post('/ddi/v1/authn/emqx', ids, internal())).body.result).toBe('deny');
    const again = await gw.http.post('/ddi/v1/enroll', { provisioningMethod: 'claim_token', claimSecret: secret, manufacturer: 'Acme', model: 'sensor-1', serial: 'REVOKED-1' });
    expect(expectProblem(again, 403).detail).toContain('revoked');
    const [actor] = await gw.db.sql<{ state: string; snapshot: any }[]>`select state, snapshot from actors where type = 'thing' and id = ${device.thingId}`;
    expect(actor.state).toBe('ROLLEDOFF');
    expect(actor.snapshot.context.revokedAt).toBeTruthy();
  });

  it('the thing row shows its machine: revoked_at is the REVOKE instant of the clock, account_id follows a transfer', async () => {
    const device = await enrollDevice(gw, account);
    const at = new Date(clock.now().getTime() + 3_600_000);
    clock.set(at);
    await revokeDevice(gw, account, device.thingId);
    clock.advance(60_000);
    await revokeDevice(gw, account, device.thingId);
    const [row] = await gw.db.sql<{ revoked_at: Date; account_id: string }[]>`select revoked_at, account_id from things where id = ${device.thingId}`;
    const [actor] = await gw.db.sql<{ snapshot: any }[]>`select snapshot from actors where type = 'thing' and id = ${device.thingId}`;
    expect(row.revoked_at.toISOString()).toBe(at.toISOString());
    expect(actor.snapshot.context.revokedAt).toBe(at.toISOString());
    const [{ n }] = await gw.db.sql<{ n: number }[]>`select count(*)::int as n from domain_events where actor_id = ${device.thingId} and type = 'thing.revoked'`;
    expect(n).toBe(1);
  });

  it('a thing registered for the token flow has its actor from the start and can be revoked before enrolling', async () => {
    const res = await gw.http.post('/api/v1/things', { manufacturer: 'Acme', model: 'sensor-1', serial: `REG-${crypto.randomUUID().slice(0, 8)}` }, { token: account.operator });
    expect(res.status).toBe(201);
    const { thingId, enrollmentToken } = res.body;
    const [actor] = await gw.db.sql<{ state: string }[]>`select state from actors where type = 'thing' and id = ${thingId}`;
    expect(actor.state).toBe('REGISTERED');
    const revoked = await revokeDevice(gw, account, thingId);
    expect(revoked).toMatchObject({ revoked: true, revokedSerials: [] });
    // the machine refuses ENROLL for a revoked thing
    const enroll = await gw.http.post('/ddi/v1/enroll', { enrollmentToken });
    expect(expectProblem(enroll, 403).detail).toContain('revoked');
    const [after] = await gw.db.sql<{ state: string; n: number }[]>`
      select a.state, (select count(*)::int from device_certificates where thing_id = ${thingId}) as n from actors a where a.type = 'thing' and a.id = ${thingId}`;
    expect(after).toEqual({ state: 'REGISTERED', n: 0 });
  });

  it('other accounts get 404; viewers 403; unknown ids 404; bad ids 400', async () => {
    const device = await enrollDevice(gw, account);
    const other = await createAccount(gw);
    expectProblem(await gw.http.delete(`/api/v1/things/${device.thingId}`, { token: other.operator }), 404);
    expectProblem(await gw.http.delete(`/api/v1/things/${device.thingId}`, { token: account.viewer }), 403);
    expectProblem(await gw.http.delete(`/api/v1/things/${crypto.randomUUID()}`, { token: account.operator }), 404);
    expectProblem(await gw.http.delete('/api/v1/things/not-a-uuid', { token: account.operator }), 400);
    expectProblem(await gw.http.delete(`/api/v1/things/${device.thingId}`), 401);
    const [row] = await gw.db.sql<{ revoked: boolean }[]>`select revoked from device_certificates where thing_id = ${device.thingId}`;
    expect(row.revoked).toBe(false);
  });

  it('a second node serves the new CRL after a revocation on the first', async () => {
    const second = await startTestGateway({ NODE_ID: 'trust-node-b' }, { db: gw.db });
    try {
      const device = await enrollDevice(gw, account);
      expect(await crlSerials(second.httpUrl)).not.toContain(device.serial);
      await revokeDevice(gw, account, device.thingId);
      // the broadcast reaches the other node asynchronously (NOTIFY): poll its CRL
      let serials: string[] = [];
      for (let i = 0; i < 50 && !serials.includes(device.serial); i++) {
        serials = await crlSerials(second.httpUrl);
        if (!serials.includes(device.serial)) await new Promise((r) => setTimeout(r, 100));
      }
      expect(serials).toContain(device.serial);
      // the second node knows the thing's owner (a token of its own development issuer)
      const viewer = await second.token({ realm: `acc-${account.id}`, sub: 'viewer-b', roles: ['viewer'] });
      expect((await second.http.get(`/api/v1/things/${device.thingId}`, { token: viewer })).status).toBe(200);
    } finally {
      await second.stop();
    }
  });
});
