import { execFileSync } from 'node:child_process';
import crypto from 'node:crypto';
import type { MqttClient } from 'mqtt';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { freePort } from '../../src/db/embedded.js';
import { CrashRig, exited } from '../helpers/crashRig.js';
import type { TestAccount } from '../helpers/accounts.js';
import type { TestGateway } from '../helpers/gateway.js';
import { enrollDevice, type EnrolledDevice } from '../helpers/devices.js';
import { waitFor } from '../helpers/wait.js';
import { connectDevice } from '../broker/fixtures.js';
import { createBridge, createRule, natsSink, rule, TestStream, type CloudEvent } from './helpers.js';

/**
 * kill -9 of the gateway while devices publish and the rule delivers, then a restart: every
 * message a device got a PUBACK for is stored (a PUBACK is written only once its message is
 * committed, docs/decisions.md "A PUBACK means stored") and delivered at least once, in order per
 * thing, from the rule's durable position; nothing else is delivered.
 */
const nats = await natsSink();
if (!nats) console.warn('no NATS on 127.0.0.1:4222 and no nats-server: the bridge crash test is skipped');
const NATS_URL = nats?.url ?? '';
let rig: CrashRig;
let stream: TestStream;
/** the same telemetry through a rule of format batch */
let batchStream: TestStream;
let mqttPort: number;

beforeAll(async () => {
  if (!nats) return;
  mqttPort = await freePort();
  rig = await CrashRig.create('bridges', { MQTT_PORT: String(mqttPort), BRIDGE_LEASE_SECONDS: '2' });
  stream = await TestStream.create(NATS_URL);
  batchStream = await TestStream.create(NATS_URL);
});
afterAll(async () => {
  await rig?.close();
  await stream?.close();
  await batchStream?.close();
  await nats?.close();
});

/** kill -9 of the gateway: tsx's node process running src/main.ts, and tsx itself (it runs the gateway as its child) */
function killTree(pid: number): void {
  let out = '';
  try { out = execFileSync('ps', ['-o', 'pid=', '--ppid', String(pid)]).toString(); } catch { /* no children: ps exits 1 */ }
  const children = out.split('\n').map((l) => Number(l.trim())).filter((n) => n > 0);
  for (const c of children) killTree(c);
  try { process.kill(pid, 'SIGKILL'); } catch { /* gone */ }
}

/** Publishes `{"seq":i}` at QoS 1, a few in flight, until the connection dies; `acked` gets each PUBACKed seq. */
function publishUntilDead(client: MqttClient, thingId: string, acked: number[]): Promise<void> {
  return new Promise((resolve) => {
    let seq = 0;
    let inFlight = 0;
    let dead = false;
    const pump = () => {
      while (!dead && inFlight < 8) {
        const i = seq++;
        inFlight++;
        client.publish(`devices/${thingId}/telemetry`, `{"seq":${i}}`, { qos: 1 }, (err) => {
          inFlight--;
          if (err) return;
          acked.push(i);
          setTimeout(pump, 2);
        });
      }
    };
    client.on('close', () => { dead = true; resolve(); });
    client.on('error', () => {});
    pump();
  });
}

it.skipIf(!nats)('every PUBACKed message is delivered at least once, in order per thing, across a kill -9 and restart (one event per message, and batches)', async () => {
  const child = await rig.start();
  const accountId = crypto.randomUUID();
  const platform = await rig.token('platform', 'root', ['platform-admin']);
  expect((await rig.http.post('/platform/v1/accounts', { id: accountId, name: 'crashy' }, { token: platform })).status).toBe(201);
  const op = await rig.token(`acc-${accountId}`, 'op', ['operator']);
  const account = { id: accountId, operator: op, admin: op, viewer: op } as TestAccount;
  const gw = { http: rig.http } as TestGateway;
  const ruleId = await createRule(gw, account, { from: 'devices/+/telemetry', bridge_id: await createBridge(gw, account, { type: 'nats', url: NATS_URL, subject_prefix: stream.prefix }) });
  const batchRuleId = await createRule(gw, account, { from: 'devices/+/telemetry', format: 'batch', bridge_id: await createBridge(gw, account, { type: 'nats', url: NATS_URL, subject_prefix: batchStream.prefix }) });
  const devices: EnrolledDevice[] = [await enrollDevice(gw, account), await enrollDevice(gw, account)];
  const acked = new Map(devices.map((d) => [d.thingId, [] as number[]]));
  const clients = await Promise.all(devices.map((d) => connectDevice(mqttPort, d, { reconnectPeriod: 0 })));
  const publishing = devices.map((d, i) => publishUntilDead(clients[i], d.thingId, acked.get(d.thingId)!));

  // mid-stream: the rule has delivered some and devices keep publishing
  await waitFor(async () => (await stream.count()) > 100, 20_000, 'deliveries under way');
  killTree(child.pid!);
  await exited(child);
  await Promise.all(publishing);
  const ackedTotal = [...acked.values()].reduce((n, a) => n + a.length, 0);
  expect(ackedTotal).toBeGreaterThan(100);

  await rig.start();
  await waitFor(async () => (await rule(gw, account, ruleId)).lag.messages === 0 && (await rule(gw, account, batchRuleId)).lag.messages === 0, 30_000, 'lag back to 0 after restart');

  const stored = new Map<string, number[]>();
  for (const d of devices) {
    const rows = await rig.db.sql<{ points: [number, { seq: number }][] }[]>`select points from telemetry_history where thing_id = ${d.thingId} order by tx`;
    stored.set(d.thingId, rows.flatMap((r) => r.points.map((p) => p[1].seq)));
  }
  const delivered = new Map<string, number[]>();
  for (const e of await stream.events()) delivered.set(e.subject, [...(delivered.get(e.subject) ?? []), e.data.seq as number]);
  const inBatches = new Map<string, number[]>();
  for (const m of await batchStream.raw()) {
    for (const e of JSON.parse(m.text) as CloudEvent[]) inBatches.set(e.subject, [...(inBatches.get(e.subject) ?? []), e.data.seq as number]);
  }

  for (const d of devices) {
    const got = delivered.get(d.thingId) ?? [];
    const kept = stored.get(d.thingId)!;
    const sent = acked.get(d.thingId)!;
    // every PUBACKed message stored: a PUBACK waits for the commit
    const lost = sent.filter((s) => !kept.includes(s));
    expect(lost).toEqual([]);
    // every stored message delivered, nothing else, and in the history's order (first deliveries; a
    // resent batch may repeat)
    expect(new Set(got)).toEqual(new Set(kept));
    const firsts = got.filter((s, i) => got.indexOf(s) === i);
    expect(firsts).toEqual(kept.filter((s, i) => kept.indexOf(s) === i));
    // the same through batches: a batch resent after the kill with other bounds is delivered again, never dropped as a repeat
    const batched = inBatches.get(d.thingId) ?? [];
    expect(new Set(batched)).toEqual(new Set(kept));
    expect(batched.filter((s, i) => batched.indexOf(s) === i)).toEqual(firsts);
    // the devices' own order: each device sends its messages in sequence, so what is stored and delivered is a run from 0
    expect(firsts).toEqual(Array.from({ length: firsts.length }, (_, i) => i));
    console.log(`thing ${d.thingId.slice(0, 8)}: ${sent.length} PUBACKed, ${kept.length} stored (${kept.length - sent.length} sent without a PUBACK before the kill), ${firsts.length} delivered (${got.length - firsts.length} again)`);
  }
}, 90_000);
