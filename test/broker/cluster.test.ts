import type { ChildProcess } from 'node:child_process';
import crypto from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import WebSocket from 'ws';
import { freePort } from '../../src/db/embedded.js';
import { createTestDatabase, type TestDatabase } from '../helpers/db.js';
import { HttpClient, type TestGateway } from '../helpers/gateway.js';
import { createAccount, type TestAccount } from '../helpers/accounts.js';
import { enrollDevice, createClaimGroup, revokeDevice } from '../helpers/devices.js';
import { waitFor } from '../helpers/wait.js';
import { spawnGateway } from '../helpers/process.js';
import { closed, connectDevice, tlsOutcome } from './fixtures.js';
import { REDIS_URL, redisReachable } from '../helpers/redis.js';

// Two gateway processes on one Postgres and one Redis (cluster mode).
const REDIS = REDIS_URL;


const reachable = await redisReachable();
if (!reachable) console.warn(`cluster test skipped: Redis at ${REDIS} is not reachable`);

interface Node { name: string; proc: ChildProcess; http: HttpClient; mqttPort: number }

let db: TestDatabase;
let nodes: Node[] = [];
let redisUrl: string;

/** Both nodes share PUBLIC_BASE_URL (as behind a load balancer), so tokens of one are valid on the other. */
async function startNode(name: string, httpPort: number, publicBase: string): Promise<Node> {
  const mqttPort = await freePort();
  const { proc, http } = await spawnGateway({
    DATABASE_URL: db.url,
    REDIS_URL: redisUrl,
    NODE_ID: `${name}-${crypto.randomBytes(3).toString('hex')}`,
    HTTP_PORT: String(httpPort),
    MQTT_PORT: String(mqttPort),
    PUBLIC_BASE_URL: publicBase,
    JOBS: 'false',
  });
  return { name, proc, http, mqttPort };
}

/** What the shared helpers need of a gateway, for a node reached only over HTTP. */
function asTestGateway(node: Node): TestGateway {
  return {
    http: node.http,
    gw: { services: {} },
    token: async (input: object) => (await node.http.post('/dev/token', input)).body.access_token,
  } as unknown as TestGateway;
}

beforeAll(async () => {
  if (!reachable) return;
  // a database number of its own isolates this run's sessions and retained messages
  redisUrl = `${REDIS.replace(/\/\d*$/, '')}/${1 + crypto.randomInt(15)}`;
  db = await createTestDatabase();
  const [portA, portB] = [await freePort(), await freePort()];
  const publicBase = `http://127.0.0.1:${portA}`;
  nodes = [await startNode('a', portA, publicBase)];
  nodes.push(await startNode('b', portB, publicBase));
}, 120_000);

afterAll(async () => {
  for (const n of nodes) {
    n.proc.kill('SIGTERM');
    await new Promise((r) => (n.proc.exitCode !== null ? r(null) : n.proc.once('exit', r)));
  }
  await db?.drop();
});

describe.skipIf(!reachable)('two gateway processes, one Postgres, one Redis', () => {
  let account: TestAccount;
  let claimSecret: string;

  beforeAll(async () => {
    account = await createAccount(asTestGateway(nodes[0]));
    claimSecret = (await createClaimGroup(asTestGateway(nodes[0]), account)).sharedSecret;
  });

  it('a message from a device on node A reaches a subscriber on node B; a command sent through B reaches A', async () => {
    const [a, b] = nodes;
    const device = await enrollDevice(asTestGateway(a), account, { claimSecret });
    const client = await connectDevice(a.mqttPort, device);
    await client.subscribeAsync(`devices/${device.thingId}/commands`, { qos: 1 });
    client.on('message', (topic, payload, packet) => {
      if (topic !== `devices/${device.thingId}/commands`) return;
      client.publish(packet.properties!.responseTopic!, JSON.stringify({ node: 'a', got: JSON.parse(payload.toString()).name }), { qos: 1, properties: { correlationData: packet.properties!.correlationData } });
    });

    // the tenant's live telemetry stream is opened on node B
    const ws = new WebSocket(`${b.http.baseUrl.replace('http', 'ws')}/api/v1/things/${device.thingId}/telemetry/stream`, { headers: { authorization: `Bearer ${account.viewer}` } });
    const received: any[] = [];
    ws.on('message', (m) => received.push(JSON.parse(m.toString())));
    await waitFor(() => received.some((m) => m.type === 'subscribed'), 15_000, 'stream on B');
    await client.publishAsync(`devices/${device.thingId}/telemetry`, JSON.stringify({ rpm: 1200 }), { qos: 1 });
    await waitFor(() => received.some((m) => m.telemetry?.rpm === 1200), 15_000, 'telemetry from A on B');
    ws.close();

    await waitFor(async () => (await b.http.get(`/api/v1/things/${device.thingId}/connectivity`, { token: account.viewer })).body.connected, 15_000, 'connected, seen from B');
    const res = await b.http.post(`/api/v1/things/${device.thingId}/commands`, { name: 'ping', timeoutMs: 10_000 }, { token: account.operator });
    expect(res.status).toBe(200);
    expect(res.body.response).toEqual({ node: 'a', got: 'ping' });
    await client.endAsync();
  });

  it('revoking through node A disconnects the device on node B before the DELETE answers; no node lets it back', async () => {
    const [a, b] = nodes;
    const device = await enrollDevice(asTestGateway(a), account, { claimSecret });
    const client = await connectDevice(b.mqttPort, device);
    await waitFor(async () => (await a.http.get(`/api/v1/things/${device.thingId}/connectivity`, { token: account.viewer })).body.connected, 15_000, 'connected on B');
    const gone = closed(client);
    // `disconnected: true` comes from node B's reply, sent after B closed the device's socket
    const revoked = await revokeDevice(asTestGateway(a), account, device.thingId);
    expect(revoked.disconnected).toBe(true);
    await gone;
    expect(client.connected).toBe(false);
    for (const node of [a, b]) {
      expect(await tlsOutcome(node.mqttPort, device.certPem, device.keyPem, device.caPem)).not.toBe('open');
    }
    client.end(true);
  });
});
