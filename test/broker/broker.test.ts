import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import WebSocket from 'ws';
import { startTestGateway, expectProblem, type TestGateway } from '../helpers/gateway.js';
import { createAccount, type TestAccount } from '../helpers/accounts.js';
import { waitFor } from '../helpers/wait.js';
import { enrollDevice, createClaimGroup, revokeDevice } from '../helpers/devices.js';
import { closed, connectDevice, connectError, issueDevice, metric, nextMessage, pubackCode, selfSigned, subackCodes, tlsOutcome, type TestDevice } from './fixtures.js';

let gw: TestGateway;
let port: number;
let claimSecret: string;
let account: TestAccount;
let other: TestAccount;

beforeAll(async () => {
  gw = await startTestGateway({ COMMAND_TIMEOUT_MS: '3000' });
  port = gw.mqttPort!;
  account = await createAccount(gw);
  other = await createAccount(gw);
  claimSecret = (await createClaimGroup(gw, account)).sharedSecret;
});
afterAll(async () => gw?.close());

/** A device of `account`, enrolled over HTTP (claim group). */
const ownedDevice = (): Promise<TestDevice> => enrollDevice(gw, account, { claimSecret });

describe('authentication', () => {
  it('accepts MQTT 5 and MQTT 3.1.1 clients whose CN is the client id and the username', async () => {
    const device = await ownedDevice();
    const v5 = await connectDevice(port, device);
    expect(v5.connected).toBe(true);
    await v5.endAsync();
    const v4 = await connectDevice(port, device, { protocolVersion: 4 });
    expect(v4.connected).toBe(true);
    await v4.endAsync();
  });

  it('refuses a username other than the CN with CONNACK not authorized (0x87 in MQTT 5, 5 in 3.1.1)', async () => {
    const device = await ownedDevice();
    const refused = () => metric(gw, 'mqtt_connects_refused_total');
    const before = await refused();
    expect((await connectError(port, device, { username: 'someone-else' })).code).toBe(0x87);
    expect((await connectError(port, device, { username: 'someone-else', protocolVersion: 4 })).code).toBe(5);
    expect((await refused()) - before).toBe(2);
  });

  it('takes a CONNECT without a username as the certificate CN (MQTT 5 and 3.1.1), as the ACL then sees it', async () => {
    const device = await ownedDevice();
    for (const protocolVersion of [5, 4] as const) {
      const client = await connectDevice(port, device, { username: undefined, protocolVersion });
      expect(client.connected).toBe(true);
      const topic = `devices/${device.thingId}/commands/${protocolVersion}`;
      await client.subscribeAsync(topic, { qos: 1 });
      const own = nextMessage(client, topic);
      // the gateway publishes on the device's own topic: the subscription was let through the ACL
      await gw.testHooks.broker.publish({ topic, payload: Buffer.from('{"x":1}'), qos: 1 });
      expect((await own).payload.toString()).toBe('{"x":1}');
      await client.endAsync();
    }
    // without a username the client id must still be the CN
    const otherId = (await issueDevice(gw)).thingId;
    expect((await connectError(port, device, { clientId: otherId, username: undefined })).code).toBe(0x87);
  });

  it('refuses a client id other than the CN', async () => {
    const device = await ownedDevice();
    const otherId = (await issueDevice(gw)).thingId;
    expect((await connectError(port, device, { clientId: otherId, username: otherId })).code).toBe(0x87);
  });

  it('fails the TLS handshake for a self-signed certificate and for an expired one', async () => {
    const device = await ownedDevice();
    const { keyPem, certPem } = await selfSigned(device.thingId);
    const tlsRefused = () => metric(gw, 'mqtt_tls_handshakes_refused_total');
    const handshakesRefused = await tlsRefused();
    const refused = await tlsOutcome(port, certPem, keyPem, device.caPem);
    expect(refused).not.toBe('open');
    expect(refused).toMatch(/alert|closed|reset|ECONNRESET/i);
    const expired = await issueDevice(gw, { days: 0 });
    expect(await tlsOutcome(port, expired.certPem, expired.keyPem, expired.caPem)).toMatch(/expired|alert|closed|reset/i);
    await waitFor(async () => (await tlsRefused()) - handshakesRefused === 2, 5000, 'both refusals counted');
    // the control: the enrolled certificate passes the same handshake
    expect(await tlsOutcome(port, device.certPem, device.keyPem, device.caPem)).toBe('open');
  });
});

describe('ACL: only devices/{clientId}/', () => {
  it('MQTT 5: own topics work; a foreign subscription gets SUBACK 0x87 and a foreign publish PUBACK 0x87', async () => {
    const device = await ownedDevice();
    const foreign = await ownedDevice();
    const client = await connectDevice(port, device);
    expect(await subackCodes(client, [`devices/${device.thingId}/echo`, `devices/${foreign.thingId}/telemetry`, '#'])).toEqual([1, 0x87, 0x87]);
    const echo = nextMessage(client, `devices/${device.thingId}/echo`);
    await client.publishAsync(`devices/${device.thingId}/echo`, 'hello', { qos: 1 });
    expect((await echo).payload.toString()).toBe('hello');
    expect(await pubackCode(client, `devices/${foreign.thingId}/telemetry`, '{}')).toBe(0x87);
    // gateway-owned topics under its own prefix are not publishable by the device either
    expect(await pubackCode(client, `devices/${device.thingId}/lifecycle`, '{}')).toBe(0x87);
    expect(await pubackCode(client, `devices/${device.thingId}/telemetry`, '{"a":1}')).toBe(0);
    expect(client.connected).toBe(true);
    await client.endAsync();
  });

  it('MQTT 3.1.1: a foreign publish closes the connection', async () => {
    const device = await ownedDevice();
    const client = await connectDevice(port, device, { protocolVersion: 4 });
    expect(await subackCodes(client, `devices/${device.thingId}/x`, 0)).toEqual([0]);
    expect(await subackCodes(client, 'devices/other/x', 0)).toEqual([0x80]);
    const gone = closed(client);
    client.publish('devices/other/x', 'nope', { qos: 1 });
    await gone;
    expect(client.connected).toBe(false);
    client.end(true);
  });
});

describe('limits', () => {
  it('refuses packets over 256 KiB: the connection is closed', async () => {
    const device = await ownedDevice();
    const v4 = await connectDevice(port, device, { protocolVersion: 4 });
    const gone = closed(v4);
    v4.publish(`devices/${device.thingId}/telemetry`, Buffer.alloc(300 * 1024), { qos: 1 });
    await gone;
    expect(v4.connected).toBe(false);
    v4.end(true);
  });
});

describe('device topics and tenant endpoints', () => {
  it('tracks connectivity with lifecycle messages, heartbeat and 404 for other accounts', async () => {
    const device = await ownedDevice();
    const client = await connectDevice(port, device);
    await waitFor(async () => (await gw.http.get(`/api/v1/things/${device.thingId}/connectivity`, { token: account.viewer })).body.connected, 10_000, 'connected');
    // retained lifecycle message: a subscriber that comes later still gets it (on its own prefix)
    await client.subscribeAsync(`devices/${device.thingId}/lifecycle`);
    const life = await nextMessage(client, `devices/${device.thingId}/lifecycle`);
    expect(JSON.parse(life.payload.toString())).toMatchObject({ state: 'connected', protocolVersion: 5 });
    const before = (await gw.http.get(`/api/v1/things/${device.thingId}/connectivity`, { token: account.viewer })).body.lastSeen;
    await new Promise((r) => setTimeout(r, 20));
    await client.publishAsync(`devices/${device.thingId}/heartbeat`, '', { qos: 1 });
    await waitFor(async () => (await gw.http.get(`/api/v1/things/${device.thingId}/connectivity`, { token: account.viewer })).body.lastSeen > before, 10_000, 'last seen advanced');
    expectProblem(await gw.http.get(`/api/v1/things/${device.thingId}/connectivity`, { token: other.viewer }), 404);
    await client.endAsync();
    const res = await waitFor(async () => {
      const r = await gw.http.get(`/api/v1/things/${device.thingId}/connectivity`, { token: account.viewer });
      return r.body.connected === false ? r : undefined;
    }, 10_000, 'disconnected');
    expect(res.body.disconnectedAt).toBeTruthy();
    const events = await gw.db.sql`select type, account_id from domain_events where actor_id = ${device.thingId} and type like 'device.%' order by seq`;
    expect(events.map((e) => e.type)).toEqual(['device.connected', 'device.disconnected']);
    expect(events[0].account_id).toBe(account.id);
  });

  it('a read right after CONNACK sees the device connected (this node writes its pending connects first)', async () => {
    const device = await ownedDevice();
    const client = await connectDevice(port, device);
    expect((await gw.http.get(`/api/v1/things/${device.thingId}/connectivity`, { token: account.viewer })).body.connected).toBe(true);
    await client.endAsync();
  });

  it('records a burst of connects in batches, and quick reconnects of one device in their order', async () => {
    // ten owned devices at once: each gets its connectivity row and one device.connected with its account
    const devices = await Promise.all(Array.from({ length: 10 }, () => ownedDevice()));
    const clients = await Promise.all(devices.map((d) => connectDevice(port, d)));
    const ids = devices.map((d) => d.thingId);
    await waitFor(async () => (await gw.db.sql`select 1 from device_connectivity where thing_id = any(${ids}) and connected`).length === 10, 10_000, 'all connected');
    // the rows and the events of a batch are written one after the other: wait for the events too
    const connectedEvents = await waitFor(async () => {
      const rows = await gw.db.sql<{ actor_id: string; account_id: string; payload: { thingId: string; protocolVersion: number } }[]>`
        select actor_id, account_id, payload from domain_events where actor_id = any(${ids}) and type = 'device.connected'`;
      return rows.length >= 10 ? rows : undefined;
    }, 10_000, 'ten device.connected events');
    expect(connectedEvents.map((e) => e.actor_id).sort()).toEqual([...ids].sort());
    for (const e of connectedEvents) expect(e).toMatchObject({ account_id: account.id, payload: { thingId: e.actor_id, protocolVersion: 5 } });
    await Promise.all(clients.map((c) => c.endAsync()));

    // one device connects and disconnects three times in a row, without waiting for the bookkeeping:
    // the last session stands, and the events come in the order the broker saw them
    const device = devices[0];
    await waitFor(async () => (await gw.db.sql`select connected from device_connectivity where thing_id = ${device.thingId}`)[0]?.connected === false, 10_000, 'first session ended');
    for (let i = 0; i < 3; i++) {
      const c = await connectDevice(port, device);
      if (i < 2) await c.endAsync();
      else clients[0] = c;
    }
    const events = () => gw.db.sql<{ type: string }[]>`select type from domain_events where actor_id = ${device.thingId} and type like 'device.%' order by seq`;
    await waitFor(async () => (await events()).length === 7, 10_000, 'seven events');
    expect((await events()).map((e) => e.type)).toEqual(['device.connected', 'device.disconnected', 'device.connected', 'device.disconnected', 'device.connected', 'device.disconnected', 'device.connected']);
    expect((await gw.http.get(`/api/v1/things/${device.thingId}/connectivity`, { token: account.viewer })).body.connected).toBe(true);
    await clients[0].subscribeAsync(`devices/${device.thingId}/lifecycle`);
    const life = await nextMessage(clients[0], `devices/${device.thingId}/lifecycle`);
    expect(JSON.parse(life.payload.toString())).toMatchObject({ state: 'connected' });
    await clients[0].endAsync();
  });

  it('keeps the latest telemetry per key and streams it live over WebSocket', async () => {
    const device = await ownedDevice();
    const client = await connectDevice(port, device);
    const ws = new WebSocket(`${gw.httpUrl.replace('http', 'ws')}/api/v1/things/${device.thingId}/telemetry/stream`, { headers: { authorization: `Bearer ${account.viewer}` } });
    const messages: any[] = [];
    ws.on('message', (m) => messages.push(JSON.parse(m.toString())));
    await waitFor(() => messages.some((m) => m.type === 'subscribed'), 10_000, 'stream subscribed');
    await client.publishAsync(`devices/${device.thingId}/telemetry`, JSON.stringify({ temp: 21.5, hum: 40 }), { qos: 1 });
    await client.publishAsync(`devices/${device.thingId}/telemetry`, JSON.stringify({ temp: 22 }), { qos: 1 });
    await waitFor(() => messages.filter((m) => m.telemetry).length === 2, 10_000, 'two streamed messages');
    expect(messages.filter((m) => m.telemetry).map((m) => m.telemetry)).toEqual([{ temp: 21.5, hum: 40 }, { temp: 22 }]);
    ws.close();
    const metrics = await (await fetch(`${gw.httpUrl}/metrics`)).text();
    const metric = (name: string) => Number(new RegExp(`^${name} (\\S+)$`, 'm').exec(metrics)?.[1]);
    expect(metric('mqtt_messages_received_total')).toBeGreaterThanOrEqual(2);
    expect(metric('mqtt_connected_clients')).toBeGreaterThanOrEqual(1);
    expect(metric('mqtt_connects_total')).toBeGreaterThanOrEqual(1);
    // each QoS 1 publish waited for a batch of its own (the second was sent after the first's PUBACK)
    expect(metric('broker_ingest_batches_total')).toBeGreaterThanOrEqual(2);
    expect(metric('broker_ingest_batch_messages_total')).toBeGreaterThanOrEqual(2);
    const latest = await gw.http.get(`/api/v1/things/${device.thingId}/telemetry`, { token: account.viewer });
    expect(latest.status).toBe(200);
    expect(latest.body.telemetry).toEqual({ temp: 22, hum: 40 });
    // other accounts cannot open the stream
    const foreign = new WebSocket(`${gw.httpUrl.replace('http', 'ws')}/api/v1/things/${device.thingId}/telemetry/stream`, { headers: { authorization: `Bearer ${other.viewer}` } });
    const status = await new Promise<number>((resolve) => foreign.on('unexpected-response', (_req, res) => resolve(res.statusCode ?? 0)));
    expect(status).toBe(404);

    // a browser sends its token as subprotocols (it cannot set headers); the server picks 'bearer'
    const browser = new WebSocket(`${gw.httpUrl.replace('http', 'ws')}/api/v1/things/${device.thingId}/telemetry/stream`, ['bearer', account.viewer]);
    const browserMessages: any[] = [];
    browser.on('message', (m) => browserMessages.push(JSON.parse(m.toString())));
    await waitFor(() => browserMessages.some((m) => m.type === 'subscribed'), 10_000, 'browser stream subscribed');
    expect(browser.protocol).toBe('bearer');
    await client.publishAsync(`devices/${device.thingId}/telemetry`, JSON.stringify({ temp: 23 }), { qos: 1 });
    await waitFor(() => browserMessages.some((m) => m.telemetry?.temp === 23), 10_000, 'browser got telemetry');
    browser.close();
    const badToken = new WebSocket(`${gw.httpUrl.replace('http', 'ws')}/api/v1/things/${device.thingId}/telemetry/stream`, ['bearer', 'not.a.jwt']);
    expect(await new Promise<number>((resolve) => badToken.on('unexpected-response', (_req, res) => resolve(res.statusCode ?? 0)))).toBe(401);
    const noToken = new WebSocket(`${gw.httpUrl.replace('http', 'ws')}/api/v1/things/${device.thingId}/telemetry/stream`);
    expect(await new Promise<number>((resolve) => noToken.on('unexpected-response', (_req, res) => resolve(res.statusCode ?? 0)))).toBe(401);
    await client.endAsync();
  });

  it('stores reported state with a version and delivers desired state, also on reconnect', async () => {
    const device = await ownedDevice();
    let client = await connectDevice(port, device);
    await client.publishAsync(`devices/${device.thingId}/twin/reported`, JSON.stringify({ firmware: '1.0' }), { qos: 1 });
    await client.publishAsync(`devices/${device.thingId}/twin/reported`, JSON.stringify({ firmware: '1.1' }), { qos: 1 });
    await waitFor(async () => (await gw.http.get(`/api/v1/things/${device.thingId}/twin`, { token: account.viewer })).body.reported.version === 2, 10_000, 'reported v2');
    const twin = await gw.http.get(`/api/v1/things/${device.thingId}/twin`, { token: account.viewer });
    expect(twin.body.reported.state).toEqual({ firmware: '1.1' });

    await client.subscribeAsync(`devices/${device.thingId}/twin/desired`, { qos: 1 });
    const delivered = nextMessage(client, `devices/${device.thingId}/twin/desired`);
    const set = await gw.http.put(`/api/v1/things/${device.thingId}/twin/desired`, { desired: { interval: 10 } }, { token: account.operator });
    expect(set.status).toBe(200);
    expect(set.body.version).toBe(1);
    expect(JSON.parse((await delivered).payload.toString())).toEqual({ version: 1, desired: { interval: 10 } });
    expectProblem(await gw.http.put(`/api/v1/things/${device.thingId}/twin/desired`, { desired: { interval: 5 } }, { token: account.viewer }), 403);
    expectProblem(await gw.http.put(`/api/v1/things/${device.thingId}/twin/desired`, { desired: { interval: 5 }, ifVersion: 7 }, { token: account.operator }), 409);
    expectProblem(await gw.http.put(`/api/v1/things/${device.thingId}/twin/desired`, { desired: 'x' }, { token: account.operator }), 400);
    expectProblem(await gw.http.put(`/api/v1/things/${device.thingId}/twin/desired`, { desired: {} }, { token: other.operator }), 404);
    await client.endAsync();

    const second = await gw.http.put(`/api/v1/things/${device.thingId}/twin/desired`, { desired: { interval: 30 }, ifVersion: 1 }, { token: account.operator });
    expect(second.body).toMatchObject({ version: 2 });
    client = await connectDevice(port, device);
    const again = nextMessage(client, `devices/${device.thingId}/twin/desired`);
    await client.subscribeAsync(`devices/${device.thingId}/twin/desired`, { qos: 1 });
    expect(JSON.parse((await again).payload.toString())).toEqual({ version: 2, desired: { interval: 30 } });
    await client.endAsync();
  });

  it('sends commands as MQTT 5 requests and answers with the device reply, 504 on timeout, 409 when offline', async () => {
    const device = await ownedDevice();
    expectProblem(await gw.http.post(`/api/v1/things/${device.thingId}/commands`, { name: 'reboot' }, { token: account.operator }), 409);
    const client = await connectDevice(port, device);
    await client.subscribeAsync(`devices/${device.thingId}/commands`, { qos: 1 });
    await waitFor(async () => (await gw.http.get(`/api/v1/things/${device.thingId}/connectivity`, { token: account.viewer })).body.connected, 10_000, 'connected');
    client.on('message', (topic, payload, packet) => {
      if (topic !== `devices/${device.thingId}/commands`) return;
      const request = JSON.parse(payload.toString());
      if (request.name === 'ignore') return;
      const { responseTopic, correlationData } = packet.properties ?? {};
      client.publish(responseTopic!, JSON.stringify({ ok: true, echo: request.payload }), { qos: 1, properties: { correlationData } });
    });
    const res = await gw.http.post(`/api/v1/things/${device.thingId}/commands`, { name: 'blink', payload: { times: 3 } }, { token: account.operator });
    expect(res.status).toBe(200);
    expect(res.body).toMatchObject({ status: 'completed', response: { ok: true, echo: { times: 3 } } });
    const timeout = expectProblem(await gw.http.post(`/api/v1/things/${device.thingId}/commands`, { name: 'ignore', timeoutMs: 300 }, { token: account.operator }), 504);
    expect(timeout.detail).toMatch(/did not answer/);
    expectProblem(await gw.http.post(`/api/v1/things/${device.thingId}/commands`, { name: 'blink', extra: 1 }, { token: account.operator }), 400);
    await client.endAsync();
  });
});

describe('revocation and the management interface', () => {
  it('DELETE thing disconnects the device (DISCONNECT 0x98) before answering and refuses its reconnect at once', async () => {
    const device = await ownedDevice();
    const client = await connectDevice(port, device);
    await waitFor(() => gw.testHooks.broker.isConnected(device.thingId), 5000, 'registered');
    const reason = new Promise<number | undefined>((resolve) => client.once('disconnect', (p) => resolve(p.reasonCode)));
    const revoked = await revokeDevice(gw, account, device.thingId);
    expect(revoked.disconnected).toBe(true);
    expect(gw.testHooks.broker.isConnected(device.thingId)).toBe(false);
    expect(await reason).toBe(0x98);
    // refused at the TLS layer (CRL) and, should that pass, by authenticate (revoked serial)
    expect(await tlsOutcome(port, device.certPem, device.keyPem, device.caPem)).toMatch(/revoked|alert|closed|reset/i);
    // the management interface finds it connected nowhere
    const platform = await gw.token({ realm: 'platform', sub: 'ops', roles: ['platform-admin'] });
    expectProblem(await gw.http.delete(`/platform/v1/broker/sessions/${device.thingId}`, { token: platform }), 404);
  });

  it('the management interface disconnects by thingId: 204, then 404 when connected nowhere; platform roles only', async () => {
    const device = await ownedDevice();
    const client = await connectDevice(port, device);
    await waitFor(() => gw.testHooks.broker.isConnected(device.thingId), 5000, 'registered');
    const platform = await gw.token({ realm: 'platform', sub: 'ops', roles: ['platform-admin'] });
    expectProblem(await gw.http.delete(`/platform/v1/broker/sessions/${device.thingId}`, { token: account.admin }), 403);
    const gone = closed(client);
    expect((await gw.http.delete(`/platform/v1/broker/sessions/${device.thingId}`, { token: platform })).status).toBe(204);
    await gone;
    expectProblem(await gw.http.delete(`/platform/v1/broker/sessions/${device.thingId}`, { token: platform }), 404);
    client.end(true);
  });
});
