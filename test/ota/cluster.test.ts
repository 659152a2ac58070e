import type { ChildProcess } from 'node:child_process';
import crypto from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { MqttClient } from 'mqtt';
import { freePort } from '../../src/db/embedded.js';
import { createTestDatabase, type TestDatabase } from '../helpers/db.js';
import type { HttpClient, TestGateway } from '../helpers/gateway.js';
import { createAccount, type TestAccount } from '../helpers/accounts.js';
import { waitFor } from '../helpers/wait.js';
import { spawnGateway } from '../helpers/process.js';
import { REDIS_URL, redisReachable } from '../helpers/redis.js';
import { actionsOf, control, createFilter, createRollout, enrollFleet, rolloutOf, simulatedDevice } from './helpers.js';

// Two gateway processes on one Postgres and one Redis: a rollout controlled through either node
// reaches devices on both; each node handles its own devices' reports (once).
const reachable = await redisReachable();
if (!reachable) console.warn(`OTA cluster test skipped: Redis at ${REDIS_URL} is not reachable`);

interface Node { proc: ChildProcess; http: HttpClient; mqttPort: number }
let db: TestDatabase;
const nodes: Node[] = [];
const clients: MqttClient[] = [];

const asTestGateway = (node: Node) => ({
  http: node.http, gw: { services: {} }, token: async (input: object) => (await node.http.post('/dev/token', input)).body.access_token,
}) as unknown as TestGateway;

beforeAll(async () => {
  if (!reachable) return;
  const redisUrl = `${REDIS_URL.replace(/\/\d*$/, '')}/${1 + crypto.randomInt(15)}`;
  db = await createTestDatabase();
  const [portA, portB] = [await freePort(), await freePort()];
  for (const [name, port] of [['a', portA], ['b', portB]] as const) {
    const mqttPort = await freePort();
    const { proc, http } = await spawnGateway({
      DATABASE_URL: db.url, REDIS_URL: redisUrl, NODE_ID: `ota-${name}-${crypto.randomBytes(3).toString('hex')}`,
      HTTP_PORT: String(port), MQTT_PORT: String(mqttPort), PUBLIC_BASE_URL: `http://127.0.0.1:${portA}`, JOBS: 'false',
    });
    nodes.push({ proc, http, mqttPort });
  }
}, 120_000);

afterAll(async () => {
  await Promise.all(clients.map((c) => c.endAsync(true).catch(() => {})));
  for (const n of nodes) {
    n.proc.kill('SIGTERM');
    await new Promise((r) => (n.proc.exitCode !== null ? r(null) : n.proc.once('exit', r)));
  }
  await db?.drop();
});

async function reportsApplied(node: Node): Promise<number> {
  const m = /ota_status_reports_total\{result="applied"\} (\d+)/.exec((await node.http.get('/metrics')).text);
  return m ? Number(m[1]) : 0;
}

describe.skipIf(!reachable)('OTA over two gateway nodes', () => {
  let account: TestAccount;

  it('devices on both nodes are updated group by group; controls go through either node; every report is handled once', async () => {
    const [a, b] = nodes;
    const gwA = asTestGateway(a);
    const gwB = asTestGateway(b);
    account = await createAccount(gwA);
    const platform = await gwA.token({ realm: 'platform', sub: 'platform-root', roles: ['platform-admin'] });
    expect((await a.http.put(`/platform/v1/accounts/${account.id}/capabilities/manage_ota_rollouts`, undefined, { token: platform })).status).toBe(200);
    const fleet = await enrollFleet(gwA, account, 6, 'CLUSTER-1');
    const applied: string[] = [];
    for (const [i, d] of fleet.entries()) clients.push(await simulatedDevice((i % 2 ? b : a).mqttPort, d, { fails: () => false, onApplied: (id) => applied.push(id) }));

    const filter = await createFilter(gwA, account, { model: 'CLUSTER-1' });
    const rollout = await createRollout(gwB, account, filter.id, { groups: 3, success: 100, error: 0 });
    expect((await control(gwA, account, rollout.id, 'start')).status).toBe(200);
    await waitFor(async () => (await rolloutOf(gwB, account, rollout.id)).state === 'FINISHED', 30_000, 'rollout finished', 200);
    await waitFor(() => applied.length === 6, 30_000, 'every device applied');
    expect(new Set(applied).size).toBe(6);
    await waitFor(async () => (await actionsOf(gwA, account, rollout.id, '&status=succeeded')).length === 6, 30_000, 'all succeeded');
    // 5 reports per device, each taken by the node its device is connected to, none by both
    await waitFor(async () => (await reportsApplied(a)) + (await reportsApplied(b)) === 30, 30_000, 'reports counted');
    expect(await reportsApplied(a)).toBe(15);
    expect(await reportsApplied(b)).toBe(15);
  }, 120_000);
});
