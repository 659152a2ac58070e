import net from 'node:net';
import { Duplex } from 'node:stream';
import tls from 'node:tls';
import { createRequire } from 'node:module';
import WebSocket from 'ws';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import mqttPacket from 'mqtt-packet';
import { startTestGateway, type TestGateway } from '../helpers/gateway.js';
import { createAccount, type TestAccount } from '../helpers/accounts.js';
import { createClaimGroup, enrollDevice, type EnrolledDevice } from '../helpers/devices.js';
import { waitFor } from '../helpers/wait.js';
import { connectDevice, metric, nextMessage } from './fixtures.js';

let gw: TestGateway;
let account: TestAccount;
let devices: EnrolledDevice[];

beforeAll(async () => {
  gw = await startTestGateway();
  account = await createAccount(gw);
  const claimSecret = (await createClaimGroup(gw, account)).sharedSecret;
  devices = await Promise.all([0, 1].map(() => enrollDevice(gw, account, { claimSecret })));
});
afterAll(async () => gw?.close());

const v5 = { protocolVersion: 5 } as const;
const encode = (packet: Record<string, unknown>) => mqttPacket.generate(packet as unknown as mqttPacket.Packet, v5);
const received = () => metric(gw, 'mqtt_messages_received_total');
const laned = () => gw.testHooks.broker.fastLaneTaken();
/** the thing's latest telemetry, as the tenant route reads it (the buffered batch written first) */
const latestTelemetry = async <T = Record<string, unknown>>(thingId: string): Promise<T> =>
  (await gw.http.get(`/api/v1/things/${thingId}/telemetry`, { token: account.viewer })).body.telemetry;
/** Aedes' client of a device connected here (the fast lane works on its socket and parser) */
const aedesClient = <T>(thingId: string) => gw.testHooks.broker.aedesClient(thingId) as unknown as T;

/** A raw TLS socket with the device's certificate, so the test decides how the bytes fall into TLS records; `packets` collects what the broker sends. */
async function rawSocket(d: EnrolledDevice) {
  const socket = tls.connect({ host: '127.0.0.1', port: gw.mqttPort!, key: d.keyPem, cert: d.certPem, ca: d.caPem, servername: 'localhost' });
  socket.setNoDelay(true);
  const packets: mqttPacket.Packet[] = [];
  const parser = mqttPacket.parser(v5);
  parser.on('packet', (p) => packets.push(p));
  socket.on('data', (b) => parser.parse(b));
  await new Promise<void>((resolve, reject) => socket.once('secureConnect', resolve).once('error', reject));
  return { socket, packets };
}

/** A device connected (CONNECT/CONNACK) on a raw TLS socket. */
async function rawDevice(d: EnrolledDevice, keepalive = 60) {
  const { socket, packets } = await rawSocket(d);
  socket.write(encode({ cmd: 'connect', protocolVersion: 5, clientId: d.thingId, username: d.thingId, clean: true, keepalive }));
  await waitFor(() => packets.some((p) => p.cmd === 'connack'), 5000, 'CONNACK');
  return { socket, packets };
}

const nextTick = () => new Promise((r) => setTimeout(r, 5));

describe('fast lane (device publishes decoded in front of Aedes)', () => {
  it('acknowledges and stores publishes split across TLS records, packed several to a record, and mixed with packets it leaves to Aedes', async () => {
    const d = devices[0];
    const { socket, packets } = await rawDevice(d);
    const topic = `devices/${d.thingId}/telemetry`;
    const before = await received();
    const lanedBefore = laned();
    const stream: Buffer[] = [];
    for (let i = 1; i <= 40; i++) {
      const payload = JSON.stringify({ seq: i, [`k${i % 3}`]: i });
      // every 10th with an MQTT 5 property (Aedes' path), every 7th at QoS 0, the rest plain QoS 1
      const properties = i % 10 === 0 ? { contentType: 'application/json' } : undefined;
      stream.push(encode({ cmd: 'publish', topic, payload, qos: i % 7 === 0 ? 0 : 1, messageId: i, retain: false, dup: false, ...(properties ? { properties } : {}) }));
    }
    // 1-10 in one record; 11-20 in records of odd sizes (cut in the header, the topic, the payload);
    // 21-40 one per record
    socket.write(Buffer.concat(stream.slice(0, 10)));
    await nextTick();
    const middle = Buffer.concat(stream.slice(10, 20));
    let offset = 0;
    for (const size of [1, 2, 5, 30, 3, 200, 17, 1]) {
      socket.write(middle.subarray(offset, offset + size));
      offset += size;
      await nextTick();
    }
    socket.write(middle.subarray(offset));
    for (const packet of stream.slice(20)) {
      await nextTick();
      socket.write(packet);
    }

    const qos1 = Array.from({ length: 40 }, (_, k) => k + 1).filter((i) => i % 7 !== 0);
    await waitFor(() => packets.filter((p) => p.cmd === 'puback').length >= qos1.length, 10_000, 'PUBACKs');
    const acks = packets.filter((p): p is mqttPacket.IPubackPacket => p.cmd === 'puback');
    expect(acks.map((a) => a.messageId)).toEqual(qos1);
    expect(acks.every((a) => (a.reasonCode ?? 0) === 0)).toBe(true);
    expect(await received() - before).toBe(40);
    // the four with a property and those cut across records went through Aedes
    const onLane = laned() - lanedBefore;
    expect(onLane).toBeGreaterThanOrEqual(20);
    expect(onLane).toBeLessThanOrEqual(30);

    const stored = await waitFor(async () => {
      const telemetry = await latestTelemetry<Record<string, number>>(d.thingId);
      return telemetry.seq === 40 ? telemetry : undefined;
    }, 10_000, 'latest telemetry');
    // merged in order: the last message's values win
    expect(stored).toEqual({ seq: 40, k0: 39, k1: 40, k2: 38 });
    socket.destroy();
  });

  it('reads every connection\'s records into one shared buffer, and copies what it leaves to Aedes before the next record overwrites it', async () => {
    const [a, b] = devices;
    const A = await rawDevice(a);
    const B = await rawDevice(b);
    const conn = (thingId: string) => aedesClient<{ conn: tls.TLSSocket }>(thingId).conn;
    const onreadBuffer = (conn: tls.TLSSocket) => {
      const slot = Object.getOwnPropertySymbols(conn).find((s) => s.description === 'kBuffer')!;
      return (conn as unknown as Record<symbol, unknown>)[slot];
    };
    const shared = onreadBuffer(conn(a.thingId));
    expect(Buffer.isBuffer(shared)).toBe(true);
    expect(onreadBuffer(conn(b.thingId))).toBe(shared);

    // A: a lane publish and the first bytes of one with a property (Aedes' path) in one record
    const topicA = `devices/${a.thingId}/telemetry`;
    const withProperty = encode({ cmd: 'publish', topic: topicA, payload: '{"a":2,"pad":"aaaaaaaaaaaaaaaa"}', qos: 1, messageId: 2, properties: { contentType: 'application/json' } });
    A.socket.write(Buffer.concat([encode({ cmd: 'publish', topic: topicA, payload: '{"a":1}', qos: 1, messageId: 1 }), withProperty.subarray(0, 20)]));
    await nextTick();
    // B's records go through the same buffer meanwhile
    const topicB = `devices/${b.thingId}/telemetry`;
    for (let i = 1; i <= 20; i++) B.socket.write(encode({ cmd: 'publish', topic: topicB, payload: JSON.stringify({ b: i, pad: 'z'.repeat(40) }), qos: 1, messageId: i }));
    await waitFor(() => B.packets.filter((p) => p.cmd === 'puback').length === 20, 10_000, "B's PUBACKs");
    A.socket.write(withProperty.subarray(20));
    await waitFor(() => A.packets.filter((p) => p.cmd === 'puback').length === 2, 10_000, "A's PUBACKs");
    expect(A.packets.filter((p): p is mqttPacket.IPubackPacket => p.cmd === 'puback').map((p) => [p.messageId, p.reasonCode ?? 0])).toEqual([[1, 0], [2, 0]]);

    expect(await latestTelemetry(a.thingId)).toMatchObject({ a: 2, pad: 'aaaaaaaaaaaaaaaa' });
    expect(await latestTelemetry(b.thingId)).toMatchObject({ b: 20 });
    A.socket.destroy();
    B.socket.destroy();
  });

  it('tells a device\'s topics apart within one record: telemetry, reported state, heartbeat, and an own topic of the same length', async () => {
    const d = devices[0];
    const { socket, packets } = await rawDevice(d);
    const prefix = `devices/${d.thingId}`;
    const lanedBefore = laned();
    socket.write(Buffer.concat([
      encode({ cmd: 'publish', topic: `${prefix}/telemetry`, payload: '{"t":1}', qos: 1, messageId: 1 }),
      encode({ cmd: 'publish', topic: `${prefix}/twin/reported`, payload: '{"fw":"2.0"}', qos: 1, messageId: 2 }),
      encode({ cmd: 'publish', topic: `${prefix}/telemetry`, payload: '{"t":2}', qos: 1, messageId: 3 }),
      encode({ cmd: 'publish', topic: `${prefix}/heartbeat`, payload: 'x', qos: 1, messageId: 4 }),
      // same length as telemetry, last byte differs: the device's own topic, not telemetry (Aedes' path)
      encode({ cmd: 'publish', topic: `${prefix}/telemetrz`, payload: '{"t":99}', qos: 1, messageId: 5 }),
      encode({ cmd: 'publish', topic: `${prefix}/telemetry`, payload: '{"t":3,"u":1}', qos: 1, messageId: 6 }),
    ]));
    await waitFor(() => packets.filter((p) => p.cmd === 'puback').length >= 6, 5000, 'PUBACKs');
    expect(packets.filter((p): p is mqttPacket.IPubackPacket => p.cmd === 'puback').map((a) => [a.messageId, a.reasonCode ?? 0]))
      .toEqual([[1, 0], [2, 0], [3, 0], [4, 0], [5, 0], [6, 0]]);
    // the four before the other topic on the lane; it and what follows it in the record go to Aedes
    expect(laned() - lanedBefore).toBe(4);
    const latest = await waitFor(async () => {
      const telemetry = await latestTelemetry<Record<string, number>>(d.thingId);
      return telemetry.t === 3 ? telemetry : undefined;
    }, 10_000, 'latest telemetry');
    expect(latest).toMatchObject({ t: 3, u: 1 });
    const reported = await waitFor(async () => {
      const [row] = await gw.db.sql<{ reported: Record<string, string> }[]>`select reported from device_twins where thing_id = ${d.thingId}`;
      return row?.reported;
    }, 5000, 'reported state');
    expect(reported).toEqual({ fw: '2.0' });
    socket.destroy();
  });

  it('writes PUBACKs in order once their messages are stored, whatever Aedes answers in between, within a record and across records', async () => {
    const d = devices[0];
    const { socket, packets } = await rawDevice(d);
    const topic = `devices/${d.thingId}/telemetry`;
    const publish = (messageId: number) => encode({ cmd: 'publish', topic, payload: `{"m":${messageId}}`, qos: 1, messageId });
    const subscribe = (messageId: number) => encode({ cmd: 'subscribe', messageId, subscriptions: [{ topic: `devices/${d.thingId}/commands`, qos: 1 }] });
    // one record: two publishes (the lane) and a SUBSCRIBE (Aedes)
    socket.write(Buffer.concat([publish(1), publish(2), subscribe(3)]));
    // then one record each, back to back
    for (const packet of [publish(4), publish(5), publish(6), subscribe(7), publish(8)]) socket.write(packet);
    await waitFor(() => packets.filter((p) => p.cmd === 'puback' || p.cmd === 'suback').length >= 8, 5000, 'PUBACKs and SUBACKs');
    // (a SUBACK does not wait for the database: it may come before the PUBACKs of earlier publishes)
    const answered = (cmd: string) => packets.filter((p) => p.cmd === cmd).map((p) => (p as { messageId: number }).messageId);
    expect(answered('puback')).toEqual([1, 2, 4, 5, 6, 8]);
    expect(answered('suback')).toEqual([3, 7]);
    socket.destroy();
  });

  it('writes the PUBACKs of a device with one message in flight straight to the TLS handle; what Aedes writes meanwhile, and the close, wait for them', async () => {
    const d = devices[0];
    const { socket, packets } = await rawDevice(d);
    const conn = aedesClient<{ conn: tls.TLSSocket }>(d.thingId).conn;
    let streamWrites = 0;
    const write = conn.write;
    conn.write = function counted(this: tls.TLSSocket, ...args: unknown[]) {
      streamWrites += 1;
      return (write as (...a: unknown[]) => boolean).apply(this, args);
    } as tls.TLSSocket['write'];
    const topic = `devices/${d.thingId}/telemetry`;
    const publish = (messageId: number) => encode({ cmd: 'publish', topic, payload: `{"m":${messageId}}`, qos: 1, messageId });
    const answers = () => packets.filter((p) => ['puback', 'suback', 'pingresp'].includes(p.cmd)).map((p) => (p.cmd === 'pingresp' ? 'pingresp' : `${p.cmd} ${(p as { messageId: number }).messageId}`));
    // publish, wait for its PUBACK, publish (the first PUBACK of the process goes through the stream: it shows the lane Node's write request)
    for (let i = 1; i <= 20; i++) {
      socket.write(publish(i));
      await waitFor(() => answers().includes(`puback ${i}`), 5000, `PUBACK ${i}`);
    }
    expect(streamWrites).toBeLessThanOrEqual(1);
    // a publish and a PINGREQ in one record: Aedes writes its PINGRESP (through the stream), maybe
    // while the lane's PUBACK write is in flight (TLS takes one write at a time; without the wait
    // Node aborts the process); likewise a SUBACK. PUBACKs wait for the database, so the PINGRESP
    // and SUBACK may come first
    socket.write(Buffer.concat([publish(21), encode({ cmd: 'pingreq' })]));
    socket.write(Buffer.concat([publish(22), encode({ cmd: 'subscribe', messageId: 23, subscriptions: [{ topic: `devices/${d.thingId}/commands`, qos: 1 }] })]));
    await waitFor(() => answers().length >= 24, 5000, 'PUBACKs, PINGRESP and SUBACK');
    socket.write(publish(24));
    await waitFor(() => answers().length >= 25, 5000, 'PUBACK 24');
    expect(answers().slice(20).filter((a) => a.startsWith('puback'))).toEqual(['puback 21', 'puback 22', 'puback 24']);
    expect(answers().slice(20).filter((a) => !a.startsWith('puback')).sort()).toEqual(['pingresp', 'suback 23']);
    // a publish and a DISCONNECT in one record: the PUBACK is written (once stored) before the connection closes
    const closed = new Promise((r) => socket.once('close', r));
    socket.write(Buffer.concat([publish(25), encode({ cmd: 'disconnect' })]));
    await closed;
    expect(answers().slice(25)).toEqual(['puback 25']);
    expect(await waitFor(async () => {
      const t = await latestTelemetry<{ m: number }>(d.thingId);
      return t.m === 25 ? t : undefined;
    }, 10_000, 'latest telemetry')).toMatchObject({ m: 25 });
  });

  it('refuses a bad payload on the lane with 0x99 and goes on with the next packet of the same record', async () => {
    const d = devices[1];
    const { socket, packets } = await rawDevice(d);
    const topic = `devices/${d.thingId}/telemetry`;
    const notJson = () => metric(gw, 'broker_payloads_rejected_total', { reason: 'not_json' });
    const rejected = await notJson();
    socket.write(Buffer.concat([
      encode({ cmd: 'publish', topic, payload: '{"a":1}', qos: 1, messageId: 1 }),
      encode({ cmd: 'publish', topic, payload: 'not json', qos: 1, messageId: 2 }),
      encode({ cmd: 'publish', topic, payload: '{"a":3}', qos: 1, messageId: 3 }),
    ]));
    await waitFor(() => packets.filter((p) => p.cmd === 'puback').length >= 3, 5000, 'PUBACKs');
    const acks = packets.filter((p): p is mqttPacket.IPubackPacket => p.cmd === 'puback');
    expect(acks.map((a) => [a.messageId, a.reasonCode ?? 0])).toEqual([[1, 0], [2, 0x99], [3, 0]]);
    expect(await notJson()).toBe(rejected + 1);
    socket.destroy();
  });

  it('answers the records of one read with one write: their PUBACKs in one TLS record, in order', async () => {
    const d = devices[1];
    // TLS over a JS stream in front of a TCP socket held corked: the publishes, one TLS record each,
    // leave in one TCP write, so the broker reads them together
    const tcp = net.connect(gw.mqttPort!, '127.0.0.1');
    tcp.setNoDelay(true);
    await new Promise<void>((resolve, reject) => tcp.once('connect', resolve).once('error', reject));
    const wire = new Duplex({
      read() {},
      // done at once: a corked socket calls back only at uncork, and the stream would hold the rest until then
      write: (chunk, _encoding, done) => {
        tcp.write(chunk);
        done();
      },
    });
    tcp.on('data', (b) => wire.push(b));
    const socket = tls.connect({ socket: wire, key: d.keyPem, cert: d.certPem, ca: d.caPem, servername: 'localhost' });
    await new Promise<void>((resolve, reject) => socket.once('secureConnect', resolve).once('error', reject));
    const packets: mqttPacket.Packet[] = [];
    const records: number[] = []; // PUBACKs per TLS record received
    const parser = mqttPacket.parser(v5);
    parser.on('packet', (p) => packets.push(p));
    socket.on('data', (b: Buffer) => {
      const before = packets.filter((p) => p.cmd === 'puback').length;
      parser.parse(b);
      const acks = packets.filter((p) => p.cmd === 'puback').length - before;
      if (acks > 0) records.push(acks);
    });
    socket.write(encode({ cmd: 'connect', protocolVersion: 5, clientId: d.thingId, username: d.thingId, clean: true, keepalive: 60 }));
    await waitFor(() => packets.some((p) => p.cmd === 'connack'), 5000, 'CONNACK');

    const topic = `devices/${d.thingId}/telemetry`;
    const lanedBefore = laned();
    tcp.cork();
    for (let i = 1; i <= 10; i++) socket.write(encode({ cmd: 'publish', topic, payload: i === 4 ? 'not json' : `{"n":${i}}`, qos: 1, messageId: i }));
    await new Promise((r) => setTimeout(r, 50)); // all ten records encrypted into the corked socket
    tcp.uncork();
    await waitFor(() => packets.filter((p) => p.cmd === 'puback').length >= 10, 5000, 'PUBACKs');
    expect(laned() - lanedBefore).toBe(9); // the refused one is answered on the lane, not counted as taken
    const acks = packets.filter((p): p is mqttPacket.IPubackPacket => p.cmd === 'puback');
    expect(acks.map((a) => [a.messageId, a.reasonCode ?? 0])).toEqual(Array.from({ length: 10 }, (_, k) => [k + 1, k + 1 === 4 ? 0x99 : 0]));
    expect(records).toEqual([10]);
    socket.destroy();
    tcp.destroy();
  });

  it('routes through Aedes as soon as someone subscribes to the topic', async () => {
    const d = devices[0];
    const client = await connectDevice(gw.mqttPort!, d);
    const topic = `devices/${d.thingId}/telemetry`;
    const lanedBefore = laned();
    await client.publishAsync(topic, '{"n":1}', { qos: 1 }); // nobody listens: the lane takes it
    expect(laned()).toBe(lanedBefore + 1);
    await client.subscribeAsync(topic, { qos: 1 });
    const echoed = nextMessage(client, topic);
    await client.publishAsync(topic, '{"n":2}', { qos: 1 });
    expect(JSON.parse((await echoed).payload.toString())).toEqual({ n: 2 });
    expect(laned()).toBe(lanedBefore + 1);
    // and back on the lane once nobody listens any more
    await client.unsubscribeAsync(topic);
    await client.publishAsync(topic, '{"n":3}', { qos: 1 });
    expect(laned()).toBe(lanedBefore + 2);

    // and the gateway's own subscription (the live telemetry stream) sees a device that nobody else follows
    const other = await connectDevice(gw.mqttPort!, devices[1]);
    const live = new WebSocket(`${gw.httpUrl.replace('http', 'ws')}/api/v1/things/${devices[1].thingId}/telemetry/stream`, { headers: { authorization: `Bearer ${account.viewer}` } });
    const frames: { type?: string; telemetry?: unknown }[] = [];
    live.on('message', (m) => frames.push(JSON.parse(m.toString())));
    await waitFor(() => frames.some((f) => f.type === 'subscribed'), 10_000, 'stream subscribed');
    await other.publishAsync(`devices/${devices[1].thingId}/telemetry`, '{"live":true}', { qos: 0 });
    const seen = () => frames.filter((f) => f.telemetry !== undefined).map((f) => f.telemetry);
    await waitFor(() => seen().length > 0, 5000, 'live telemetry');
    expect(seen()).toEqual([{ live: true }]);
    live.close();
    await Promise.all([client.endAsync(), other.endAsync()]);
  });
});

describe('keep-alive of devices whose publishes take the fast lane', () => {
  const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

  it('keeps a device that publishes on the lane only (no PINGREQ) connected past 1.5 x keepalive, and disconnects it once it falls silent', async () => {
    const d = devices[1];
    // keepalive 1 s: Aedes disconnects after 1.5 s without a packet
    const { socket } = await rawDevice(d, 1);
    let closedAt: number | undefined;
    socket.once('close', () => { closedAt = Date.now(); });
    const topic = `devices/${d.thingId}/telemetry`;
    const lanedBefore = laned();
    // 3.2 s of QoS 0 telemetry every 200 ms (more than twice the keep-alive timeout), nothing else
    let lastWrite = 0;
    for (let i = 0; i < 16; i++) {
      await sleep(200);
      socket.write(encode({ cmd: 'publish', topic, payload: JSON.stringify({ i }), qos: 0 }));
      lastWrite = Date.now();
    }
    await waitFor(() => laned() - lanedBefore === 16, 5000, 'the publishes taken');
    expect(closedAt).toBeUndefined();
    expect(gw.testHooks.broker.isConnected(d.thingId)).toBe(true);
    await waitFor(() => closedAt, 10_000, 'the silent device disconnected');
    // not before 1.5 x keepalive after its last packet (the broker received it after it was written)
    expect(closedAt! - lastWrite).toBeGreaterThanOrEqual(1_450);
    await waitFor(() => !gw.testHooks.broker.isConnected(d.thingId), 5000, 'the session ended');
  });

  it('keeps a device whose only packet comes just before 1.5 x keepalive, between two sweeps of the keep-alive timers', async () => {
    const d = devices[0];
    // keepalive 2 s: Aedes' timer is armed at CONNECT and fires 3,001 ms later without a packet
    const { socket, packets } = await rawDevice(d, 2);
    const connackAt = Date.now();
    let closedAt: number | undefined;
    socket.once('close', () => { closedAt = Date.now(); });
    expect(packets.some((p) => p.cmd === 'connack')).toBe(true);
    // one publish 150 ms before the timer fires: the sweep that would refresh the timer comes
    // 250 ms after it (no other lane traffic here), so the timer itself must see the packet
    await sleep(2850);
    const lanedBefore = laned();
    socket.write(encode({ cmd: 'publish', topic: `devices/${d.thingId}/telemetry`, payload: '{"late":1}', qos: 0 }));
    await waitFor(() => laned() > lanedBefore, 2000, 'the publish taken');
    await sleep(Math.max(0, connackAt + 3500 - Date.now()));
    expect(closedAt).toBeUndefined();
    expect(gw.testHooks.broker.isConnected(d.thingId)).toBe(true);
    // and silence from then on ends it
    await waitFor(() => closedAt, 10_000, 'the silent device disconnected');
  });

  it('disconnects a device that never publishes after 1.5 x keepalive', async () => {
    const d = devices[0];
    const connectedAt = Date.now();
    const { socket } = await rawDevice(d, 1);
    let closedAt: number | undefined;
    socket.once('close', () => { closedAt = Date.now(); });
    await waitFor(() => closedAt, 10_000, 'the silent device disconnected');
    expect(closedAt! - connectedAt).toBeGreaterThanOrEqual(1_450);
  });
});

describe('idle-timeout bookkeeping per TLS record (issue 19)', () => {
  it("is skipped while the socket has no timeout (the handshake's cleared timer dropped), and a timeout set later is refreshed by traffic as usual", async () => {
    const d = devices[0];
    const { socket } = await rawDevice(d);
    const conn = aedesClient<{ conn: tls.TLSSocket }>(d.thingId).conn;
    const symbol = (of: object, description: string) => Object.getOwnPropertySymbols(of).filter((s) => s.description === description);
    const slot = symbol(conn, 'timeout');
    expect(slot).toHaveLength(1);
    const own = conn as unknown as Record<symbol, unknown>;
    expect(own[slot[0]]).toBeNull();
    const unrefTimer = () => (conn as unknown as { _unrefTimer: unknown })._unrefTimer;
    const nodeUpdate = (net.Socket.prototype as unknown as { _unrefTimer: unknown })._unrefTimer;
    expect(typeof nodeUpdate).toBe('function');
    expect(unrefTimer()).not.toBe(nodeUpdate);

    // a timeout set later: Node's hook is back, traffic refreshes it, silence fires it
    let timedOut = false;
    conn.once('timeout', () => { timedOut = true; });
    conn.setTimeout(400);
    expect(unrefTimer()).toBe(nodeUpdate);
    expect(own[slot[0]]).not.toBeNull();
    const topic = `devices/${d.thingId}/telemetry`;
    for (let i = 0; i < 8; i++) {
      socket.write(encode({ cmd: 'publish', topic, payload: JSON.stringify({ i }), qos: 0 }));
      await new Promise((r) => setTimeout(r, 100));
    }
    expect(timedOut).toBe(false);
    await waitFor(() => timedOut, 5000, 'the socket timeout');
    conn.setTimeout(0);
    socket.destroy();
  });
});

describe('TLS session resumption', () => {
  /** A TLS connection of `d` (optionally resuming `session`); its session ticket and whether it resumed. */
  async function handshake(d: EnrolledDevice, session?: Buffer): Promise<{ session?: Buffer; reused: boolean }> {
    const socket = tls.connect({ host: '127.0.0.1', port: gw.mqttPort!, key: d.keyPem, cert: d.certPem, ca: d.caPem, servername: 'localhost', session });
    let ticket: Buffer | undefined;
    socket.on('session', (t: Buffer) => { ticket = t; });
    await new Promise<void>((resolve, reject) => socket.once('secureConnect', resolve).once('error', reject));
    // TLS 1.3 tickets come after the handshake, before any data: the CONNACK is behind them
    socket.write(encode({ cmd: 'connect', protocolVersion: 5, clientId: d.thingId, username: d.thingId, clean: true, keepalive: 60 }));
    await new Promise((resolve) => socket.once('data', resolve));
    const result = { session: ticket, reused: socket.isSessionReused() };
    socket.destroy();
    return result;
  }

  it('a reconnecting device resumes its session with its ticket, also after the broker loaded a new CRL', async () => {
    const first = await handshake(devices[0]);
    expect(first.reused).toBe(false);
    expect(first.session).toBeDefined();
    expect((await handshake(devices[0], first.session)).reused).toBe(true);
    await gw.testHooks.broker.reloadCrl(); // a new secure context
    expect((await handshake(devices[0], first.session)).reused).toBe(true);
  });
});

describe('per-connection parser list (issue 19, memory per session)', () => {
  it('keeps unparsed bytes in a plain BufferList, and still parses packets cut anywhere across TLS records', async () => {
    const d = devices[1];
    const { socket, packets } = await rawSocket(d);
    // CONNECT, then SUBSCRIBE and a retained PUBLISH (both Aedes' path), each cut in three records
    const connect = encode({ cmd: 'connect', protocolVersion: 5, clientId: d.thingId, username: d.thingId, clean: true, keepalive: 60 });
    const topic = `devices/${d.thingId}/state`;
    const rest = Buffer.concat([
      encode({ cmd: 'subscribe', messageId: 7, subscriptions: [{ topic, qos: 1 }] }),
      encode({ cmd: 'publish', topic, payload: '{"on":true}', qos: 1, messageId: 8, retain: true, dup: false }),
    ]);
    for (const bytes of [connect, rest]) {
      for (const [from, to] of [[0, 1], [1, Math.floor(bytes.length / 2)], [Math.floor(bytes.length / 2), bytes.length]]) {
        socket.write(bytes.subarray(from, to));
        await nextTick();
      }
      if (bytes === connect) {
        await waitFor(() => packets.some((p) => p.cmd === 'connack'), 5000, 'CONNACK');
        const client = aedesClient<{ _parser: { _list: object } }>(d.thingId);
        const list = client._parser._list as { constructor: { name: string }; _readableState?: unknown };
        expect(list.constructor.name).toBe('BufferList');
        expect(list._readableState).toBeUndefined();
      }
    }
    await waitFor(() => packets.some((p) => p.cmd === 'suback') && packets.some((p) => p.cmd === 'puback'), 5000, 'SUBACK and PUBACK');
    // the device's own subscription delivers its retained message back
    await waitFor(() => packets.some((p) => p.cmd === 'publish' && p.topic === topic), 5000, 'the published message');
    socket.destroy();
  });
});

describe("mqtt-packet's number cache (issue 19, memory per session)", () => {
  it('is not built: the broker writes CONNACK, SUBACK and messages without it', async () => {
    const d = devices[0];
    const device = await connectDevice(gw.mqttPort!, d);
    const topic = `devices/${d.thingId}/state`;
    await device.subscribeAsync(topic, { qos: 1 });
    const message = nextMessage(device, topic);
    await device.publishAsync(topic, '{"n":1}', { qos: 1 });
    expect((await message).payload.toString()).toBe('{"n":1}');
    const numbers = createRequire(createRequire(import.meta.url).resolve('mqtt-packet'))('./numbers.js') as { cache: Record<number, Buffer> };
    expect(Object.keys(numbers.cache)).toHaveLength(0);
    await device.endAsync();
  });
});
