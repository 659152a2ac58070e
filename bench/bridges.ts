/**
 * bench:bridges: the gateway's telemetry throughput and CPU per message with one data bridge rule
 * forwarding all telemetry to NATS JetStream, against the same gateway, fleet and load with the rule
 * disabled, in alternating rounds of one run (bench:mqtt's shapes: 50 and 300 devices, 48-byte and
 * 1 KiB payloads, QoS 0 and QoS 1 with 20 in flight per device), with the rule in each of its formats (FORMATS:
 * `event`, one CloudEvent per NATS message; `batch`, a JSON array of one thing's consecutive events per message).
 *
 * The load generator is Debian's `mosquitto_pub -l` (one process per device, MQTT 5, mutual TLS),
 * as in bench:mqtt; the devices are real things of one account (enrolled over HTTP), so the rule
 * reads them. A round ends when the gateway counted every message (`mqtt_messages_received_total`);
 * with the rule, the bridge's catch-up is measured too: from the round's end until the rule's sink
 * acknowledged every message of the round (`bridge_rule_delivered_total`), and the largest lag during
 * the round (messages received and not yet acknowledged by the sink, sampled every 500 ms).
 * The sink: NATS at 127.0.0.1:4222 (else a `nats-server -js` started here), a memory stream of 1 GiB, purged before every
 * round; each round starts on a quiet machine (below 15% busy).
 *
 *   npm run bench:bridges                         (SHAPES=50,300 PAYLOADS=small,1k QOS=0,1 FORMATS=event,batch ROUNDS=2 MSGS_QOS0=300000 MSGS_QOS1=100000)
 *   SHAPES=50 QOS=1 ROUNDS=1 npm run bench:bridges -- --no-write
 */
import crypto from 'node:crypto';
import fs from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { execFileSync, spawn, type ChildProcess } from 'node:child_process';
import { parseArgs } from 'node:util';
import { connect } from '@nats-io/transport-node';
import { jetstreamManager, StorageType, DiscardPolicy } from '@nats-io/jetstream';
import { cpuSeconds, descendants, freePort, startGatewayProcess } from './lib/brokers.js';
import { writeBenchmarkSection } from './lib/report.js';
import { gatewayClient, must } from '../src/clients/api.js';

const { values: args } = parseArgs({ options: { 'no-write': { type: 'boolean', default: false } } });
const list = (name: string, fallback: string) => (process.env[name] ?? fallback).split(',').map((x) => x.trim()).filter(Boolean);
const SHAPES = list('SHAPES', '50,300').map(Number);
const PAYLOADS = list('PAYLOADS', 'small,1k') as ('small' | '1k')[];
const QOS = list('QOS', '0,1').map(Number) as (0 | 1)[];
const FORMATS = list('FORMATS', 'event,batch') as ('event' | 'batch')[];
const ROUNDS = Number(process.env.ROUNDS ?? 2);
// rounds of several seconds: 30,000 QoS 1 messages (1 to 3 s) let part of the rule's work fall after the round and
// the rounds' fsync latency decide the ratio (docs/benchmarks.md, "bench:bridges in steady state")
const MSGS = { 0: Number(process.env.MSGS_QOS0 ?? 300_000), 1: Number(process.env.MSGS_QOS1 ?? 100_000) };
const INFLIGHT = 20;
const PAYLOAD_TEXT = {
  small: JSON.stringify({ temperature: 21.5, humidity: 40, voltage: 3.3, seq: 1 }).padEnd(48, ' '),
  '1k': JSON.stringify({ blob: 'x'.repeat(1000) }).slice(0, 1024),
};
const PREFIX = 'benchbr';

const listening = (port: number) => new Promise<boolean>((resolve) => {
  const s = net.connect({ host: '127.0.0.1', port }, () => { s.destroy(); resolve(true); });
  s.on('error', () => resolve(false));
});
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

async function natsSink(dir: string): Promise<{ url: string; stop(): Promise<void> }> {
  if (await listening(4222)) return { url: 'nats://127.0.0.1:4222', stop: async () => {} };
  const port = await freePort();
  const proc = spawn('/usr/sbin/nats-server', ['-js', '-a', '127.0.0.1', '-p', String(port), '-sd', path.join(dir, 'nats')], { stdio: 'ignore' });
  while (!(await listening(port))) await sleep(100);
  return { url: `nats://127.0.0.1:${port}`, stop: () => new Promise((r) => { proc.once('exit', () => r()); proc.kill('SIGTERM'); }) };
}

async function main(): Promise<void> {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'bench-bridges-'));
  fs.chmodSync(dir, 0o755); // embedded PostgreSQL runs as its own user when we are root
  const sink = await natsSink(dir);
  const nc = await connect({ servers: sink.url.replace('nats://', '') });
  const jsm = await jetstreamManager(nc);
  await jsm.streams.delete('BENCHBR').catch(() => {});
  // 1 GiB: a round's messages fit (300,000 events of 1 KiB with their envelopes are about 400 MB), so no round pays
  // nats-server for discarding the oldest as new ones come (at 256 MiB the QoS 0 event rounds of 1 KiB did)
  await jsm.streams.add({ name: 'BENCHBR', subjects: [`${PREFIX}.>`], storage: StorageType.Memory, max_bytes: 1024 * 1024 * 1024, discard: DiscardPolicy.Old, duplicate_window: 10_000_000_000 });

  const gw = await startGatewayProcess(path.join(dir, 'gw'));
  const loads = os.loadavg().map((l) => l.toFixed(1)).join(' ');
  console.log(`bench:bridges  shapes ${SHAPES.join('/')}, payloads ${PAYLOADS.join('/')}, QoS ${QOS.join('/')}, rule formats ${FORMATS.join('/')}, ${ROUNDS} rounds, ${MSGS[0]}/${MSGS[1]} msgs per round (QoS 0/1), ${os.cpus().length} CPUs, load ${loads}, sink ${sink.url}`);
  // setup and rule calls through the typed client generated from the gateway's document (src/clients/api.ts); /metrics is not in the document: plain fetch
  const anon = gatewayClient(gw.httpUrl);
  const platform = gatewayClient(gw.httpUrl, { bearer: (await must(anon.POST('/dev/token', { body: { realm: 'platform', sub: 'bench', roles: ['platform-admin'] } }))).access_token });
  const accountId = crypto.randomUUID();
  await must(platform.POST('/platform/v1/accounts', { body: { id: accountId, name: 'bench bridges' } }));
  const op = gatewayClient(gw.httpUrl, { bearer: (await must(anon.POST('/dev/token', { body: { realm: `acc-${accountId}`, sub: 'op', roles: ['operator'] } }))).access_token });
  const bridge = await must(op.POST('/api/v1/bridges', { body: { name: 'bench', type: 'nats', url: sink.url, subject_prefix: PREFIX } }));
  const rule = await must(op.POST('/api/v1/rules', { body: { name: 'all telemetry', from: 'devices/+/telemetry', bridge_id: bridge.id, enabled: false } }));
  const ruleId = { params: { path: { id: rule.id } } };

  // devices: real things of the account (token enrollment), their files for mosquitto_pub
  const maxShape = Math.max(...SHAPES);
  const devices: { id: string; cert: string; key: string }[] = [];
  let ca = '';
  const claimSecret = (await must(op.POST('/api/v1/things/claim-groups', { body: { name: 'bench', maxDevices: 100_000, ttlDays: 1 } }))).sharedSecret;
  for (let i = 0; i < maxShape; i++) {
    const e = await must(anon.POST('/ddi/v1/enroll', { body: { provisioningMethod: 'claim_token', claimSecret, manufacturer: 'Bench', model: 'bridge-1', serial: `BR-${i}` } }));
    const id: string = e.twinTopicPrefix.slice('devices/'.length);
    const f = { id, cert: path.join(dir, `${id}.crt`), key: path.join(dir, `${id}.key`) };
    if (e.privateKey === undefined) throw new Error('the enrollment answered no private key');
    fs.writeFileSync(f.cert, e.certificate);
    fs.writeFileSync(f.key, e.privateKey, { mode: 0o600 });
    ca = e.caBundlePem;
    devices.push(f);
  }
  const caFile = path.join(dir, 'ca.pem');
  fs.writeFileSync(caFile, ca);

  // polled every 20 ms during a round: only the family asked for (`?name=`), since a whole scrape costs the gateway's
  // event loop about 3 ms (14% of its busy time at this rate, in both rounds: docs/benchmarks.md)
  const metric = async (name: string, rule?: string, labels = rule ? `rule="${rule}"` : '') => {
    const url = `${gw.httpUrl}/metrics?name=${name}`;
    const text = await fetch(url).then((r) => r.text(), () => fetch(url).then((r) => r.text()));
    const m = new RegExp(`^${name}${labels ? `\\{${labels}\\}` : ''} (\\d+(?:\\.\\d+)?(?:e\\+\\d+)?)$`, 'm').exec(text);
    return m ? Number(m[1]) : 0;
  };
  const gwCpu = () => cpuSeconds(gw.pid);
  // the sink's server, when it runs on this machine: its CPU shares the two cores with everything measured here
  const natsPid = (() => {
    try {
      return Number(execFileSync('pgrep', ['-f', `nats-server.* -p ${new URL(sink.url).port}( |$)`]).toString().trim().split('\n')[0]) || undefined;
    } catch { return undefined; }
  })();
  const natsCpu = () => (natsPid ? cpuSeconds(natsPid) : 0);
  // PostgreSQL: its processes' CPU and that of the backends they reaped (cutime/cstime), so backends ending mid-round still count
  const ticks = 100;
  const pgCpu = () => descendants(gw.pid).reduce((sum, p) => {
    try {
      const stat = fs.readFileSync(`/proc/${p}/stat`, 'utf8');
      const f = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
      return sum + (Number(f[11]) + Number(f[12]) + Number(f[13]) + Number(f[14])) / ticks;
    } catch { return sum; }
  }, 0);

  // the whole machine's CPU (both cores: clients, NATS, PostgreSQL, the gateway) from /proc/stat: busy and all jiffies
  const machine = () => {
    const f = fs.readFileSync('/proc/stat', 'utf8').split('\n')[0].trim().split(/\s+/).slice(1).map(Number);
    const idle = f[3] + f[4];
    const all = f.reduce((a, b) => a + b, 0);
    return { busy: all - idle, all };
  };
  /** waits (at most 20 s) until the machine is below 15% busy over 300 ms */
  const quiet = async () => {
    for (const until = performance.now() + 20_000; performance.now() < until;) {
      const a = machine();
      await sleep(300);
      const b = machine();
      if ((b.busy - a.busy) / (b.all - a.all) < 0.15) return;
    }
  };
  type Condition = 'none' | 'event' | 'batch';
  interface Row { shape: number; payload: string; qos: number; rule: Condition; msgsPerSecond: number; cpuUsPerMsg: number; pgUsPerMsg: number; natsUsPerMsg: number; catchUpS: number; maxLag: number; machineBusy: number; deliveredPerSecond: number; fromMemory: number }
  const rows: Row[] = [];
  for (const shape of SHAPES) {
    for (const qos of QOS) {
      const fleet = devices.slice(0, shape);
      const procs: ChildProcess[] = fleet.map((d) => {
        const p = spawn('mosquitto_pub', ['-h', '127.0.0.1', '-p', String(gw.mqttPort), '-V', 'mqttv5', '--cafile', caFile, '--cert', d.cert, '--key', d.key,
          '-i', d.id, '-u', d.id, '-t', `devices/${d.id}/telemetry`, '-q', String(qos), '-M', String(INFLIGHT), '-k', '600', '-l'], { stdio: ['pipe', 'ignore', 'ignore'] });
        p.stdin!.on('error', () => {});
        return p;
      });
      while ((await metric('mqtt_connected_clients')) < shape) await sleep(200);
      for (const payload of PAYLOADS) {
        for (let round = 0; round < ROUNDS; round++) {
          // without the rule, then with it in each format; the order reversed every other round
          const conditions: Condition[] = ['none', ...FORMATS];
          for (const condition of round % 2 === 0 ? conditions : conditions.reverse()) {
            const withRule = condition !== 'none';
            await must(op.PATCH('/api/v1/rules/{id}', { ...ruleId, body: withRule ? { enabled: true, format: condition } : { enabled: false } }));
            // the rule starts where it stopped: let it catch up before the round
            if (withRule) while ((await must(op.GET('/api/v1/rules/{id}', ruleId))).lag.messages > 0) await sleep(200);
            await sleep(500);
            // each round into an empty stream, on a quiet machine: a stream at its byte limit discards the oldest
            // messages as new ones come, and discarding an event round's many small messages cost nats-server (on these
            // same cores) about twice its own CPU per message in the batch round after it (docs/benchmarks.md)
            await jsm.streams.purge('BENCHBR');
            await quiet();
            const n = MSGS[qos];
            const per = Math.ceil(n / shape);
            const total = per * shape;
            const line = PAYLOAD_TEXT[payload] + '\n';
            const chunk = line.repeat(per);
            const recv0 = await metric('mqtt_messages_received_total');
            const del0 = await metric('bridge_rule_delivered_total', rule.id);
            // the history rows the rule took, by where their points came from (RecentHistory or PostgreSQL)
            const rowsFrom = async () => ({ memory: await metric('telemetry_log_rows_read_total', undefined, 'points="memory"'), database: await metric('telemetry_log_rows_read_total', undefined, 'points="database"') });
            const from0 = await rowsFrom();
            const [c0, p0, n0, m0, t0] = [gwCpu(), pgCpu(), natsCpu(), machine(), performance.now()];
            for (const p of procs) p.stdin!.write(chunk);
            let maxLag = 0;
            let lastSample = 0;
            while ((await metric('mqtt_messages_received_total')) - recv0 < total) {
              if (withRule && performance.now() - lastSample > 500) {
                lastSample = performance.now();
                // received and not yet acknowledged by the sink
                const [got, sent] = [await metric('mqtt_messages_received_total'), await metric('bridge_rule_delivered_total', rule.id)];
                maxLag = Math.max(maxLag, got - recv0 - (sent - del0));
              }
              await sleep(20);
            }
            const [t1, m1] = [performance.now(), machine()];
            const seconds = (t1 - t0) / 1000;
            let catchUp = 0;
            if (withRule) {
              while ((await metric('bridge_rule_delivered_total', rule.id)) - del0 < total) await sleep(20);
              catchUp = (performance.now() - t1) / 1000;
            } else await sleep(300); // the last flush
            const [c1, p1, n1] = [gwCpu(), pgCpu(), natsCpu()];
            const from1 = await rowsFrom();
            const fromMemory = (from1.memory - from0.memory) / Math.max(1, from1.memory - from0.memory + from1.database - from0.database);
            const r: Row = {
              shape, payload, qos, rule: condition, msgsPerSecond: total / seconds,
              cpuUsPerMsg: ((c1 - c0) * 1e6) / total, pgUsPerMsg: ((p1 - p0) * 1e6) / total, natsUsPerMsg: ((n1 - n0) * 1e6) / total, catchUpS: catchUp, maxLag,
              machineBusy: (m1.busy - m0.busy) / (m1.all - m0.all),
              // with the rule: the round's messages over the round and its catch-up (what a sustained load could keep up with)
              deliveredPerSecond: withRule ? total / (seconds + catchUp) : 0,
              fromMemory,
            };
            rows.push(r);
            console.log(`${shape} devices ${payload} QoS ${qos} ${withRule ? `rule, ${condition.padEnd(5)}` : 'no rule    '}: ${Math.round(r.msgsPerSecond)} msg/s, gateway ${r.cpuUsPerMsg.toFixed(1)} µs/msg, postgres ${r.pgUsPerMsg.toFixed(1)} µs/msg, nats-server ${natsPid ? `${r.natsUsPerMsg.toFixed(1)} µs/msg` : 'not here'}, machine busy ${(100 * r.machineBusy).toFixed(0)}%${withRule ? `, catch-up ${catchUp.toFixed(2)} s after the round, max lag ${maxLag}, rows' points from memory ${(100 * fromMemory).toFixed(0)}%` : ''}`);
          }
        }
      }
      for (const p of procs) p.stdin!.end();
      await Promise.all(procs.map((p) => (p.exitCode !== null ? undefined : new Promise((r) => p.once('exit', r)))));
      while ((await metric('mqtt_connected_clients')) > 0) await sleep(200);
    }
  }
  await gw.stop();
  await nc.close();
  await sink.stop();

  const median = (xs: number[]) => { const s = [...xs].sort((a, b) => a - b); return s.length % 2 ? s[(s.length - 1) / 2] : (s[s.length / 2 - 1] + s[s.length / 2]) / 2; };
  const table = ['| devices | payload | QoS | rule format | msg/s without rule | msg/s with rule | ratio | gateway µs/msg without / with | PostgreSQL µs/msg without / with | nats-server µs/msg with | machine busy without / with | catch-up after round (s) | max lag (msgs) | delivered msg/s (round and catch-up) | delivered / intake without rule | points from memory |', '|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|'];
  for (const shape of SHAPES) for (const payload of PAYLOADS) for (const qos of QOS) for (const format of FORMATS) {
    const of = (rule: Condition) => rows.filter((r) => r.shape === shape && r.payload === payload && r.qos === qos && r.rule === rule);
    const [a, b] = [of('none'), of(format)];
    if (!a.length || !b.length) continue;
    const m = (rs: Row[], k: keyof Row) => median(rs.map((r) => r[k] as number));
    table.push(`| ${shape} | ${payload === 'small' ? '48 B' : '1 KiB'} | ${qos} | ${format} | ${Math.round(m(a, 'msgsPerSecond'))} | ${Math.round(m(b, 'msgsPerSecond'))} | ${(m(b, 'msgsPerSecond') / m(a, 'msgsPerSecond')).toFixed(2)} | ${m(a, 'cpuUsPerMsg').toFixed(1)} / ${m(b, 'cpuUsPerMsg').toFixed(1)} | ${m(a, 'pgUsPerMsg').toFixed(1)} / ${m(b, 'pgUsPerMsg').toFixed(1)} | ${natsPid ? m(b, 'natsUsPerMsg').toFixed(1) : '-'} | ${(100 * m(a, 'machineBusy')).toFixed(0)}% / ${(100 * m(b, 'machineBusy')).toFixed(0)}% | ${m(b, 'catchUpS').toFixed(2)} | ${Math.max(...b.map((r) => r.maxLag))} | ${Math.round(m(b, 'deliveredPerSecond'))} | ${(m(b, 'deliveredPerSecond') / m(a, 'msgsPerSecond')).toFixed(2)} | ${(100 * m(b, 'fromMemory')).toFixed(0)}% |`);
  }
  console.log(table.join('\n'));
  // the settings given, so the section names the command that made it
  const settings = ['SHAPES', 'PAYLOADS', 'QOS', 'FORMATS', 'ROUNDS', 'MSGS_QOS0', 'MSGS_QOS1'].filter((k) => process.env[k] !== undefined).map((k) => `${k}=${process.env[k]}`);
  const command = [...settings, 'npm run bench:bridges'].join(' ');
  const section = `## bench:bridges (issue 34)

\`${command}\`, ${new Date().toISOString().slice(0, 10)}, ${os.cpus().length} CPUs, node ${process.version}, load average at the start ${loads}
One gateway process, ${SHAPES.join(' and ')} devices (\`mosquitto_pub -l\`, MQTT 5, mutual TLS; QoS 1 with ${INFLIGHT} in flight), one rule forwarding all
telemetry of the account to NATS JetStream (${sink.url === 'nats://127.0.0.1:4222' ? "the machine's server" : 'nats-server -js'}, memory stream of 1 GiB purged before every round, each round started once the machine is below 15%
busy), disabled in one round and enabled in
the others (format \`event\`: one CloudEvent per NATS message; \`batch\`: one JSON array of a thing's consecutive events per message), the order
reversed every other round, ${ROUNDS} rounds each, medians. msg/s: the gateway's intake (every message counted by \`mqtt_messages_received_total\`);
CPU per message: the gateway process (and its embedded PostgreSQL apart) from the round's start until, with the rule, the sink
acknowledged the round's last message (so it includes the delivery). Catch-up: seconds from the round's end until then; max lag:
received and not yet acknowledged by the sink, the largest seen during the round (sampled every 500 ms). Delivered msg/s: the
round's messages over the round and its catch-up, the rate at which intake and delivery both finish: a rule keeps up with a sustained
load only up to it, so it is compared with the intake without the rule too. Machine busy: both cores'
non-idle time during the round (/proc/stat; everything on the machine: the devices' clients, NATS, PostgreSQL, the gateway). nats-server
µs/msg: the sink server's own CPU, on the same two cores, when it runs here. Rows' points from memory: the history rows the
rule took whose points came from the node's memory of what it wrote last (RecentHistory, \`TELEMETRY_RECENT_MB\`), not from
PostgreSQL (\`telemetry_log_rows_read_total\`). Ratio: with / without (target >= 0.8).

${table.join('\n')}
`;
  if (!args['no-write']) writeBenchmarkSection(section);
  fs.rmSync(dir, { recursive: true, force: true });
}

main().then(() => process.exit(0), (err) => { console.error(err); process.exit(1); });
