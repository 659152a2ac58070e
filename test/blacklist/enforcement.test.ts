import 'reflect-metadata';
import crypto from 'node:crypto';
import * as x509 from '@peculiar/x509';
import mqtt from 'mqtt';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ManualClock } from '../../src/lib/clock.js';
import { SETTLE_AFTER_MS } from '../../src/blacklist/service.js';
import { startTestGateway, expectProblem, type TestGateway } from '../helpers/gateway.js';
import { createAccount, type TestAccount } from '../helpers/accounts.js';
import { createClaimGroup, enrollDevice, type EnrolledDevice } from '../helpers/devices.js';
import { waitFor } from '../helpers/wait.js';

/**
 * Enforcement of the identity blacklist: enrollment refuses a listed (model, serial) with 403 in
 * every flow, and adding an identity revokes its enrolled things (certificate flag, CRL, broker
 * disconnect of a real MQTT client over mutual TLS), also when the add's own enforcement was lost.
 */
const clock = new ManualClock();
let gw: TestGateway;
let a: TestAccount;
let b: TestAccount;
let operator: string;
let pid = 0x4000;
const BASE = '/api/v1/identity-blacklist';

beforeAll(async () => {
  gw = await startTestGateway({}, { clock });
  [a, b] = await Promise.all([createAccount(gw, { capabilities: ['enroll_things'] }), createAccount(gw)]);
  operator = await gw.token({ realm: 'platform', sub: 'ops-2', roles: ['platform-operator'] });
});
afterAll(async () => gw?.close());

const sn = () => `SN-${crypto.randomUUID().slice(0, 8)}`;

async function model(account: TestAccount): Promise<{ id: string; descriptor: string }> {
  const p = (pid++).toString(16).toUpperCase();
  const res = await gw.http.post('/api/v1/models', { vid: 'FFF5', pid: p, name: 'enforced', provisioning_method: 'none' }, { token: account.admin });
  if (res.status !== 201) throw new Error(`model create failed: ${res.status} ${res.text}`);
  return { id: res.body.id, descriptor: `FFF5:${p}` };
}

async function add(token: string, model: string, serial: string) {
  const res = await gw.http.post(BASE, { model, sn: serial, reason: 'counterfeit' }, { token });
  expect(res.status, res.text).toBe(201);
  return res.body as { revoked_things: number };
}

async function crlSerials(): Promise<string[]> {
  const res = await fetch(`${gw.httpUrl}/api/v1/certificates/crl`);
  return new x509.X509Crl(Buffer.from(await res.arrayBuffer())).entries.map((e) => e.serialNumber.toLowerCase());
}

async function revoked(thingId: string): Promise<boolean> {
  const [row] = await gw.db.sql<{ revoked: boolean }[]>`select bool_and(revoked) as revoked from device_certificates where thing_id = ${thingId}`;
  return row.revoked;
}

function connect(d: EnrolledDevice) {
  return mqtt.connectAsync(`mqtts://127.0.0.1:${d.response.mqttBrokerPort}`, {
    key: d.keyPem, cert: d.certPem, ca: d.response.caBundlePem, servername: 'localhost', rejectUnauthorized: true,
    clientId: d.thingId, username: d.thingId, protocolVersion: 5, reconnectPeriod: 0, connectTimeout: 10_000,
  });
}

describe('enrollment refuses a blacklisted identity', () => {
  it('claim flow: 403 naming the identity, no thing and no certificate written; other serials and models still enroll', async () => {
    const serial = sn();
    await add(operator, 'sensor-bl', serial);
    const { sharedSecret } = await createClaimGroup(gw, a);
    const res = await gw.http.post('/ddi/v1/enroll', { provisioningMethod: 'claim_token', claimSecret: sharedSecret, manufacturer: 'Acme', model: 'sensor-bl', serial });
    const problem = expectProblem(res, 403);
    expect(problem.detail).toBe(`serial ${serial} of model sensor-bl is on the identity blacklist: enrollment refused`);
    expect(problem.detail).not.toContain('counterfeit');
    const [{ n }] = await gw.db.sql<{ n: number }[]>`select count(*)::int as n from things where serial = ${serial}`;
    expect(n).toBe(0);
    await enrollDevice(gw, a, { claimSecret: sharedSecret, model: 'sensor-bl', serial: sn() });
    await enrollDevice(gw, a, { claimSecret: sharedSecret, model: 'sensor-other', serial });
  });

  it('a registered model: refused whether the device names it by descriptor (any case) or by id', async () => {
    const m = await model(a);
    const serial = sn();
    await add(a.admin, m.descriptor, serial);
    for (const ref of [m.descriptor, m.descriptor.toLowerCase(), m.id]) {
      const res = await gw.http.post('/ddi/v1/enroll', { manufacturer: 'Acme', model: ref, serial });
      expect(expectProblem(res, 403).detail).toContain(`of model ${m.descriptor} is on the identity blacklist`);
    }
    const ok = await gw.http.post('/ddi/v1/enroll', { manufacturer: 'Acme', model: m.descriptor, serial: sn() });
    expect(ok.status, ok.text).toBe(200);
  });

  it('token flow: a registered thing whose identity got listed (without its revocation having run) is refused at enrollment', async () => {
    const serial = sn();
    const reg = await gw.http.post('/api/v1/things', { manufacturer: 'Acme', model: 'sensor-tok', serial }, { token: a.operator });
    expect(reg.status, reg.text).toBe(201);
    // the entry and its change, as if the add's enforcement had not run yet; the node hears of it
    const at = clock.now().toISOString();
    await gw.db.sql`insert into blacklist_entries (model, sn, reason, added_by, added_at) values ('sensor-tok', ${serial}, 'r', 'test', ${at})`;
    await gw.db.sql`insert into blacklist_changes (op, model, sn, reason, by, at) values ('add', 'sensor-tok', ${serial}, 'r', 'test', ${at})`;
    gw.gw.bus.emit('blacklist.added', { type: 'blacklist.added' });
    await waitFor(async () => (await gw.http.get(`${BASE}/check?sn=${serial}`, { token: a.viewer })).status === 200, 10_000, 'the node to hear of the entry');
    const res = await gw.http.post('/ddi/v1/enroll', { enrollmentToken: reg.body.enrollmentToken });
    expect(expectProblem(res, 403).detail).toContain('is on the identity blacklist');
    const [{ n }] = await gw.db.sql<{ n: number }[]>`select count(*)::int as n from device_certificates where thing_id = ${reg.body.thingId}`;
    expect(n).toBe(0);
  });
});

describe('adding an enrolled identity revokes it', () => {
  it('the connected device is kicked from the broker, its certificate is on the CRL, it cannot reconnect nor re-enroll; other accounts\' things of the identity too', async () => {
    const serial = sn();
    const device = await enrollDevice(gw, a, { model: 'sensor-live', serial });
    const twin = await enrollDevice(gw, b, { model: 'sensor-live', serial });
    const bystander = await enrollDevice(gw, a, { model: 'sensor-live', serial: sn() });
    const client = await connect(device);
    const dropped = new Promise<number | undefined>((resolve) => client.once('disconnect', (p) => resolve(p.reasonCode)));
    await client.publishAsync(`${device.response.twinTopicPrefix}/telemetry`, JSON.stringify({ t: 1 }));

    const added = await add(operator, 'sensor-live', serial);
    expect(added.revoked_things).toBe(2);
    // DISCONNECT with 0x98 (administrative action), sent before the add answered
    expect(await dropped).toBe(0x98);
    client.end(true);
    expect(await revoked(device.thingId)).toBe(true);
    expect(await revoked(twin.thingId)).toBe(true);
    expect(await revoked(bystander.thingId)).toBe(false);
    const crl = await crlSerials();
    expect(crl).toEqual(expect.arrayContaining([device.serial, twin.serial]));
    expect(crl).not.toContain(bystander.serial);
    const [event] = await gw.db.sql<{ payload: any }[]>`select payload from domain_events where type = 'thing.revoked' and actor_id = ${device.thingId}`;
    expect(event.payload.by).toBe('blacklist:ops-2');

    const again = mqtt.connect(`mqtts://127.0.0.1:${device.response.mqttBrokerPort}`, {
      key: device.keyPem, cert: device.certPem, ca: device.response.caBundlePem, servername: 'localhost', clientId: device.thingId, username: device.thingId,
      protocolVersion: 5, reconnectPeriod: 0, connectTimeout: 5000,
    });
    const outcome = await new Promise<string>((resolve) => {
      again.once('connect', () => resolve('connected'));
      again.once('error', () => resolve('refused'));
      again.once('close', () => resolve('refused'));
    });
    again.end(true);
    expect(outcome).toBe('refused');
    const { sharedSecret } = await createClaimGroup(gw, a);
    const reenroll = await gw.http.post('/ddi/v1/enroll', { provisioningMethod: 'claim_token', claimSecret: sharedSecret, manufacturer: 'Acme', model: 'sensor-live', serial });
    expectProblem(reenroll, 403);
  });

  it('the sweep enforces an add whose enforcement was lost (crash after commit), and settles it only SETTLE_AFTER_MS after the add', async () => {
    const serial = sn();
    const device = await enrollDevice(gw, a, { model: 'sensor-crash', serial });
    const at = clock.now().toISOString();
    // committed, then the node died before enforcing: the entry and its unsettled change only
    await gw.db.sql.begin(async (tx) => {
      await tx`insert into blacklist_entries (model, sn, reason, added_by, added_at) values ('sensor-crash', ${serial}, 'r', 'ops-2', ${at})`;
      await tx`insert into blacklist_changes (op, model, sn, reason, by, at, settled) values ('add', 'sensor-crash', ${serial}, 'r', 'ops-2', ${at}, false)`;
    });
    expect(await revoked(device.thingId)).toBe(false);
    const first = await gw.testHooks.blacklist.sweep();
    expect(first.enforced).toBeGreaterThanOrEqual(1);
    expect(await revoked(device.thingId)).toBe(true);
    expect(await crlSerials()).toContain(device.serial);
    const settled = async () => (await gw.db.sql<{ settled: boolean }[]>`select settled from blacklist_changes where sn = ${serial}`)[0].settled;
    expect(await settled()).toBe(false);
    // a thing that enrolled late (it checked before the add, committed after) is caught by the next pass
    const late = await enrollDevice(gw, b, { model: 'sensor-crash-late', serial });
    await gw.db.sql`update things set model = 'sensor-crash' where id = ${late.thingId}`;
    clock.advance(SETTLE_AFTER_MS + 1000);
    await gw.testHooks.blacklist.sweep();
    expect(await revoked(late.thingId)).toBe(true);
    expect(await settled()).toBe(true);
    // the snapshot followed the change the node never built for
    const snap = await gw.http.get(`${BASE}/snapshot.signed`, { token: a.viewer });
    const payload = JSON.parse(Buffer.from(snap.body.payload, 'base64url').toString());
    expect(payload.entries.some((e: any) => e.sn === serial)).toBe(true);
  });

  it('after a removal the identity enrolls again where it has no revoked thing; revoked things stay revoked', async () => {
    const serial = sn();
    const device = await enrollDevice(gw, a, { model: 'sensor-rm', serial });
    await add(operator, 'sensor-rm', serial);
    expect((await gw.http.delete(`${BASE}/sensor-rm/${serial}`, { token: operator })).status).toBe(204);
    expect(await revoked(device.thingId)).toBe(true);
    const fresh = await enrollDevice(gw, b, { model: 'sensor-rm', serial });
    expect(fresh.thingId).not.toBe(device.thingId);
  });
});
