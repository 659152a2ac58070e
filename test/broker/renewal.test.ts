import 'reflect-metadata';
import * as x509 from '@peculiar/x509';
import type { MqttClient } from 'mqtt';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestGateway, type TestGateway } from '../helpers/gateway.js';
import { createAccount, type TestAccount } from '../helpers/accounts.js';
import { enrollDevice, type EnrolledDevice } from '../helpers/devices.js';
import { mqttOutcome, mtls, newKey } from '../helpers/rotation.js';
import { waitFor } from '../helpers/wait.js';
import { REDIS_URL, redisReachable } from '../helpers/redis.js';
import { closed, connectDevice, nextMessage, type TestDevice } from './fixtures.js';

// Certificate renewal over MQTT (src/broker/renewal.ts) and the end of sessions on a replaced certificate.

let gw: TestGateway;
let account: TestAccount;

beforeAll(async () => {
  gw = await startTestGateway({ HTTPS_PORT: '0' });
  account = await createAccount(gw);
});
afterAll(async () => gw?.close());

const asDevice = (d: EnrolledDevice): TestDevice => ({ thingId: d.thingId, certPem: d.certPem, keyPem: d.keyPem, serial: d.serial, caPem: d.caPem });
const revokedOf = async (serial: string) =>
  (await gw.db.sql<{ revoked: boolean }[]>`select revoked from device_certificates where serial = ${serial}`)[0]?.revoked;
const certificateCount = async (thingId: string) =>
  (await gw.db.sql<{ n: number }[]>`select count(*)::int as n from device_certificates where thing_id = ${thingId}`)[0].n;
const deviceEvents = async (thingId: string) =>
  (await gw.db.sql<{ type: string }[]>`select type from domain_events where actor_type = 'device' and actor_id = ${thingId} order by seq`).map((e) => e.type);

/** Publishes a renewal request and resolves with the answer on `replyTopic` (subscribed first). */
async function renewOverMqtt(client: MqttClient, thingId: string, payload: string, replyTopic: string, properties?: { responseTopic?: string; correlationData?: Buffer }) {
  await client.subscribeAsync(replyTopic, { qos: 1 });
  const answer = nextMessage(client, replyTopic);
  await client.publishAsync(`devices/${thingId}/certificate/renew`, payload, { qos: 1, ...(properties ? { properties } : {}) });
  const { payload: body, packet } = await answer;
  return { body: JSON.parse(body.toString()), packet };
}

describe('certificate renewal over MQTT', () => {
  it('MQTT 5: the answer comes on the response topic with the correlation data; the device stays connected through the rotation', async () => {
    const d = await enrollDevice(gw, account);
    const old = await connectDevice(gw.mqttPort!, asDevice(d));
    const { key, csr } = await newKey(`CN=${d.thingId}`);
    const replyTopic = `devices/${d.thingId}/certificate/replies`;
    const { body, packet } = await renewOverMqtt(old, d.thingId, JSON.stringify({ csr }), replyTopic, { responseTopic: replyTopic, correlationData: Buffer.from('req-1') });
    expect(Buffer.from(packet.properties!.correlationData!).toString()).toBe('req-1');
    expect(body.error).toBeUndefined();
    expect(body).toMatchObject({ thingId: d.thingId, serial: expect.any(String), notAfter: expect.any(String), caBundlePem: gw.gw.pki.bundlePem });
    expect(new x509.X509Certificate(body.certificate).subject).toBe(`CN=${d.thingId}`);
    expect(Date.parse(body.notAfter)).toBeGreaterThan(Date.now() + 300 * 86_400_000);
    // both certificates valid, the old session still up
    expect(await revokedOf(d.serial)).toBe(false);
    expect(old.connected).toBe(true);

    // make before break: the new connection takes the session over (DISCONNECT 0x8E to the old one)
    const takeover = new Promise<number | undefined>((resolve) => old.once('disconnect', (p) => resolve(p.reasonCode)));
    const renewed = { ...asDevice(d), certPem: body.certificate, keyPem: key, serial: body.serial };
    const fresh = await connectDevice(gw.mqttPort!, renewed);
    expect(await takeover).toBe(0x8e);
    await waitFor(async () => (await revokedOf(d.serial)) === true, 10_000, 'old certificate revoked at first use');
    // the device was connected throughout: two connects recorded, no disconnect, and it is connected now
    await waitFor(async () => (await deviceEvents(d.thingId)).length === 2, 10_000, 'second connect recorded');
    expect(await deviceEvents(d.thingId)).toEqual(['device.connected', 'device.connected']);
    const connectivity = await gw.http.get(`/api/v1/things/${d.thingId}/connectivity`, { token: account.viewer });
    expect(connectivity.body).toMatchObject({ connected: true });
    // the session on the new certificate survives the rotation's own kick
    expect(fresh.connected).toBe(true);
    await fresh.subscribeAsync(`devices/${d.thingId}/commands`, { qos: 1 });
    await fresh.endAsync();
    // once every node loaded the new CRL, the old certificate is refused
    await waitFor(async () => (await mqttOutcome(gw, d.thingId, { cert: d.certPem, key: d.keyPem })) === 'refused', 10_000, 'old certificate refused by the broker');
  });

  it('MQTT 3.1.1: the answer comes on devices/{id}/certificate/renewed with the requestId; the new certificate connects', async () => {
    const d = await enrollDevice(gw, account);
    const client = await connectDevice(gw.mqttPort!, asDevice(d), { protocolVersion: 4 });
    const { key, csr } = await newKey();
    const { body } = await renewOverMqtt(client, d.thingId, JSON.stringify({ csr, requestId: 'r-311' }), `devices/${d.thingId}/certificate/renewed`);
    expect(body).toMatchObject({ requestId: 'r-311', thingId: d.thingId, serial: expect.any(String) });
    const fresh = await connectDevice(gw.mqttPort!, { ...asDevice(d), certPem: body.certificate, keyPem: key }, { protocolVersion: 4 });
    await waitFor(async () => (await revokedOf(d.serial)) === true, 10_000, 'old certificate revoked');
    await closed(client);
    await fresh.endAsync();
  });

  it('answers a bad request with an error object and stores nothing; the session stays up', async () => {
    const d = await enrollDevice(gw, account);
    const other = await enrollDevice(gw, account);
    const client = await connectDevice(gw.mqttPort!, asDevice(d));
    const fixed = `devices/${d.thingId}/certificate/renewed`;
    const notPem = await renewOverMqtt(client, d.thingId, JSON.stringify({ csr: 'not a CSR', requestId: 'a' }), fixed);
    expect(notPem.body).toEqual({ requestId: 'a', error: { kind: 'invalid', detail: expect.stringContaining('PKCS#10') } });
    const notJson = await renewOverMqtt(client, d.thingId, 'hello', fixed);
    expect(notJson.body.error).toMatchObject({ kind: 'invalid', detail: expect.stringContaining('JSON') });
    const wrongCn = await renewOverMqtt(client, d.thingId, JSON.stringify({ csr: (await newKey(`CN=${other.thingId}`)).csr }), fixed);
    expect(wrongCn.body.error).toMatchObject({ kind: 'invalid', detail: expect.stringContaining('CN') });
    // a response topic outside the device's own prefix is not used: the answer comes on the fixed topic
    const elsewhere = await renewOverMqtt(client, d.thingId, JSON.stringify({ csr: 'x' }), fixed, { responseTopic: `devices/${other.thingId}/certificate/renewed`, correlationData: Buffer.from('c') });
    expect(elsewhere.body.error.kind).toBe('invalid');
    expect(Buffer.from(elsewhere.packet.properties!.correlationData!).toString()).toBe('c');
    expect(await certificateCount(d.thingId)).toBe(1);
    expect(client.connected).toBe(true);
    await client.endAsync();
  });

  it('caps pending renewals over MQTT like over HTTP (too_many)', async () => {
    const d = await enrollDevice(gw, account);
    const client = await connectDevice(gw.mqttPort!, asDevice(d));
    const fixed = `devices/${d.thingId}/certificate/renewed`;
    for (let i = 0; i < 3; i++) expect((await renewOverMqtt(client, d.thingId, JSON.stringify({ csr: (await newKey()).csr }), fixed)).body.serial).toBeDefined();
    const fourth = await renewOverMqtt(client, d.thingId, JSON.stringify({ csr: (await newKey()).csr }), fixed);
    expect(fourth.body.error).toMatchObject({ kind: 'too_many', type: 'too-many-pending-renewals', retryAfterSeconds: expect.any(Number) });
    expect(await certificateCount(d.thingId)).toBe(4);
    await client.endAsync();
  });
});

describe('a session still on the old certificate', () => {
  it('is dropped, on whichever node holds it, when the new certificate is first used over HTTP', async () => {
    const nodeB = await startTestGateway({ NODE_ID: 'rotation-node-b' }, { db: gw.db });
    try {
      const d = await enrollDevice(gw, account);
      const session = await connectDevice(nodeB.mqttPort!, asDevice(d));
      const bystander = await enrollDevice(gw, account);
      const bystanderSession = await connectDevice(nodeB.mqttPort!, asDevice(bystander));
      const { key, csr } = await newKey();
      const renewed = await mtls(gw, 'POST', `/ddi/v1/${d.thingId}/certificate/renew`, { cert: d.certPem, key: d.keyPem }, { csr });
      expect(renewed.status).toBe(201);
      expect(session.connected).toBe(true);
      const dropped = new Promise<number | undefined>((resolve) => session.once('disconnect', (p) => resolve(p.reasonCode)));
      // first use of the new certificate, on node A's mutual-TLS listener
      expect((await mtls(gw, 'GET', `/ddi/v1/${d.thingId}/device/status`, { cert: renewed.body.certificate, key })).status).toBe(200);
      expect(await dropped).toBe(0x98);
      await closed(session);
      expect(await revokedOf(d.serial)).toBe(true);
      // another device's session on that node is untouched; the new certificate connects there
      expect(bystanderSession.connected).toBe(true);
      const fresh = await connectDevice(nodeB.mqttPort!, { ...asDevice(d), certPem: renewed.body.certificate, keyPem: key });
      await fresh.subscribeAsync(`devices/${d.thingId}/commands`, { qos: 1 });
      expect(fresh.connected).toBe(true);
      await Promise.all([fresh.endAsync(), bystanderSession.endAsync()]);
    } finally {
      await nodeB.stop();
    }
  });
});

const redis = await redisReachable();
if (!redis) console.warn(`cluster renewal test skipped: Redis at ${REDIS_URL} is not reachable`);

describe.skipIf(!redis)('renewal over MQTT in a cluster (Redis)', () => {
  it('is answered once, by the node the device is connected to', async () => {
    // a Redis database of its own isolates this run's sessions and messages
    const redisUrl = `${REDIS_URL.replace(/\/\d*$/, '')}/${1 + Math.floor(Math.random() * 15)}`;
    const a = await startTestGateway({ NODE_ID: 'renewal-a', REDIS_URL: redisUrl }, { db: gw.db });
    const b = await startTestGateway({ NODE_ID: 'renewal-b', REDIS_URL: redisUrl }, { db: gw.db });
    try {
      const d = await enrollDevice(gw, account);
      const client = await connectDevice(b.mqttPort!, asDevice(d));
      const topic = `devices/${d.thingId}/certificate/renewed`;
      await client.subscribeAsync(topic, { qos: 1 });
      const answers: { requestId?: string; serial?: string }[] = [];
      client.on('message', (t, payload) => {
        if (t === topic) answers.push(JSON.parse(payload.toString()));
      });
      for (const requestId of ['one', 'two']) {
        await client.publishAsync(`devices/${d.thingId}/certificate/renew`, JSON.stringify({ csr: (await newKey()).csr, requestId }), { qos: 1 });
        await waitFor(() => answers.some((x) => x.requestId === requestId), 10_000, `answer ${requestId}`);
      }
      // had another node handled a request too, a second answer or certificate would exist by now
      const marker = JSON.stringify({ csr: 'x', requestId: 'marker' });
      await client.publishAsync(`devices/${d.thingId}/certificate/renew`, marker, { qos: 1 });
      await waitFor(() => answers.some((x) => x.requestId === 'marker'), 10_000, 'marker answered');
      expect(answers.map((x) => x.requestId)).toEqual(['one', 'two', 'marker']);
      expect(answers.slice(0, 2).every((x) => typeof x.serial === 'string')).toBe(true);
      expect(await certificateCount(d.thingId)).toBe(3);
      await client.endAsync();
    } finally {
      await b.stop();
      await a.stop();
    }
  });
});
