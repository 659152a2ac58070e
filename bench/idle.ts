/**
 * bench:idle: what the gateway process costs while nothing happens (issue 19). The gateway is
 * started as bench:mqtt starts it (`node --import tsx src/main.ts`, embedded PostgreSQL, loopback),
 * and Mosquitto 2 beside it (same device CA); each gets DEVICES connected mqtt.js devices that stay
 * silent (keepalive 600 s). After SETTLE_S seconds, ROUNDS windows of WINDOW_S seconds read, per
 * process, its CPU (user + system, /proc/<pid>/stat) and its context switches (every thread's
 * voluntary + involuntary, /proc/<pid>/task/<tid>/status: the wakeups), and the same for the
 * gateway's embedded PostgreSQL (its server and backends). All processes are read over the same
 * windows, so they see the same machine; the figure is the median window.
 *
 *   npm run bench:idle                          (DEVICES=300 SETTLE_S=20 WINDOW_S=30 ROUNDS=3)
 *   COMPARE_ROOT=/work/main npm run bench:idle  (adds 'before': the gateway of another checkout)
 *   COMPARE_ROOTS='a=/tmp/a,b=/tmp/b' npm run bench:idle -- --no-write   (more checkouts, by name)
 *   DEVICES=0 ROUNDS=1 npm run bench:idle -- --no-write
 *
 * GATEWAY_ENV='{"NAME":"value"}' adds a gateway with that environment; BENCH_CPU_PROF=<dir> writes V8
 * CPU profiles of the gateways (at exit). A run rewrites its docs/benchmarks.md section unless --no-write.
 */
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { parseArgs } from 'node:util';
import { execFileSync } from 'node:child_process';
import type { MqttClient } from 'mqtt';
import { connectMany, cpuSeconds, descendants, issueDevices, startGatewayProcess, startMosquitto, type GatewayProcess } from './lib/brokers.js';
import { writeBenchmarkSection } from './lib/report.js';

const { values: args } = parseArgs({ options: { 'no-write': { type: 'boolean', default: false } } });
const DEVICES = Number(process.env.DEVICES ?? 300);
const SETTLE_S = Number(process.env.SETTLE_S ?? 20);
const WINDOW_S = Number(process.env.WINDOW_S ?? 30);
const ROUNDS = Number(process.env.ROUNDS ?? 3);
const COMPARE_ROOT = process.env.COMPARE_ROOT;
/** more checkouts, each a gateway of its own in the same windows: 'name=dir,name=dir' (e.g. one per step of a change) */
const COMPARE_ROOTS = (process.env.COMPARE_ROOTS ?? '').split(',').filter(Boolean).map((x) => x.split('=') as [string, string]);

/** the checked-out commit of a directory, for the record */
const commitOf = (dir: string) => {
  try { return execFileSync('git', ['-C', dir, 'rev-parse', '--short', 'HEAD'], { encoding: 'utf8' }).trim(); } catch { return 'unknown'; }
};
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const loadavg = () => os.loadavg().map((l) => l.toFixed(2)).join(' ');

/** voluntary + involuntary context switches of every thread of a process (0 once it is gone) */
function contextSwitches(pid: number): number {
  let sum = 0;
  let tids: string[];
  try { tids = fs.readdirSync(`/proc/${pid}/task`); } catch { return 0; }
  for (const tid of tids) {
    try {
      const status = fs.readFileSync(`/proc/${pid}/task/${tid}/status`, 'utf8');
      sum += Number(/^voluntary_ctxt_switches:\s+(\d+)/m.exec(status)?.[1] ?? 0) + Number(/^nonvoluntary_ctxt_switches:\s+(\d+)/m.exec(status)?.[1] ?? 0);
    } catch { /* thread exited */ }
  }
  return sum;
}

const comm = (pid: number) => { try { return fs.readFileSync(`/proc/${pid}/comm`, 'utf8').trim(); } catch { return ''; } };
const cpuOf = (pids: number[]) => pids.reduce((s, p) => { try { return s + cpuSeconds(p); } catch { return s; } }, 0);
/** CPU seconds of the reaped children of a process (cutime + cstime): a PostgreSQL backend's that ended */
function reapedSeconds(pid: number): number {
  try {
    const stat = fs.readFileSync(`/proc/${pid}/stat`, 'utf8');
    const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    return (Number(fields[13]) + Number(fields[14])) / 100;
  } catch { return 0; }
}
/** context switches per process (a process that ended is missing: its switches are lost, not negative) */
const switchesOf = (pids: number[]) => new Map(pids.map((p) => [p, contextSwitches(p)]));
const switchesSince = (before: Map<number, number>, pids: number[]) =>
  pids.reduce((s, p) => { const now = contextSwitches(p); return now ? s + now - (before.get(p) ?? 0) : s; }, 0);

interface Subject {
  name: string;
  pids(): number[];
  /** CPU seconds of its processes that ended (counted apart: their /proc entries are gone) */
  ended?(): number;
}
interface Reading { cpuShare: number; wakeupsPerS: number }

const cmdline = (pid: number) => { try { return fs.readFileSync(`/proc/${pid}/cmdline`, 'utf8'); } catch { return ''; } };
const isPostgres = (p: number) => comm(p).startsWith('postgres') || comm(p) === 'postmaster';
/** a multi-core node's worker processes (node:cluster children of the primary: BROKER_WORKERS > 1) */
const workersOf = (pid: number) => descendants(pid).filter((p) => !isPostgres(p) && comm(p) !== 'esbuild' && cmdline(p).includes('src/main.ts'));

/** a gateway: its own process (and its worker processes, if any), and (apart) its PostgreSQL; never tsx's esbuild */
function gatewaySubjects(name: string, g: GatewayProcess): Subject[] {
  return [
    { name, pids: () => [g.pid, ...workersOf(g.pid)] },
    {
      name: `${name} PostgreSQL`,
      pids: () => descendants(g.pid).filter((p) => comm(p).startsWith('postgres') || comm(p) === 'postmaster'),
      // backends that ended are the postmaster's reaped children
      ended: () => descendants(g.pid).filter((p) => comm(p).startsWith('postgres') || comm(p) === 'postmaster').reduce((s, p) => s + reapedSeconds(p), 0),
    },
  ];
}

async function connectFleet(port: number, certsDir: string, creds: Awaited<ReturnType<typeof issueDevices>>): Promise<MqttClient[]> {
  const ca = fs.readFileSync(path.join(certsDir, 'ca-bundle.pem'), 'utf8');
  return connectMany(port, creds, ca, 20);
}

async function main(): Promise<void> {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'bench-idle-'));
  fs.chmodSync(dir, 0o755); // embedded PostgreSQL runs as its own user when we are root
  const loadStart = loadavg();
  console.log(`bench:idle  ${DEVICES} silent devices per broker, settle ${SETTLE_S} s, ${ROUNDS} windows of ${WINDOW_S} s, ${os.cpus().length} CPUs, node ${process.version}, load ${loadStart}`);
  const stops: (() => Promise<void>)[] = [];
  const fleets: MqttClient[] = [];
  try {
    const gateway = await startGatewayProcess(path.join(dir, 'gw'));
    stops.push(() => gateway.stop());
    const before = COMPARE_ROOT ? await startGatewayProcess(path.join(dir, 'gw-before'), {}, gateway.certsDir, path.resolve(COMPARE_ROOT)) : undefined;
    if (before) stops.push(() => before.stop());
    const envGateway = process.env.GATEWAY_ENV ? await startGatewayProcess(path.join(dir, 'gw-env'), JSON.parse(process.env.GATEWAY_ENV) as Record<string, string>, gateway.certsDir) : undefined;
    if (envGateway) stops.push(() => envGateway.stop());
    const others: [string, GatewayProcess][] = [];
    for (const [name, root] of COMPARE_ROOTS) {
      const g = await startGatewayProcess(path.join(dir, `gw-${name}`), {}, gateway.certsDir, path.resolve(root));
      stops.push(() => g.stop());
      others.push([name, g]);
    }
    const mosquitto = await startMosquitto(dir, gateway.certsDir);
    stops.push(() => mosquitto.stop());
    const creds = await issueDevices(gateway.certsDir, DEVICES);
    for (const port of [gateway.mqttPort, ...(before ? [before.mqttPort] : []), ...(envGateway ? [envGateway.mqttPort] : []), ...others.map(([, g]) => g.mqttPort), mosquitto.port]) {
      fleets.push(...(await connectFleet(port, gateway.certsDir, creds)));
    }
    const subjects: Subject[] = [
      ...gatewaySubjects('gateway', gateway),
      ...(before ? gatewaySubjects('before', before) : []),
      ...(envGateway ? gatewaySubjects('gateway-env', envGateway) : []),
      ...others.flatMap(([name, g]) => gatewaySubjects(name, g)),
      { name: 'mosquitto', pids: () => [mosquitto.pid] },
    ];
    console.log(`  ${fleets.length} devices connected; settling ${SETTLE_S} s`);
    await sleep(SETTLE_S * 1000);
    const readings = new Map<string, Reading[]>(subjects.map((s) => [s.name, []]));
    for (let round = 1; round <= ROUNDS; round++) {
      const pids = subjects.map((s) => s.pids());
      const cpu = (i: number, p: number[]) => cpuOf(p) + (subjects[i].ended?.() ?? 0);
      const c0 = pids.map((p, i) => cpu(i, p));
      const w0 = pids.map(switchesOf);
      const t0 = performance.now();
      await sleep(WINDOW_S * 1000);
      const seconds = (performance.now() - t0) / 1000;
      const line = subjects.map((s, i) => {
        // processes that appeared in the window count from zero, those that ended through `ended`
        const now = [...new Set([...pids[i], ...s.pids()])];
        const r = { cpuShare: (cpu(i, now) - c0[i]) / seconds, wakeupsPerS: switchesSince(w0[i], now) / seconds };
        readings.get(s.name)!.push(r);
        return `${s.name} ${(r.cpuShare * 100).toFixed(2)}% (${r.wakeupsPerS.toFixed(0)}/s)`;
      });
      console.log(`  window ${round}: ${line.join(', ')}  load ${loadavg()}`);
    }
    const median = (xs: Reading[]) => [...xs].sort((a, b) => a.cpuShare - b.cpuShare)[Math.floor((xs.length - 1) / 2)];
    const rows = subjects.map((s) => ({ name: s.name, m: median(readings.get(s.name)!), all: readings.get(s.name)! }));
    for (const r of rows) console.log(`${r.name.padEnd(22)} ${(r.m.cpuShare * 100).toFixed(2)}% of a core, ${r.m.wakeupsPerS.toFixed(0)} context switches/s (windows: ${r.all.map((x) => `${(x.cpuShare * 100).toFixed(2)}%`).join(', ')})`);
    const loadEnd = loadavg();
    console.log(`load average at the start ${loadStart}, at the end ${loadEnd}`);
    if (!args['no-write']) {
      const table = rows.map((r) => `| ${r.name} | ${(r.m.cpuShare * 100).toFixed(2)}% | ${r.all.map((x) => `${(x.cpuShare * 100).toFixed(2)}%`).join(', ')} | ${r.m.wakeupsPerS.toFixed(0)} |`).join('\n');
      writeBenchmarkSection(`### Idle CPU of the gateway (\`npm run bench:idle\`)

Measured ${new Date().toISOString().slice(0, 16)}Z on ${os.cpus().length} cores, Node ${process.versions.node}; load average (1, 5, 15 min) ${loadStart} at the start, ${loadEnd} at the end.
The gateway as bench:mqtt starts it (embedded PostgreSQL) and Mosquitto 2, each with ${DEVICES} connected mutual-TLS
MQTT 5 devices that stay silent (keepalive 600 s); after ${SETTLE_S} s, ${ROUNDS} windows of ${WINDOW_S} s over which every process is
read at once: CPU (user + system, \`/proc/<pid>/stat\`) as a share of one core, and context switches of all its threads
per second (its wakeups). The figure is the median window (all windows listed). "gateway": commit ${commitOf('.')}${COMPARE_ROOT ? `; "before": commit ${commitOf(COMPARE_ROOT)} (${COMPARE_ROOT}) in the same run` : ''}.
PostgreSQL: its server and backends, with the CPU of backends that ended in the window (the postmaster's reaped children).

| process | idle CPU, share of a core | windows | context switches/s |
|---|---|---|---|
${table}
`);
    }
  } finally {
    await Promise.all(fleets.map((c) => c.endAsync(true).catch(() => {})));
    for (const stop of stops.reverse()) await stop().catch(() => {});
    fs.rmSync(dir, { recursive: true, force: true });
  }
}

await main();
