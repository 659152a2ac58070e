/**
 * bench:mqtt: CPU per message of the gateway's embedded broker against Debian's Mosquitto 2 (started
 * here with TLS, required client certificates and a per-client ACL `devices/%u/#`) in three load
 * shapes (SHAPES devices publishing as fast as they can: 50, 300, 1,000), two payloads (48-byte and
 * 1 KiB JSON telemetry) and QoS 0, QoS 1 (INFLIGHT in flight per device) and QoS 1 with one message in flight
 * per device (50 and 300 devices: SERIAL_SHAPES), all in one run. Two gateway processes are measured: the
 * normal one and one with TELEMETRY_INGEST=false (telemetry routed, not parsed or stored), so the
 * broker's cost and the ingest's cost read apart. CPU efficiency = Mosquitto CPU per message /
 * gateway CPU per message (1.0: as cheap as Mosquitto).
 *
 * The load generator is Debian's `mosquitto_pub -l` (C, libmosquitto), one process per device
 * (MQTT 5, mutual TLS, its own certificate), reading lines from a pipe and publishing each as one
 * telemetry message (QoS 1: up to INFLIGHT unacknowledged). Per shape and QoS every broker gets its
 * own fleet, all connected at once; rounds alternate between the brokers (and payloads) so all see
 * the same machine; a round starts when the broker is idle and ends at its last busy CPU sample
 * once it has counted every message (gateway: /metrics, Mosquitto: $SYS).
 *
 *   npm run bench:mqtt                     (SHAPES=50,300,1000 QOS=0,1,1s SERIAL_SHAPES=50,300 ROUNDS=3 WARMUP=40000 MSGS_QOS0=400000 MSGS_QOS1=150000 MSGS_QOS1S=100000)
 *   SHAPES=300 QOS=0 PAYLOADS=small ROUNDS=5 npm run bench:mqtt -- --no-write
 *   SHAPES=50 QOS=1s ONLY=gateway,mosquitto npm run bench:mqtt -- --no-write   (QoS 1, one in flight per device)
 *
 * Also: MSGS_QOS0 / MSGS_QOS1 / MSGS_QOS1S (messages per round, spread over the devices), INFLIGHT (QoS 1 window
 * per device, 20), ONLY=gateway|ingest-off|mosquitto|history-off (comma list of brokers; history-off:
 * the gateway with TELEMETRY_HISTORY=false, not in the default run), GATEWAY_ENV='{"NAME":"value"}' (one
 * more gateway, `gateway-env`, with that environment: to try a setting against the default), NODELAY=1 (TCP_NODELAY
 * on the publishers), BENCH_CPU_PROF=<dir> (V8 CPU profiles of the gateways), COMPARE_ROOT=<worktree>
 * (a fourth broker, 'before': the gateway of another checkout, for before/after figures of a change
 * in the same alternating rounds). Only a full run (every shape, payload, QoS and the three brokers)
 * rewrites docs/benchmarks.md. WORKERS=N adds the broker 'workers': the gateway with BROKER_WORKERS=N (a
 * node:cluster primary and N worker processes; its CPU is the sum over the primary and the workers,
 * its counters the node-wide /metrics), e.g. `WORKERS=2 ONLY=gateway,workers`. BENCH_GATEWAY_NODE_ARGS='--trace-gc'
 * (options of the gateways' node; NODE_OPTIONS refuses some) with BENCH_GATEWAY_LOG=<file> (their standard output).
 */
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { spawn, type ChildProcess } from 'node:child_process';
import { parseArgs } from 'node:util';
import mqtt from 'mqtt';
import {
  MONITOR_CN, cpuSeconds, descendants, issueDevices, systemSeconds, startGatewayProcess, startMosquitto, type Creds,
} from './lib/brokers.js';
import { writeBenchmarkSection } from './lib/report.js';

const { values: args } = parseArgs({ options: { 'no-write': { type: 'boolean', default: false } } });
const list = (name: string, fallback: string) => (process.env[name] ?? fallback).split(',').map((x) => x.trim()).filter(Boolean);
const SHAPES = list('SHAPES', '50,300,1000').map(Number);
/**
 * messages per round: rounds of 1 s and more at today's rates (100,000 and 30,000 had become rounds of
 * 0.2 to 0.5 s, where one garbage collection or ingest flush of the round moved a figure by half)
 */
const MSGS: Record<Mode, number> = {
  0: Number(process.env.MSGS_QOS0 ?? 400_000),
  1: Number(process.env.MSGS_QOS1 ?? 150_000),
  '1s': Number(process.env.MSGS_QOS1S ?? 100_000),
};
const INFLIGHT = Number(process.env.INFLIGHT ?? 20);
/**
 * The load modes ("QoS" in the output): 0, 1 (up to INFLIGHT unacknowledged per device), and '1s':
 * QoS 1 with one message in flight per device (publish, wait for the PUBACK, publish: what
 * `mosquitto_pub --repeat N --repeat-delay 0 -q 1` and most embedded clients do; here
 * `mosquitto_pub -l -M 1`, whose queue sends the next line when the PUBACK of the last one came).
 * '1s' runs only in the shapes of SERIAL_SHAPES (50 and 300 devices).
 */
type Mode = 0 | 1 | '1s';
const QOS = list('QOS', '0,1,1s').map((q) => (q === '1s' ? '1s' : Number(q))) as Mode[];
const SERIAL_SHAPES = list('SERIAL_SHAPES', '50,300').map(Number);
const qosOf = (m: Mode): 0 | 1 => (m === 0 ? 0 : 1);
const inflightOf = (m: Mode) => (m === '1s' ? 1 : INFLIGHT);
const modeLabel = (m: Mode) => (m === '1s' ? '1 (one in flight)' : String(m));
const modesOf = (shape: number) => QOS.filter((m) => m !== '1s' || SERIAL_SHAPES.includes(shape));
const ROUNDS = Number(process.env.ROUNDS ?? 3);
/**
 * messages of the unmeasured warm-up round per broker, payload and QoS (0: none): two of the gateway's
 * full ingest batches (20,000 messages, or 16 MiB of 1 KiB ones), so that the first measured round
 * does not pay for the first full-size batch (its arena growing to size, the page faults of new
 * memory); after 10,000 1 KiB messages the first round measured a third more than the next ones
 * (docs/benchmarks.md, seventh pass)
 */
const WARMUP = Number(process.env.WARMUP ?? 40_000);
const COMPARE_ROOT = process.env.COMPARE_ROOT;
const WORKERS = Number(process.env.WORKERS ?? 0);
const ONLY = list('ONLY', `gateway,ingest-off,mosquitto${COMPARE_ROOT ? ',before' : ''}${WORKERS > 1 ? ',workers' : ''}`);
/** 48 bytes, and a 1 KiB object of 64 readings (what a richer device sends) */
const PAYLOAD_TEXT = {
  small: JSON.stringify({ temperature: 21.5, humidity: 40, voltage: 3.3 }),
  '1k': kibPayload(),
};
type PayloadName = keyof typeof PAYLOAD_TEXT;
const PAYLOADS = list('PAYLOADS', 'small,1k') as PayloadName[];
const SAMPLE_MS = 50;
/** how long a broker's idle CPU is sampled before a shape's rounds */
const IDLE_MS = 3000;
/** below this share of one core the broker counts as idle (before and after a run) */
const IDLE_SHARE = Number(process.env.IDLE_SHARE ?? 0.1);
/** above this share of one core in a sample the broker is still working on the run (its timers stay below) */
const BUSY_SHARE = 0.2;

function kibPayload(): string {
  const values: Record<string, number> = { temperature: 21.5, humidity: 40, voltage: 3.3 };
  for (let i = 0; JSON.stringify(values).length < 1000; i++) values[`sensor_${String(i).padStart(2, '0')}`] = Math.round(1000 * Math.sin(i + 1) * 100) / 100;
  const text = JSON.stringify(values);
  // pad the last reading's name to exactly 1,024 bytes
  return text.slice(0, 1) + `"pad":"${'x'.repeat(1024 - text.length - 9)}",` + text.slice(1);
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

interface DeviceFiles { id: string; cert: string; key: string }

function writeDeviceFiles(dir: string, creds: Creds[]): DeviceFiles[] {
  fs.mkdirSync(dir, { recursive: true });
  return creds.map((c) => {
    const f = { id: c.thingId, cert: path.join(dir, `${c.thingId}.crt`), key: path.join(dir, `${c.thingId}.key`) };
    fs.writeFileSync(f.cert, c.cert);
    fs.writeFileSync(f.key, c.key, { mode: 0o600 });
    return f;
  });
}

/** How a benchmark reads one broker: its process, its port, and its own counters. */
interface Target {
  name: string;
  pid: number;
  /** the processes whose CPU is the broker's (a multi-core gateway: the primary and its workers) */
  pids(): number[];
  port: number;
  connected(): Promise<number>;
  received(): Promise<number>;
  /** other processes doing the broker's work (the gateway's PostgreSQL) */
  helperPids(): number[];
}

/** Gateway counters from its Prometheus endpoint. */
function gatewayTarget(name: string, pid: number, port: number, httpUrl: string): Target {
  const metric = async (name: string) => {
    // a kept-alive connection the server is just closing fails once: ask again on a new one
    // (/metrics, Prometheus text, is not in the gateway's OpenAPI document: plain fetch, not the typed client)
    const text = await fetch(`${httpUrl}/metrics`).catch(() => fetch(`${httpUrl}/metrics`)).then((r) => r.text());
    const m = new RegExp(`^${name} (\\d+(?:\\.\\d+)?(?:e\\+\\d+)?)$`, 'm').exec(text);
    if (!m) throw new Error(`metric ${name} missing`);
    return Number(m[1]);
  };
  // the gateway's worker processes (BROKER_WORKERS > 1) are Node children of the gateway's pid; the
  // other descendants are its embedded PostgreSQL (and tsx's esbuild service)
  const isNode = (p: number) => {
    try { return fs.readFileSync(`/proc/${p}/comm`, 'utf8').trim() === 'node'; } catch { return false; }
  };
  let workers: number[] | undefined;
  const nodePids = () => (workers ??= descendants(pid).filter(isNode));
  return {
    name, pid, port,
    pids: () => [pid, ...nodePids()],
    connected: () => metric('mqtt_connected_clients'),
    received: () => metric('mqtt_messages_received_total'),
    helperPids: () => descendants(pid).filter((p) => !nodePids().includes(p)),
  };
}

/** Mosquitto counters from its $SYS tree (published every second), read by a monitor client. */
async function mosquittoTarget(pid: number, port: number, monitor: Creds, ca: string): Promise<Target & { close(): Promise<void> }> {
  const values = new Map<string, number>();
  const client = await mqtt.connectAsync(`mqtts://127.0.0.1:${port}`, {
    key: monitor.key, cert: monitor.cert, ca, clientId: MONITOR_CN, username: MONITOR_CN, protocolVersion: 5, reconnectPeriod: 0,
  });
  client.on('message', (topic, payload) => values.set(topic, Number(payload.toString())));
  await client.subscribeAsync(['$SYS/broker/clients/connected', '$SYS/broker/publish/messages/received']);
  const read = async (topic: string) => {
    for (let i = 0; i < 50 && !values.has(topic); i++) await sleep(100);
    return values.get(topic) ?? 0;
  };
  return {
    name: 'mosquitto', pid, port, pids: () => [pid],
    connected: async () => (await read('$SYS/broker/clients/connected')) - 1, // the monitor itself
    received: () => read('$SYS/broker/publish/messages/received'),
    helperPids: () => [],
    close: () => client.endAsync(true),
  };
}

const cpuOf = (pids: number[]) => pids.reduce((sum, p) => {
  try { return sum + cpuSeconds(p); } catch { return sum; }
}, 0);
const systemOf = (pids: number[]) => pids.reduce((sum, p) => {
  try { return sum + systemSeconds(p); } catch { return sum; }
}, 0);

/** A broker's CPU share of a core over IDLE_MS once it is idle (its timers and pollers: a fixed cost, not a per-message one). */
async function idleShare(pids: number[]): Promise<number> {
  await waitIdle(pids, 500);
  const c0 = cpuOf(pids);
  const t0 = performance.now();
  await sleep(IDLE_MS);
  return (cpuOf(pids) - c0) / ((performance.now() - t0) / 1000);
}

/**
 * How many processes run the broker's code: the thresholds below are per process, since each
 * gateway process has its own idle baseline (pollers, timers: 7 to 9% of a core on this machine
 * before the idle pass of issue 19, 0.2 to 0.6% since: `npm run bench:idle`), which a multi-core gateway's workers pay each (its primary does nothing while idle).
 */
const processCount = (pids: number[]) => Math.max(1, pids.length - 1);

/** Waits until the processes use less than IDLE_SHARE of a core each over `quietMs` (on a busy machine: at most `timeoutMs`, then goes on). */
async function waitIdle(pids: number[], quietMs = 1000, timeoutMs = 30_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  let last = cpuOf(pids);
  let quietSince = Date.now();
  const stepMs = 200;
  while (Date.now() < deadline) {
    await sleep(stepMs);
    const now = cpuOf(pids);
    if (now - last > processCount(pids) * IDLE_SHARE * (stepMs / 1000)) quietSince = Date.now();
    last = now;
    if (Date.now() - quietSince >= quietMs) return;
  }
  console.log(`    (broker ${pids.join('+')} not idle after ${timeoutMs / 1000} s; going on)`);
}

/** One `mosquitto_pub -l` per device, connected and waiting on its stdin. */
function startPublishers(port: number, ca: string, devices: DeviceFiles[], mode: Mode): { procs: ChildProcess[]; errors: string[] } {
  const errors: string[] = [];
  const procs = devices.map((d) => {
    const proc = spawn('mosquitto_pub', [
      '-h', '127.0.0.1', '-p', String(port), '-V', 'mqttv5', '--cafile', ca, '--cert', d.cert, '--key', d.key,
      '-i', d.id, '-u', d.id, '-t', `devices/${d.id}/telemetry`, '-q', String(qosOf(mode)), '-M', String(inflightOf(mode)), '-k', '600', '-l', ...(process.env.NODELAY === '1' ? ['--nodelay'] : []),
    ], { stdio: ['pipe', 'ignore', 'pipe'] });
    proc.stderr!.on('data', (chunk) => { if (errors.length < 20) errors.push(`${d.id}: ${String(chunk).trim()}`); });
    proc.stdin!.on('error', () => {}); // a publisher that died is reported through its stderr and the counts
    return proc;
  });
  return { procs, errors };
}

async function stopPublishers(procs: ChildProcess[]): Promise<void> {
  const exited = procs.map((p) => (p.exitCode !== null || p.signalCode !== null ? Promise.resolve() : new Promise((r) => p.once('exit', r))));
  for (const p of procs) p.stdin!.end();
  const timer = setTimeout(() => { for (const p of procs) p.kill('SIGKILL'); }, 30_000);
  await Promise.all(exited);
  clearTimeout(timer);
}

interface RunResult {
  messages: number; received: number; seconds: number; msgsPerSecond: number;
  brokerCpuUsPerMsg: number; brokerCpuShare: number; generatorCpuShare: number; helperCpuUsPerMsg: number;
  /** of the broker's CPU, the share in the kernel (approximate: read after the round's last busy sample) */
  brokerSystemShare: number;
  /** the broker's CPU per message less its idle CPU over the round (idle share x seconds) */
  brokerCpuUsPerMsgLessIdle: number;
}

/** The devices of one broker, connected and waiting for lines. */
interface Fleet { target: Target; procs: ChildProcess[]; errors: string[]; /** the broker's CPU share of a core while its fleet is connected and silent */ idle: number }

async function connectFleet(target: Target, ca: string, devices: DeviceFiles[], qos: Mode): Promise<Fleet> {
  const before = await target.connected();
  const { procs, errors } = startPublishers(target.port, ca, devices, qos);
  const deadline = Date.now() + 300_000;
  for (let n = 0; (n = (await target.connected()) - before) < devices.length;) {
    if (Date.now() > deadline || procs.every((p) => p.exitCode !== null)) {
      await stopPublishers(procs);
      const ended = procs.filter((p) => p.exitCode !== null || p.signalCode !== null);
      // how they ended (a publisher that exits without a word still has an exit code or a signal)
      const how = new Map<string, number>();
      for (const p of ended) {
        const end = p.signalCode ?? `exit ${p.exitCode}`;
        how.set(end, (how.get(end) ?? 0) + 1);
      }
      throw new Error(`${target.name}: ${n} of ${devices.length} devices connected, ${ended.length} publishers exited (${[...how].map(([k, v]) => `${v} ${k}`).join(', ')}; ${errors.slice(0, 3).join('; ')})`);
    }
    await sleep(500);
  }
  return { target, procs, errors, idle: 0 };
}

/**
 * connectFleet, once more after a failure (10 s later): once, every publisher of Mosquitto's 1,000-device
 * fleet exited at connect without a message, after the QoS 0 rounds of the same shape, and the
 * whole run was lost (2026-11-26 15:24Z).
 */
async function connectFleetRetried(target: Target, ca: string, devices: DeviceFiles[], qos: Mode): Promise<Fleet> {
  try {
    return await connectFleet(target, ca, devices, qos);
  } catch (err) {
    console.log(`    (${(err as Error).message}; trying once more in 10 s)`);
    await sleep(10_000);
    return connectFleet(target, ca, devices, qos);
  }
}

/** One round: every device of the fleet sends its share of MSGS[qos] messages at once; the broker counts them. */
async function runRound(fleet: Fleet, qos: Mode, payload: PayloadName, messages = MSGS[qos]): Promise<RunResult> {
  const { target, procs } = fleet;
  const perDevice = Math.ceil(messages / procs.length);
  const expected = procs.length * perDevice;
  const brokerPids = target.pids();
  await waitIdle(brokerPids, 500); // connect bookkeeping and the previous round are not part of the measurement
  const before = await target.received();
  const lines = Buffer.from(`${PAYLOAD_TEXT[payload]}\n`.repeat(perDevice));
  const pubPids = procs.map((p) => p.pid!);
  const helpers = target.helperPids();
  const cpu0 = { broker: cpuOf(brokerPids), gen: cpuOf(pubPids), helpers: cpuOf(helpers), system: systemOf(brokerPids) };
  const t0 = performance.now();
  // CPU sampled every SAMPLE_MS: the round ends at the last sample in which the broker was busy
  let last = { t: t0, cpu: cpu0.broker };
  let end = { ...last };
  const sampler = setInterval(() => {
    const now = { t: performance.now(), cpu: cpuOf(brokerPids) };
    if ((now.cpu - last.cpu) > processCount(brokerPids) * BUSY_SHARE * (now.t - last.t) / 1000) end = now;
    last = now;
  }, SAMPLE_MS);
  for (const p of procs) p.stdin!.write(lines);
  let received = 0;
  for (;;) {
    await waitIdle(brokerPids, 500, 120_000);
    received = (await target.received()) - before;
    if (received >= expected || performance.now() - end.t > 5000) break;
  }
  clearInterval(sampler);
  const gen = cpuOf(pubPids) - cpu0.gen;
  const helperCpu = cpuOf(helpers) - cpu0.helpers;
  const seconds = (end.t - t0) / 1000;
  const brokerCpu = end.cpu - cpu0.broker;
  const system = systemOf(brokerPids) - cpu0.system;
  return {
    brokerSystemShare: round(Math.min(1, system / Math.max(brokerCpu, 1e-9)), 2),
    brokerCpuUsPerMsgLessIdle: round(Math.max(0, brokerCpu - fleet.idle * seconds) * 1e6 / received, 2),
    messages: expected, received, seconds: round(seconds, 2),
    msgsPerSecond: Math.round(received / seconds),
    brokerCpuUsPerMsg: round(brokerCpu * 1e6 / received, 2),
    brokerCpuShare: round(brokerCpu / seconds, 2),
    generatorCpuShare: round(gen / seconds, 2),
    helperCpuUsPerMsg: round(Math.max(0, helperCpu) * 1e6 / received, 2),
  };
}

/** The round with the median broker CPU per message. */
function median(results: RunResult[]): RunResult {
  return [...results].sort((a, b) => a.brokerCpuUsPerMsg - b.brokerCpuUsPerMsg)[Math.floor(results.length / 2)];
}

const round = (n: number, digits: number) => Math.round(n * 10 ** digits) / 10 ** digits;
const loadavg = () => fs.readFileSync('/proc/loadavg', 'utf8').split(' ').slice(0, 3).join(' ');

/** One cell of the result: a broker in one shape, payload and QoS (median round, all rounds). */
interface Cell { shape: number; qos: Mode; payload: PayloadName; target: string; r: RunResult; rounds: RunResult[]; idle: number }

async function main(): Promise<void> {
  if (!fs.existsSync('/usr/bin/mosquitto_pub') || !fs.existsSync('/usr/sbin/mosquitto')) {
    console.error('bench:mqtt needs Debian\'s mosquitto and mosquitto-clients (apt-get install mosquitto mosquitto-clients)');
    process.exit(2);
  }
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'bench-mqtt-'));
  fs.chmodSync(dir, 0o755); // the gateways' embedded PostgreSQL runs as its own user when we are root
  const started = Date.now();
  const loads: Record<string, string> = { start: loadavg() };
  console.log(`bench:mqtt  shapes ${SHAPES.join('/')} devices (one mosquitto_pub each), ${MSGS[0]} msgs per round at QoS 0, ${MSGS[1]} at QoS 1 (inflight ${INFLIGHT}), ${MSGS['1s']} at QoS 1 with one in flight (shapes ${SERIAL_SHAPES.join('/')}), payloads ${PAYLOADS.map((p) => `${p} (${PAYLOAD_TEXT[p].length} B)`).join(', ')}, ${ROUNDS} rounds, ${os.cpus().length} CPUs, node ${process.version}, load ${loads.start}`);
  const gateway = await startGatewayProcess(path.join(dir, 'gw'));
  const stops: (() => Promise<void>)[] = [() => gateway.stop()];
  let monitor: Awaited<ReturnType<typeof mosquittoTarget>> | undefined;
  try {
    // the second gateway trusts the same device CA (same CERTS_DIR) and leaves telemetry unread
    const ingestOff = ONLY.includes('ingest-off') ? await startGatewayProcess(path.join(dir, 'gw-off'), { TELEMETRY_INGEST: 'false' }, gateway.certsDir) : undefined;
    if (ingestOff) stops.push(() => ingestOff.stop());
    const before = COMPARE_ROOT && ONLY.includes('before') ? await startGatewayProcess(path.join(dir, 'gw-before'), {}, gateway.certsDir, path.resolve(COMPARE_ROOT)) : undefined;
    if (before) stops.push(() => before.stop());
    // not in the default run: latest values only (TELEMETRY_HISTORY=false), to read the history's share apart
    const historyOff = ONLY.includes('history-off') ? await startGatewayProcess(path.join(dir, 'gw-history-off'), { TELEMETRY_HISTORY: 'false' }, gateway.certsDir) : undefined;
    if (historyOff) stops.push(() => historyOff.stop());
    // not in the default run: the gateway with extra environment (GATEWAY_ENV, JSON), for trying a setting against the default
    const gatewayEnv = process.env.GATEWAY_ENV ? await startGatewayProcess(path.join(dir, 'gw-env'), JSON.parse(process.env.GATEWAY_ENV) as Record<string, string>, gateway.certsDir) : undefined;
    if (gatewayEnv) stops.push(() => gatewayEnv.stop());
    const workers = WORKERS > 1 && ONLY.includes('workers') ? await startGatewayProcess(path.join(dir, 'gw-workers'), { BROKER_WORKERS: String(WORKERS) }, gateway.certsDir) : undefined;
    if (workers) stops.push(() => workers.stop());
    const caFile = path.join(gateway.certsDir, 'ca-bundle.pem');
    const ca = fs.readFileSync(caFile, 'utf8');
    const [monitorCreds, ...creds] = await issueDevices(gateway.certsDir, Math.max(...SHAPES) + 1, [MONITOR_CN]);
    const devices = writeDeviceFiles(path.join(dir, 'devices'), creds);
    const mosquitto = await startMosquitto(dir, gateway.certsDir);
    stops.push(() => mosquitto.stop());
    monitor = await mosquittoTarget(mosquitto.pid, mosquitto.port, monitorCreds, ca);
    const targets: Target[] = [
      ...(ONLY.includes('gateway') ? [gatewayTarget('gateway', gateway.pid, gateway.mqttPort, gateway.httpUrl)] : []),
      ...(ingestOff ? [gatewayTarget('ingest-off', ingestOff.pid, ingestOff.mqttPort, ingestOff.httpUrl)] : []),
      ...(before ? [gatewayTarget('before', before.pid, before.mqttPort, before.httpUrl)] : []),
      ...(historyOff ? [gatewayTarget('history-off', historyOff.pid, historyOff.mqttPort, historyOff.httpUrl)] : []),
      ...(gatewayEnv ? [gatewayTarget('gateway-env', gatewayEnv.pid, gatewayEnv.mqttPort, gatewayEnv.httpUrl)] : []),
      ...(workers ? [gatewayTarget('workers', workers.pid, workers.mqttPort, workers.httpUrl)] : []),
      ...(ONLY.includes('mosquitto') ? [monitor] : []),
    ];
    const cells: Cell[] = [];
    for (const shape of SHAPES) {
      for (const qos of modesOf(shape)) {
        // every broker's fleet stays connected; rounds alternate between the brokers so that all see the same machine
        const fleets: Fleet[] = [];
        try {
          for (const target of targets) fleets.push(await connectFleetRetried(target, caFile, devices.slice(0, shape), qos));
          // an unmeasured round per broker and payload first: the gateway's JIT compiles the path (Mosquitto is C)
          if (WARMUP) for (const payload of PAYLOADS) for (const fleet of fleets) await runRound(fleet, qos, payload, WARMUP);
          for (const fleet of fleets) fleet.idle = await idleShare(fleet.target.pids());
          const results = new Map<string, RunResult[]>();
          for (let i = 0; i < ROUNDS; i++) {
            for (const payload of PAYLOADS) {
              for (const fleet of fleets) {
                const r = await runRound(fleet, qos, payload);
                const key = `${fleet.target.name}/${payload}`;
                results.set(key, [...(results.get(key) ?? []), r]);
                console.log(`  ${String(shape).padStart(4)} devices  QoS ${String(qos).padEnd(2)}  ${payload.padEnd(5)}  round ${i + 1}  ${fleet.target.name.padEnd(10)} ${String(r.msgsPerSecond).padStart(7)} msg/s  ${r.received}/${r.messages} in ${r.seconds} s  broker ${r.brokerCpuUsPerMsg} µs/msg, less idle ${r.brokerCpuUsPerMsgLessIdle} (${Math.round(r.brokerCpuShare * 100)}% of a core, ${Math.round(r.brokerSystemShare * 100)}% of it system; generator ${Math.round(r.generatorCpuShare * 100)}%${r.helperCpuUsPerMsg ? `; PostgreSQL ${r.helperCpuUsPerMsg} µs/msg` : ''})`);
              }
            }
          }
          for (const fleet of fleets) {
            for (const payload of PAYLOADS) {
              const rounds = results.get(`${fleet.target.name}/${payload}`)!;
              cells.push({ shape, qos, payload, target: fleet.target.name, r: median(rounds), rounds, idle: fleet.idle });
            }
            for (const e of fleet.errors.slice(0, 3)) console.log(`    publisher error: ${e}`);
          }
        } finally {
          for (const fleet of fleets) await stopPublishers(fleet.procs);
        }
      }
      loads[`${shape} devices`] = loadavg();
      console.log(`  load average after ${shape} devices: ${loads[`${shape} devices`]}`);
    }
    const rows = ratioRows(cells);
    for (const r of rows) console.log(r.line);
    const minutes = (Date.now() - started) / 60_000;
    console.log(`run took ${minutes.toFixed(1)} min; load average ${Object.entries(loads).map(([k, v]) => `${k}: ${v}`).join('; ')}`);
    const full = SHAPES.length === 3 && QOS.length === 3 && SERIAL_SHAPES.length === 2 && PAYLOADS.length === 2 && ['gateway', 'ingest-off', 'mosquitto'].every((t) => ONLY.includes(t));
    if (!args["no-write"] && full && !workers) writeSection(rows, cells, loads, minutes);
  } finally {
    await monitor?.close().catch(() => {});
    for (const stop of stops.reverse()) await stop().catch(() => {});
    fs.rmSync(dir, { recursive: true, force: true });
  }
}

interface Row { shape: number; qos: Mode; payload: PayloadName; cells: Record<string, Cell | undefined>; efficiency?: number; efficiencyOff?: number; efficiencyLessIdle?: number; throughput?: number; line: string }

function ratioRows(cells: Cell[]): Row[] {
  const rows: Row[] = [];
  for (const shape of SHAPES) for (const qos of modesOf(shape)) for (const payload of PAYLOADS) {
    const of = (t: string) => cells.find((c) => c.shape === shape && c.qos === qos && c.payload === payload && c.target === t);
    const [g, off, m, b, w] = [of('gateway'), of('ingest-off'), of('mosquitto'), of('before'), of('workers')];
    const eff = (x?: Cell) => (x && m ? round(m.r.brokerCpuUsPerMsg / x.r.brokerCpuUsPerMsg, 2) : undefined);
    const lessIdle = (x?: Cell) => (x && m && x.r.brokerCpuUsPerMsgLessIdle > 0 ? round(m.r.brokerCpuUsPerMsgLessIdle / x.r.brokerCpuUsPerMsgLessIdle, 2) : undefined);
    const row: Row = { shape, qos, payload, cells: { gateway: g, 'ingest-off': off, mosquitto: m }, efficiency: eff(g), efficiencyOff: eff(off), efficiencyLessIdle: lessIdle(g), throughput: g && m ? round(g.r.msgsPerSecond / m.r.msgsPerSecond, 2) : undefined, line: '' };
    row.line = `${String(shape).padStart(4)} devices QoS ${String(qos).padEnd(2)} ${payload.padEnd(5)}  µs/msg ${b ? `before ${b.r.brokerCpuUsPerMsg} ` : ''}gateway ${g?.r.brokerCpuUsPerMsg ?? '-'} ingest-off ${off?.r.brokerCpuUsPerMsg ?? '-'} mosquitto ${m?.r.brokerCpuUsPerMsg ?? '-'}  CPU efficiency ${row.efficiency ?? '-'} (ingest off ${row.efficiencyOff ?? '-'}; idle subtracted ${row.efficiencyLessIdle ?? '-'})  throughput ratio ${row.throughput ?? '-'}${w && g ? `  | ${WORKERS} workers: ${w.r.brokerCpuUsPerMsg} µs/msg, ${w.r.msgsPerSecond} msg/s vs one process ${g.r.msgsPerSecond} msg/s: throughput x${round(w.r.msgsPerSecond / g.r.msgsPerSecond, 2)}, CPU/msg x${round(w.r.brokerCpuUsPerMsg / g.r.brokerCpuUsPerMsg, 2)}` : ''}`;
    rows.push(row);
  }
  return rows;
}

/** each broker's idle share per shape, e.g. "50 devices: gateway 8%, ingest-off 7%, mosquitto 0%" */
function idleText(cells: Cell[]): string {
  const shapes = [...new Set(cells.map((c) => c.shape))];
  return shapes.map((shape) => {
    const idle = new Map<string, number[]>();
    for (const c of cells.filter((x) => x.shape === shape && x.payload === PAYLOADS[0])) idle.set(c.target, [...(idle.get(c.target) ?? []), c.idle]);
    return `${shape} devices ${[...idle].map(([t, v]) => `${t} ${v.map((x) => `${Math.round(x * 100)}%`).join('/')}`).join(', ')}`;
  }).join('; ') + ` of a core (${QOS.map((m) => `QoS ${modeLabel(m)}`).join('/')}; the shapes without one-in-flight rounds have one figure less)`;
}

function writeSection(rows: Row[], cells: Cell[], loads: Record<string, string>, minutes: number): void {
  const fmt = (c?: Cell) => (c ? `${c.r.brokerCpuUsPerMsg} (${c.rounds.map((x) => x.brokerCpuUsPerMsg).join(', ')})` : '-');
  const rate = (c?: Cell) => (c ? c.r.msgsPerSecond.toLocaleString('en-US') : '-');
  const table = rows.map((r) => `| ${r.shape} | ${r.payload === 'small' ? '48 B' : '1 KiB'} | ${modeLabel(r.qos)} | **${r.efficiency}** | ${r.efficiencyOff} | ${r.efficiencyLessIdle ?? '-'} | ${fmt(r.cells.gateway)} | ${fmt(r.cells['ingest-off'])} | ${fmt(r.cells.mosquitto)} | ${rate(r.cells.gateway)} / ${rate(r.cells['ingest-off'])} / ${rate(r.cells.mosquitto)} | ${r.throughput} |`).join('\n');
  const section = `### Throughput and CPU per message (\`npm run bench:mqtt\`)

Measured ${new Date().toISOString().slice(0, 16)}Z on ${os.cpus().length} cores, Node ${process.versions.node}; the run took ${minutes.toFixed(1)} min.
Load average (1, 5, 15 min) ${Object.entries(loads).map(([k, v]) => `${k === 'start' ? 'at the start' : `after ${k}`} ${v}`).join(', ')}.
Load generator: Debian's \`mosquitto_pub -l\` (C), one process per device, MQTT 5 with mutual TLS (EC P-256
device certificates), every device publishing as fast as it can; per round ${MSGS[0].toLocaleString('en-US')} messages at QoS 0 and
${MSGS[1].toLocaleString('en-US')} at QoS 1 (up to ${INFLIGHT} in flight per device), spread over the devices; and, at ${SERIAL_SHAPES.join(' and ')} devices,
${MSGS['1s'].toLocaleString('en-US')} at QoS 1 with one message in flight per device ("1 (one in flight)": publish, wait for the PUBACK, publish,
as \`mosquitto_pub --repeat N -q 1\` and most embedded clients do; \`mosquitto_pub -l -M 1\` here). Payloads: 48-byte JSON
(\`${PAYLOAD_TEXT.small}\`) and a 1 KiB JSON object of 64 readings. Brokers: the gateway (Aedes; parses every
telemetry payload and batches the latest values to PostgreSQL), the same gateway with \`TELEMETRY_INGEST=false\`
(telemetry routed, not read: the broker's own cost), and Mosquitto 2 (Debian: TLS, \`require_certificate\`,
\`use_identity_as_username\`, \`pattern readwrite devices/%u/#\`; stores nothing). Each broker has its own connected
fleet; after an unmeasured warm-up round of ${WARMUP.toLocaleString('en-US')} messages per broker and payload, ${ROUNDS} rounds alternate between the brokers and the payloads; the figure is the round with the median
broker CPU per message (of an even number, the higher middle one; all rounds in brackets), read from \`/proc/<pid>/stat\`, messages as counted by each broker.
**CPU efficiency** = Mosquitto CPU per message / gateway CPU per message (targets: 0.7 at QoS 0, 1.0 at QoS 1, with 20 or one in flight).
"Idle subtracted": both brokers' CPU per message less their idle CPU over the round (each broker's idle
share of a core, sampled for ${IDLE_MS / 1000} s with its fleet connected and silent before the shape's rounds:
${idleText(cells)}); the gateway's idle CPU (timers, job pollers, garbage collection) is a fixed cost, not a per-message one.

| devices | payload | QoS | CPU efficiency | efficiency, ingest off | efficiency, idle subtracted | gateway µs/msg (rounds) | ingest off µs/msg | Mosquitto µs/msg | messages/s gateway / ingest off / Mosquitto | throughput ratio |
|---|---|---|---|---|---|---|---|---|---|---|
${table}
`;
  writeBenchmarkSection(section);
}

await main();
