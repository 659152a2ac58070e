/**
 * bench:telemetry: telemetry messages/s stored by the gateway with TELEMETRY_HISTORY on (every
 * message appended to telemetry_history, one row per key) against off (latest values only), in
 * one run, in alternating rounds. Two gateway processes (embedded PostgreSQL each), the same
 * DEVICES connected to each over MQTT 5 with mutual TLS (mqtt.js in this process).
 *
 * A round: every device publishes MESSAGES telemetry messages at QoS 0 as fast as it can
 * (`{temperature, humidity, seq}`); the round ends when the gateway's database holds the last
 * message of every device in device_telemetry_latest and, with history on, all DEVICES x MESSAGES
 * messages of the round in telemetry_history. Messages/s = messages of the
 * round / that time.
 *
 *   npm run bench:telemetry                (DEVICES=100, MESSAGES=3000, ROUNDS=5)
 *   DEVICES=20 MESSAGES=200 ROUNDS=2 npm run bench:telemetry
 *
 * Prints only (the lead copies the figures into docs/benchmarks.md).
 */
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import type { MqttClient } from 'mqtt';
import postgres from 'postgres';
import { connectMany, freePort, issueDevices, startGatewayProcess, type GatewayProcess } from './lib/brokers.js';

const DEVICES = Number(process.env.DEVICES ?? 100);
const MESSAGES = Number(process.env.MESSAGES ?? 3000);
const ROUNDS = Number(process.env.ROUNDS ?? 5);
const KEYS = 3;
const TIMEOUT_MS = 300_000;

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

interface Side { name: string; history: boolean; gw: GatewayProcess; sql: postgres.Sql; clients: MqttClient[]; ids: string[]; dir: string }

async function startSide(name: string, history: boolean): Promise<Side> {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), `bench-telemetry-${name}-`));
  const pgPort = await freePort();
  console.log(`starting gateway with TELEMETRY_HISTORY=${history} (embedded PostgreSQL)...`);
  const gw = await startGatewayProcess(dir, { TELEMETRY_HISTORY: String(history), EMBEDDED_PG_PORT: String(pgPort), JOBS: 'false' });
  const creds = await issueDevices(gw.certsDir, DEVICES);
  const ca = fs.readFileSync(path.join(gw.certsDir, 'ca-bundle.pem'), 'utf8');
  const clients = await connectMany(gw.mqttPort, creds, ca, 20);
  const sql = postgres(`postgres://gateway:gateway@127.0.0.1:${pgPort}/gateway`, { max: 2, onnotice: () => {} });
  return { name, history, gw, sql, clients, ids: creds.map((c) => c.thingId), dir };
}

/** One round on one side; messages stored per second. */
async function round(side: Side, r: number): Promise<number> {
  const base = r * 1_000_000;
  const last = base + MESSAGES - 1;
  const startedAt = new Date();
  const start = performance.now();
  await Promise.all(side.clients.map(async (client, d) => {
    const topic = `devices/${side.ids[d]}/telemetry`;
    for (let i = 0; i < MESSAGES; i++) {
      await client.publishAsync(topic, JSON.stringify({ temperature: 20 + (i % 10) / 10, humidity: 40 + (d % 20), seq: base + i }), { qos: 0 });
    }
  }));
  const deadline = Date.now() + TIMEOUT_MS;
  for (;;) {
    const [{ n }] = await side.sql<{ n: number }[]>`
      select count(*)::int as n from device_telemetry_latest where thing_id = any(${side.ids}) and (telemetry->>'seq')::bigint = ${last}`;
    if (n === DEVICES) break;
    if (Date.now() > deadline) throw new Error(`${side.name}: round ${r} not stored (${n}/${DEVICES} devices)`);
    await sleep(20);
  }
  if (side.history) {
    // written in the same batch as the latest values, right after them: done when every device's
    // newest history row ends with its last message (reads only those rows)
    for (;;) {
      const [{ n }] = await side.sql<{ n: number }[]>`
        select count(*)::int as n from (
          select distinct on (thing_id) points from telemetry_history
          where thing_id = any(${side.ids}) and first_at >= ${startedAt} order by thing_id, last_at desc
        ) r where (r.points -> -1 -> 1 ->> 'seq')::bigint = ${last}`;
      if (n === DEVICES) break;
      if (Date.now() > deadline) throw new Error(`${side.name}: round ${r} history not stored (${n}/${DEVICES} devices)`);
      await sleep(20);
    }
  }
  const rate = (DEVICES * MESSAGES) / ((performance.now() - start) / 1000);
  if (side.history) {
    // not timed: every message of the round is in the history
    const [{ n }] = await side.sql<{ n: number }[]>`
      select coalesce(sum(json_array_length(points)), 0)::int as n from telemetry_history where first_at >= ${startedAt}`;
    if (n !== DEVICES * MESSAGES) throw new Error(`${side.name}: round ${r} history holds ${n} of ${DEVICES * MESSAGES} messages`);
  }
  return rate;
}

const median = (xs: number[]) => { const s = [...xs].sort((a, b) => a - b); return s.length % 2 ? s[(s.length - 1) >> 1] : (s[s.length / 2 - 1] + s[s.length / 2]) / 2; };

async function main() {
  const on = await startSide('history-on', true);
  const off = await startSide('history-off', false);
  const results: Record<string, number[]> = { [on.name]: [], [off.name]: [] };
  try {
    // one warm-up round each (JIT, first partitions' pages), not counted
    await round(on, 0);
    await round(off, 0);
    for (let r = 1; r <= ROUNDS; r++) {
      // alternating order, so neither side always runs on a warmer machine
      for (const side of r % 2 ? [on, off] : [off, on]) {
        const rate = await round(side, r);
        results[side.name].push(rate);
        console.log(`round ${r} ${side.name.padEnd(11)} ${rate.toFixed(0).padStart(7)} messages/s stored`);
      }
    }
  } finally {
    for (const side of [on, off]) {
      await Promise.all(side.clients.map((c) => c.endAsync(true).catch(() => {})));
      await side.sql.end();
      await side.gw.stop();
      fs.rmSync(side.dir, { recursive: true, force: true });
    }
  }
  const mOn = median(results[on.name]);
  const mOff = median(results[off.name]);
  console.log(`\nbench:telemetry: ${DEVICES} devices x ${MESSAGES} messages (QoS 0, ${KEYS} keys) per round, ${ROUNDS} rounds each, ${os.cpus().length} CPUs`);
  console.log(`history on  (median): ${mOn.toFixed(0)} messages/s stored`);
  console.log(`history off (median): ${mOff.toFixed(0)} messages/s stored`);
  console.log(`ratio on/off: ${(mOn / mOff).toFixed(2)} (target >= 0.8)`);
}

main().then(() => process.exit(0), (err) => { console.error(err); process.exit(1); });
