/**
 * bench:rollout: devices updated per second in an OTA rollout over DEVICES devices, against the
 * broker's plain message rate with the same devices on the same connections, in one run.
 *
 * The gateway runs in a child process (embedded PostgreSQL); DEVICES devices (certificates from
 * its device CA, things of one account inserted in bulk) connect over MQTT 5 with mutual TLS
 * (mqtt.js, this process) and take part in OTA as the simulator's devices do (src/sim/ota.ts):
 * on an update action they publish 5 QoS 1 reports (received, downloading 50 %, 100 %,
 * installing, succeeded). A round of each kind, alternating:
 *
 * - rollout: POST start of a new READY rollout (two groups of 50 %, success threshold 95 %) until
 *   every action is `succeeded` in the database: devices updated per second;
 * - baseline: every device publishes 5 QoS 1 heartbeats one after the other (a publish/PUBACK
 *   round trip each, the same count as its OTA reports, nothing for the gateway to store) until
 *   the last PUBACK: devices per second, and messages per second.
 *
 *   npm run bench:rollout                      (DEVICES=5000, ROUNDS=3)
 *   DEVICES=500 ROUNDS=1 npm run bench:rollout -- --no-write
 */
import crypto from 'node:crypto';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { parseArgs } from 'node:util';
import type { MqttClient } from 'mqtt';
import postgres from 'postgres';
import { connectMany, freePort, issueDevices, startGatewayProcess } from './lib/brokers.js';
import { writeBenchmarkSection } from './lib/report.js';
import { joinOta } from '../src/sim/ota.js';
import { gatewayClient, must } from '../src/clients/api.js';

const { values: args } = parseArgs({ options: { 'no-write': { type: 'boolean', default: false } } });
const DEVICES = Number(process.env.DEVICES ?? 5000);
const ROUNDS = Number(process.env.ROUNDS ?? 3);
const REPORTS = 5;
const TIMEOUT_MS = 600_000;
const MODEL = 'BENCH-OTA';

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const median = (xs: number[]) => { const s = [...xs].sort((a, b) => a - b); return s.length % 2 ? s[(s.length - 1) >> 1] : (s[s.length / 2 - 1] + s[s.length / 2]) / 2; };

async function main() {
  const load = [os.loadavg()[0]];
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'bench-rollout-'));
  const pgPort = await freePort();
  console.log('starting gateway (embedded PostgreSQL)...');
  const gw = await startGatewayProcess(dir, { EMBEDDED_PG_PORT: String(pgPort), JOBS: 'false' });
  const sql = postgres(`postgres://gateway:gateway@127.0.0.1:${pgPort}/gateway`, { max: 2, onnotice: () => {} });
  let clients: MqttClient[] = [];
  const rollouts: number[] = [];
  const baselines: number[] = [];
  try {
    // the gateway's API through the typed client generated from its document (src/clients/api.ts); /metrics is not in the document: plain fetch
    const anon = gatewayClient(gw.httpUrl);
    const platform = gatewayClient(gw.httpUrl, { bearer: (await must(anon.POST('/dev/token', { body: { realm: 'platform', sub: 'bench', roles: ['platform-admin'] } }))).access_token });
    const accountId = crypto.randomUUID();
    await must(platform.POST('/platform/v1/accounts', { body: { id: accountId, name: 'bench rollout' } }));
    await must(platform.PUT('/platform/v1/accounts/{accountId}/capabilities/{capability}', { params: { path: { accountId, capability: 'manage_ota_rollouts' } } }));
    const operator = gatewayClient(gw.httpUrl, { bearer: (await must(anon.POST('/dev/token', { body: { realm: `acc-${accountId}`, sub: 'bench', roles: ['operator'] } }))).access_token });

    console.log(`issuing ${DEVICES} device certificates...`);
    const creds = await issueDevices(gw.certsDir, DEVICES);
    const ids = creds.map((c) => c.thingId);
    // fixture rows: the rollout reads things through the registry's filters
    await sql`
      insert into things (id, account_id, manufacturer, model, serial, lifecycle_state, created_at)
      select id, ${accountId}, 'Bench', ${MODEL}, 'B-' || n, 'ACTIVATED', now() from unnest(${ids}::uuid[]) with ordinality as t(id, n)`;
    const ca = fs.readFileSync(path.join(gw.certsDir, 'ca-bundle.pem'), 'utf8');
    console.log(`connecting ${DEVICES} devices (MQTT 5, mutual TLS)...`);
    const t0 = performance.now();
    clients = await connectMany(gw.mqttPort, creds, ca, 50);
    console.log(`connected in ${((performance.now() - t0) / 1000).toFixed(1)} s`);
    let updated = 0;
    await Promise.all(clients.map((c, i) => joinOta(c, ids[i], { fails: () => false, onApplied: () => void updated++ })));
    const filter = await must(operator.POST('/api/v1/ota/target-filters', { body: { name: 'bench', query: { model: MODEL } } }));

    const rollout = async () => {
      const r = await must(operator.POST('/api/v1/ota/rollouts', { body: {
        name: 'bench', filter_id: filter.id, software: { version: '2.0.0', url: 'https://updates.example.com/fw.bin', sha256: 'b'.repeat(64), size: 4_194_304 },
        groups: [50, 50], success_threshold: 95, error_threshold: 5,
      } }));
      const start = performance.now();
      await must(operator.POST('/api/v1/ota/rollouts/{rolloutId}/start', { params: { path: { rolloutId: r.id } } }));
      const deadline = Date.now() + TIMEOUT_MS;
      let seconds: number | undefined;
      for (;;) {
        const [{ n, state }] = await sql<{ n: number; state: string }[]>`
          select (select count(*)::int from ota_actions where rollout_id = ${r.id} and status = 'succeeded') as n, (select state from ota_rollouts where id = ${r.id}) as state`;
        if (n === DEVICES) seconds ??= (performance.now() - start) / 1000;
        // the time is taken when every device succeeded; the next round waits for the rollout to finish too
        if (seconds !== undefined && state === 'FINISHED') break;
        if (Date.now() > deadline) throw new Error(`rollout ${state}: ${n} of ${DEVICES} succeeded`);
        await sleep(20);
      }
      return DEVICES / seconds;
    };
    const baseline = async () => {
      const start = performance.now();
      await Promise.all(clients.map(async (c, i) => {
        for (let k = 0; k < REPORTS; k++) await c.publishAsync(`devices/${ids[i]}/heartbeat`, '', { qos: 1 });
      }));
      return DEVICES / ((performance.now() - start) / 1000);
    };

    // warm-up (JIT, first rows), not counted
    await baseline();
    await rollout();
    for (let r = 1; r <= ROUNDS; r++) {
      for (const kind of r % 2 ? ['rollout', 'baseline'] : ['baseline', 'rollout']) {
        const rate = kind === 'rollout' ? await rollout() : await baseline();
        (kind === 'rollout' ? rollouts : baselines).push(rate);
        console.log(`round ${r} ${kind.padEnd(8)} ${rate.toFixed(0).padStart(6)} devices/s`);
      }
    }
    if (updated !== DEVICES * (ROUNDS + 1)) throw new Error(`devices applied ${updated} updates, not ${DEVICES * (ROUNDS + 1)}`);
    const metrics = await (await fetch(`${gw.httpUrl}/metrics`)).text();
    console.log(metrics.split('\n').filter((l) => l.startsWith('ota_status_reports_total')).join('\n'));
  } finally {
    await Promise.all(clients.map((c) => c.endAsync(true).catch(() => {})));
    await sql.end();
    await gw.stop();
    fs.rmSync(dir, { recursive: true, force: true });
  }
  load.push(os.loadavg()[0]);
  const mR = median(rollouts);
  const mB = median(baselines);
  const summary = [
    `rollout  (median): ${mR.toFixed(0)} devices updated/s (${(mR * REPORTS).toFixed(0)} status reports/s written)`,
    `baseline (median): ${mB.toFixed(0)} devices/s doing ${REPORTS} QoS 1 publish/PUBACK round trips (${(mB * REPORTS).toFixed(0)} messages/s)`,
    `ratio rollout/baseline: ${(mR / mB).toFixed(2)}`,
  ];
  console.log(`\nbench:rollout: ${DEVICES} devices, ${ROUNDS} rounds each, ${os.cpus().length} CPUs, load average ${load.map((l) => l.toFixed(1)).join(' -> ')}`);
  for (const line of summary) console.log(line);
  if (args['no-write']) return;
  const at = new Date().toISOString().slice(0, 16);
  writeBenchmarkSection(`## OTA rollouts (\`npm run bench:rollout\`)

Measured ${at}Z on ${os.cpus().length} cores, Node ${process.versions.node} (1-minute load average ${load[0].toFixed(1)} at the start, ${load[1].toFixed(1)} at the end):
the gateway in a child process (embedded PostgreSQL), ${DEVICES.toLocaleString('en')} devices connected over MQTT 5 with mutual TLS
from mqtt.js in the bench process, each acting as the simulator's devices do (\`src/sim/ota.ts\`: 5 QoS 1 reports per update).
A rollout round: a new rollout of all of them in two groups of 50 % (success threshold 95 %), from \`POST .../start\` until every
action is \`succeeded\` in the database (group 1 starts when 95 % of group 0 succeeded). The baseline, on the same connections:
every device makes 5 QoS 1 publish/PUBACK round trips (heartbeats: nothing for the gateway to store), one after the other.
${ROUNDS} rounds of each, alternating, after one warm-up round each; medians.

| | devices/s | messages/s |
|---|---|---|
| rollout (devices updated) | **${mR.toFixed(0)}** | ${(mR * (REPORTS + 1)).toFixed(0)} (1 update action + ${REPORTS} reports per device) |
| baseline (plain publish/PUBACK) | ${mB.toFixed(0)} | ${(mB * REPORTS).toFixed(0)} |
| ratio rollout/baseline | ${(mR / mB).toFixed(2)} | |

Rounds (devices/s): rollout ${rollouts.map((r) => r.toFixed(0)).join(', ')}; baseline ${baselines.map((r) => r.toFixed(0)).join(', ')}.
The bench's 5,000 MQTT clients share the 2 cores with the gateway and PostgreSQL (and other work on the machine
spreads the rounds), so both figures are floors; the ratio compares medians of the same run.
`);
}

main().then(() => process.exit(0), (err) => { console.error(err); process.exit(1); });
