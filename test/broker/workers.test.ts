import crypto from 'node:crypto';
import http from 'node:http';
import tls from 'node:tls';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { MqttClient } from 'mqtt';
import WebSocket from 'ws';
import { freePort } from '../../src/db/embedded.js';
import { createTestDatabase, type TestDatabase } from '../helpers/db.js';
import type { TestGateway } from '../helpers/gateway.js';
import { createAccount, type TestAccount } from '../helpers/accounts.js';
import { enrollDevice, createClaimGroup, type EnrolledDevice } from '../helpers/devices.js';
import { waitFor } from '../helpers/wait.js';
import { spawnGateway, type GatewayProcess } from '../helpers/process.js';
import { closed, connectDevice, nextMessage } from './fixtures.js';

// One gateway node with BROKER_WORKERS=2 (src/multicore.ts): two worker processes share the HTTP and
// MQTT listeners; the primary hands connections round-robin. Messages between the workers' brokers
// go over IPC (src/broker/workerEmitter.ts), only to the worker that subscribed.

let db: TestDatabase;
let node: GatewayProcess;
let mqttPort: number;
let account: TestAccount;
let claimSecret: string;

/** What the shared helpers need of a gateway reached only over HTTP. */
const asTestGateway = (): TestGateway => ({
  http: node.http,
  gw: { services: {} },
  token: async (input: object) => (await node.http.post('/dev/token', input)).body.access_token,
}) as unknown as TestGateway;

/** The node (worker) holding a thing's MQTT session, from the connectivity rows. */
async function holder(thingId: string): Promise<string | undefined> {
  const [row] = await db.sql<{ node_id: string }[]>`select node_id from device_connectivity where thing_id = ${thingId} and connected`;
  return row?.node_id;
}

/**
 * HTTP requests over ONE kept-alive connection, so they are all served by the same worker
 * (whichever the primary handed it to): a call about a device on each worker then crosses
 * workers for one of them, whichever worker it is.
 */
function pinnedConnection() {
  const agent = new http.Agent({ keepAlive: true, maxSockets: 1 });
  const ports = new Set<number>();
  const request = (method: string, path: string, token: string, body?: unknown) => new Promise<{ status: number; body: any }>((resolve, reject) => {
    const req = http.request(`${node.http.baseUrl}${path}`, { method, agent, headers: { authorization: `Bearer ${token}`, ...(body ? { 'content-type': 'application/json' } : {}) } }, (res) => {
      ports.add(res.socket.localPort!);
      let text = '';
      res.setEncoding('utf8');
      res.on('data', (d) => (text += d));
      res.on('end', () => resolve({ status: res.statusCode!, body: text ? JSON.parse(text) : undefined }));
    });
    req.on('error', reject);
    req.end(body ? JSON.stringify(body) : undefined);
  });
  return { request, ports, close: () => agent.destroy() };
}

/** A device that answers every command with its own id and the command's name. */
async function answeringDevice(device: EnrolledDevice): Promise<MqttClient> {
  const client = await connectDevice(mqttPort, device);
  await client.subscribeAsync([`devices/${device.thingId}/commands`, `devices/${device.thingId}/twin/desired`], { qos: 1 });
  client.on('message', (topic, payload, packet) => {
    if (topic !== `devices/${device.thingId}/commands`) return;
    const reply = JSON.stringify({ from: device.thingId, got: JSON.parse(payload.toString()).name });
    client.publish(packet.properties!.responseTopic!, reply, { qos: 1, properties: { correlationData: packet.properties!.correlationData } });
  });
  return client;
}

beforeAll(async () => {
  db = await createTestDatabase();
  const httpPort = await freePort();
  mqttPort = await freePort();
  node = await spawnGateway({
    DATABASE_URL: db.url, HTTP_PORT: String(httpPort), MQTT_PORT: String(mqttPort), BROKER_WORKERS: '2',
    NODE_ID: `mc-${crypto.randomBytes(3).toString('hex')}`, JOBS: 'false',
  });
  // /readyz answers as soon as the first worker serves; the banner comes once both do
  await waitFor(() => node.output().includes('(2 worker processes)'), 60_000, 'both workers started');
  account = await createAccount(asTestGateway());
  claimSecret = (await createClaimGroup(asTestGateway(), account)).sharedSecret;
}, 120_000);

afterAll(async () => {
  if (node) {
    node.proc.kill('SIGTERM');
    const code = await node.exited;
    // (the node's last output names what ended it otherwise)
    expect(code, code === 0 ? undefined : node.output().slice(-4000)).toBe(0);
  }
  await db?.drop();
});

describe('a node with two worker processes (BROKER_WORKERS=2)', () => {
  let devices: EnrolledDevice[] = [];
  let clients: MqttClient[] = [];

  beforeAll(async () => {
    // connections alternate between the workers: connect until two devices sit on different ones
    const enrolled = await Promise.all([0, 1, 2, 3].map(() => enrollDevice(asTestGateway(), account, { claimSecret })));
    const byNode = new Map<string, { device: EnrolledDevice; client: MqttClient }>();
    for (const device of enrolled) {
      const client = await answeringDevice(device);
      let nodeId: string | undefined;
      await waitFor(async () => Boolean((nodeId = await holder(device.thingId))), 15_000, 'connectivity row');
      if (byNode.has(nodeId!)) await client.endAsync();
      else byNode.set(nodeId!, { device, client });
      if (byNode.size === 2) break;
    }
    expect(byNode.size).toBe(2);
    devices = [...byNode.values()].map((v) => v.device);
    clients = [...byNode.values()].map((v) => v.client);
  }, 60_000);

  afterAll(async () => {
    for (const c of clients) await c.endAsync().catch(() => {});
  });

  it('a command and a twin update sent over HTTP reach the device on the other worker', async () => {
    const pinned = pinnedConnection();
    try {
      for (const device of devices) {
        const res = await pinned.request('POST', `/api/v1/things/${device.thingId}/commands`, account.operator, { name: 'ping', timeoutMs: 10_000 });
        expect(res.status).toBe(200);
        expect(res.body.response).toEqual({ from: device.thingId, got: 'ping' });
      }
      for (const [i, device] of devices.entries()) {
        const desired = nextMessage(clients[i], `devices/${device.thingId}/twin/desired`);
        const res = await pinned.request('PUT', `/api/v1/things/${device.thingId}/twin/desired`, account.operator, { desired: { led: `on-${i}` } });
        expect(res.status).toBe(200);
        expect(JSON.parse((await desired).payload.toString())).toMatchObject({ desired: { led: `on-${i}` } });
      }
      // one connection served every call: one worker routed to the device on the other
      expect(pinned.ports.size).toBe(1);
    } finally {
      pinned.close();
    }
  });

  it('telemetry is ingested once, and reaches live streams opened on both workers', async () => {
    const [device] = devices;
    // two WebSocket connections in a row are handed to the two workers in turn
    const streams = [0, 1].map(() => new WebSocket(`${node.http.baseUrl.replace('http', 'ws')}/api/v1/things/${device.thingId}/telemetry/stream`, { headers: { authorization: `Bearer ${account.viewer}` } }));
    const received: any[][] = [[], []];
    streams.forEach((ws, i) => ws.on('message', (m) => received[i].push(JSON.parse(m.toString()))));
    await waitFor(() => received.every((r) => r.some((m) => m.type === 'subscribed')), 15_000, 'both streams subscribed');
    for (let n = 1; n <= 20; n++) await clients[0].publishAsync(`devices/${device.thingId}/telemetry`, JSON.stringify({ n }), { qos: 1 });
    for (const r of received) await waitFor(() => r.filter((m) => m.telemetry?.n !== undefined).length === 20, 15_000, '20 messages on each stream');
    for (const ws of streams) ws.close();
    // the stream subscribers are gone again: the fast lane takes these (nobody else listens)
    for (let n = 21; n <= 30; n++) await clients[0].publishAsync(`devices/${device.thingId}/telemetry`, JSON.stringify({ n }), { qos: 1 });
    const points = async () => (await node.http.get(`/api/v1/things/${device.thingId}/telemetry?key=n`, { token: account.viewer })).body.points?.length ?? 0;
    await waitFor(async () => (await points()) >= 30, 15_000, '30 history points');
    await new Promise((r) => setTimeout(r, 600)); // a second ingest batch (250 ms) would add duplicates
    expect(await points()).toBe(30);
  });

  it('a reconnect taken over on the other worker closes the old session and stays connected', async () => {
    const [device] = devices;
    const row = async () => (await db.sql<{ node_id: string; session_id: string }[]>`select node_id, session_id from device_connectivity where thing_id = ${device.thingId} and connected`)[0];
    const first = (await row())!;
    // new connections of the same device until one lands on the other worker: Aedes' takeover
    // notice ($SYS/+/new/clients) must cross workers to close the old session there
    let now = first;
    for (let i = 0; i < 6 && now.node_id === first.node_id; i++) {
      const previous = now.session_id;
      const gone = closed(clients[0]);
      clients[0] = await answeringDevice(device);
      await gone;
      // the new session's row (the old worker's disconnect, written apart, cannot undo it)
      await waitFor(async () => {
        const r = await row();
        if (r && r.session_id !== previous) now = r;
        return now.session_id !== previous;
      }, 15_000, 'the new session connected');
    }
    expect(now.node_id).not.toBe(first.node_id);
    expect((await node.http.get(`/api/v1/things/${device.thingId}/connectivity`, { token: account.viewer })).body.connected).toBe(true);
    const cmd = await node.http.post(`/api/v1/things/${device.thingId}/commands`, { name: 'again', timeoutMs: 10_000 }, { token: account.operator });
    expect(cmd.body.response).toEqual({ from: device.thingId, got: 'again' });
    await clients[0].endAsync();
    await waitFor(async () => !(await node.http.get(`/api/v1/things/${device.thingId}/connectivity`, { token: account.viewer })).body.connected, 15_000, 'disconnected');
  });

  it('a device resumes its TLS session on either worker (the node shares its ticket keys)', async () => {
    const device = devices[1];
    /** one TLS connection (no MQTT): was the session resumed, and the ticket the server sent */
    const open = (session?: Buffer) => new Promise<{ reused: boolean; ticket?: Buffer }>((resolve, reject) => {
      const socket = tls.connect({ host: '127.0.0.1', port: mqttPort, servername: 'localhost', cert: device.certPem, key: device.keyPem, ca: device.caPem, session });
      let ticket: Buffer | undefined;
      // TLS 1.3 sends the ticket after the handshake (a resumed session may get none)
      socket.on('session', (t: Buffer) => (ticket = t));
      socket.once('secureConnect', () => {
        const reused = socket.isSessionReused();
        setTimeout(() => {
          socket.destroy();
          resolve({ reused, ticket });
        }, 300);
      });
      socket.once('error', reject);
    });
    const { ticket } = await open();
    expect(ticket).toBeDefined();
    // consecutive connections are handed to the workers in turn: four of them reach both
    const reused = [];
    for (let i = 0; i < 4; i++) reused.push((await open(ticket)).reused);
    expect(reused).toEqual([true, true, true, true]);
  });

  it('/metrics counts the messages of both workers', async () => {
    const text = (await node.http.get('/metrics')).text;
    const received = Number(/^mqtt_messages_received_total (\d+)/m.exec(text)?.[1]);
    // 30 telemetry messages, the command replies and nothing twice
    expect(received).toBeGreaterThanOrEqual(30);
    expect(received).toBeLessThan(60);
  });
});
