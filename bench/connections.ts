/**
 * bench:connections: CONNECTIONS (default 10,000) concurrent mutual-TLS MQTT 5 sessions on one
 * gateway process, then the same clients against Debian's Mosquitto 2 (same certificates, TLS
 * settings and ACL as bench:mqtt): handshakes per second (TLS handshake + CONNECT/CONNACK, all
 * clients started together), broker CPU per session and resident memory per connection, with the
 * ratio gateway/Mosquitto. Then a reconnect round: every client disconnects and connects again
 * presenting the TLS session ticket the broker gave it (TLS 1.3 resumption: no certificate
 * signature or chain check), again for both. Clients run in WORKERS processes (mqtt.js; each
 * issues its own device certificates from the gateway's device CA and prepares their TLS contexts
 * first, so the clients' PEM parsing is not in the measured window). BASELINE_ROOT=<checkout>
 * also runs the gateway of another checkout (same certificates), measured in the same rounds, as
 * a before/after. Row "gateway + haproxy (TLS offload)" (issue 35): a second gateway process
 * behind Debian's HAProxy running docs/haproxy-mqtt-tls.cfg (nbthread = cores, or LB_THREADS; more than one HAProxy
 * process when the sessions need more descriptors than one may have: haproxyProcesses), which terminates
 * the clients' mutual TLS and hands each connection to the gateway's MQTT_PROXY_PORT with a PROXY
 * v2 header; its CPU and RSS growth are both processes' together, and each apart below the table
 * (the gateway's alone: one process's memory per connection behind the terminator). Set
 * HAPROXY=0 to leave it out; ONLY=gateway,offload,mosquitto,baseline (comma list) measures only those
 * rows (the first gateway still starts: its PKI issues the certificates). Rewrites its
 * docs/benchmarks.md section.
 *
 *   npm run bench:connections
 *   CONNECTIONS=2000 npm run bench:connections -- --no-write
 *   CONNECTIONS=2000 BASELINE_ROOT=/tmp/base npm run bench:connections -- --no-write
 *   CLIENT_CHAIN=leaf npm run bench:connections -- --no-write   (clients present their own certificate only)
 *   CONNECTIONS=19000 ONLY=offload,mosquitto npm run bench:connections -- --no-write   (the most one process holds with 20,000 descriptors)
 */
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import readline from 'node:readline';
import tls from 'node:tls';
import { spawn } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import type { MqttClient } from 'mqtt';
import { ROOT, connectMany, cpuSeconds, issueDevices, rssBytes, startGatewayProcess, startMosquitto } from './lib/brokers.js';
import { freePort } from '../src/db/embedded.js';
import { runtimeCommand } from '../src/broker/haproxyRuntime.js';
import { writeBenchmarkSection } from './lib/report.js';

interface WorkerResult { connected: number; failed: number; resumed: number; p50: number; p99: number }

/**
 * Worker: issues its certificates, then on `go <port>` connects them all (full handshakes) and
 * reports, keeping the TLS session ticket each got; `resume <port>` connects them again with those
 * tickets; `stop` disconnects.
 */
async function worker(): Promise<void> {
  const [count, certsDir, index] = process.argv.slice(3);
  // one loopback address per client process: each has its own ~28,000 ephemeral ports towards a broker
  const localAddress = `127.0.0.${2 + Number(index)}`;
  const creds = await issueDevices(certsDir, Number(count));
  const bundle = fs.readFileSync(path.join(certsDir, 'ca-bundle.pem'), 'utf8');
  // CLIENT_CHAIN=leaf: the clients trust the root alone, so they present their own certificate
  // without the device CA and the root (Node chains the client certificate from `ca`)
  const ca = process.env.CLIENT_CHAIN === 'leaf' ? bundle.slice(bundle.lastIndexOf('-----BEGIN CERTIFICATE-----')) : bundle;
  const contexts = creds.map((c) => tls.createSecureContext({ key: c.key, cert: c.cert, ca }));
  /** per broker port, per client: the last ticket the broker sent in the last `go` */
  const sessions = new Map<string, (Buffer | undefined)[]>();
  process.stdout.write('ready\n');
  let clients: MqttClient[] = [];
  for await (const line of readline.createInterface({ input: process.stdin })) {
    const [command, ports, count] = line.split(' ');
    // a broker behind several HAProxy processes: each client process connects to one of them
    const portList = (ports ?? '').split(',');
    const port = portList[Number(index) % portList.length];
    if (command === 'go' || command === 'resume') {
      const latencies: number[] = [];
      let failed = 0;
      const resume = command === 'resume';
      if (!resume) sessions.set(port, new Array(creds.length));
      const tickets = sessions.get(port) ?? [];
      // a failed connect is counted and the others go on (all of this process's sessions were lost with the first failure before)
      clients = await connectMany(Number(port), count ? creds.slice(0, Number(count)) : creds, ca, 100, (ms) => latencies.push(ms), (i) => ({
        secureContext: contexts[i], localAddress,
        ...(resume ? { session: tickets[i] } : { onSession: (s: Buffer) => (tickets[i] = s) }),
      }), (err) => {
        if (failed++ === 0) process.stderr.write(`connect failed (${localAddress}): ${err.message}\n`);
      });
      if (failed > 1) process.stderr.write(`  ${failed} connects failed (${localAddress})\n`);
      latencies.sort((a, b) => a - b);
      const resumed = clients.filter((c) => (c?.stream as tls.TLSSocket | undefined)?.isSessionReused()).length;
      const result: WorkerResult = { connected: clients.filter(Boolean).length, failed, resumed, p50: latencies[Math.floor(latencies.length / 2)], p99: latencies[Math.floor(latencies.length * 0.99)] };
      process.stdout.write(JSON.stringify(result) + '\n');
    } else if (command === 'stop') {
      await Promise.all(clients.map((c) => c?.endAsync(true)));
      clients = [];
      process.stdout.write('stopped\n');
    } else break;
  }
  process.exit(0);
}

interface Measured { connected: number; failed: number; resumed: number; n: number; seconds: number; cpuMsPerSession: number; cpuSettledMsPerSession: number; dbMsPerSession: number; rssBefore: number; rssAfter: number; kibPerConnection: number; latencies: string; apart: { cpuSettledMsPerSession: number; kibPerConnection: number }[] }

/** CPU seconds of a process and all its descendants (the gateway's embedded PostgreSQL) */
function treeCpuSeconds(pid: number): number {
  let total = 0;
  const visit = (p: number) => {
    try {
      total += cpuSeconds(p);
      for (const task of fs.readdirSync(`/proc/${p}/task`)) {
        for (const child of fs.readFileSync(`/proc/${p}/task/${task}/children`, 'utf8').split(' ').filter(Boolean)) visit(Number(child));
      }
    } catch { /* gone meanwhile */ }
  };
  visit(pid);
  return total;
}

interface IdleRates { own: number; children: number }

/** CPU seconds per second a broker (and its child processes) uses while no client is connected; `own` per process of `pids` in `apart` */
async function idleRates(pids: number[]): Promise<IdleRates & { apart: number[] }> {
  const own0 = pids.map(cpuSeconds);
  const tree0 = sum(pids.map(treeCpuSeconds));
  const t0 = performance.now();
  await new Promise((r) => setTimeout(r, 3000));
  const seconds = (performance.now() - t0) / 1000;
  const apart = pids.map((p, i) => (cpuSeconds(p) - own0[i]) / seconds);
  const own = sum(apart);
  return { own, children: (sum(pids.map(treeCpuSeconds)) - tree0) / seconds - own, apart };
}

const sum = (xs: number[]) => xs.reduce((a, x) => a + x, 0);

/**
 * One round against one broker: `go` (full handshakes) or `resume` (with the tickets of the last
 * `go` to the same broker). CPU during the connects, and until 3 s after them (the gateway's
 * batched bookkeeping finishes then; Mosquitto keeps none) less what the broker uses when idle
 * (`idle`: its rates measured before any connect: timers, jobs); `dbMsPerSession`: the broker's
 * child processes (the gateway's PostgreSQL) over the same span, less their idle rate likewise.
 */
async function measure(pids: number[], port: string, n: number, ask: (line: string) => Promise<string[]>, command: 'go' | 'resume', idle: IdleRates & { apart: number[] }): Promise<Measured> {
  await new Promise((r) => setTimeout(r, 2000));
  // the processes of one broker (the gateway and HAProxy in front of it) as one: sums
  const rssEach0 = pids.map(rssBytes);
  const cpuEach0 = pids.map(cpuSeconds);
  const rssBefore = sum(rssEach0);
  const cpuBefore = sum(cpuEach0);
  const treeBefore = sum(pids.map(treeCpuSeconds));
  const cpuSecondsAll = () => sum(pids.map(cpuSeconds));
  const idleRate = idle.own;
  const idleTreeRate = idle.children;
  const start = performance.now();
  const outs = (await ask(`${command} ${port}`)).map((l) => JSON.parse(l) as WorkerResult);
  const seconds = (performance.now() - start) / 1000;
  const cpu = cpuSecondsAll() - cpuBefore;
  await new Promise((r) => setTimeout(r, 3000)); // connect bookkeeping (database writes) settles
  const span = (performance.now() - start) / 1000;
  const cpuSettled = cpuSecondsAll() - cpuBefore - idleRate * span;
  const db = sum(pids.map(treeCpuSeconds)) - treeBefore - (cpuSecondsAll() - cpuBefore) - idleTreeRate * span;
  const rssEach1 = pids.map(rssBytes);
  const cpuEach1 = pids.map(cpuSeconds);
  const rssAfter = sum(rssEach1);
  const connected = outs.reduce((a, o) => a + o.connected, 0);
  await ask('stop');
  const per = (seconds: number) => seconds * 1000 / Math.max(1, connected);
  return {
    connected, failed: outs.reduce((a, o) => a + o.failed, 0), n, seconds, rssBefore, rssAfter, resumed: outs.reduce((a, o) => a + o.resumed, 0),
    cpuMsPerSession: per(cpu), cpuSettledMsPerSession: per(cpuSettled), dbMsPerSession: per(db),
    kibPerConnection: (rssAfter - rssBefore) / Math.max(1, connected) / 1024,
    latencies: outs.map((o) => `${Math.round(o.p50)}/${Math.round(o.p99)}`).join(', '),
    apart: pids.map((_, i) => ({
      cpuSettledMsPerSession: per(cpuEach1[i] - cpuEach0[i] - idle.apart[i] * span),
      kibPerConnection: (rssEach1[i] - rssEach0[i]) / Math.max(1, connected) / 1024,
    })),
  };
}

/** The hard limit of open files of this process (its children inherit it) */
function openFilesLimit(): number {
  const line = fs.readFileSync('/proc/self/limits', 'utf8').split('\n').find((l) => l.startsWith('Max open files'));
  const hard = line?.split(/\s{2,}/)[2];
  return hard && /^\d+$/.test(hard) ? Number(hard) : 1024;
}

/**
 * How many HAProxy processes the offload row needs, and the maxconn of each. A proxied connection
 * takes two descriptors in HAProxy (device side, gateway side), and no process may have more than
 * the hard limit (20,000 here, and not raisable: no CAP_SYS_RESOURCE). One process's maxconn came
 * out at 9,900 with 10,000 sessions: the last 100 clients waited in its accept queue until their
 * CONNACK timeout. So above that the row runs several HAProxy processes on ports of their own,
 * each client process connecting to one (a client resumes at the process that gave it its ticket),
 * all of them pushed the CRLs (HAPROXY_RUNTIME_API lists their admin sockets).
 */
function haproxyProcesses(sessions: number, workers: number): { count: number; maxconn: number } {
  const maxconn = Math.floor((openFilesLimit() - 200) / 2);
  const perWorker = Math.ceil(sessions / workers);
  // client process i connects to HAProxy process i % count; room for closing connections and the health checks
  let count = 1;
  while (count < workers && Math.ceil(workers / count) * perWorker + 500 > maxconn) count += 1;
  return { count, maxconn };
}

const HAPROXY_BIN = ['/usr/sbin/haproxy', '/usr/local/sbin/haproxy'].find((f) => fs.existsSync(f));

/**
 * Debian's HAProxy with docs/haproxy-mqtt-tls.cfg in front of `gw` (both backend servers: its
 * MQTT_PROXY_PORT), the CRL file the gateway wrote; resolves once the MQTT backend is up.
 */
async function startHaproxy(gw: { httpUrl: string; certsDir: string }, proxyPort: number, adminSocket: string, crlFile: string, maxconn: number) {
  const [httpPort, mqttPort] = [await freePort(), await freePort()];
  const http = new URL(gw.httpUrl).host;
  const proc = spawn(HAPROXY_BIN!, ['-db', '-f', 'docs/haproxy-mqtt-tls.cfg'], {
    cwd: ROOT,
    env: {
      ...process.env, LB_HTTP_BIND: `127.0.0.1:${httpPort}`, LB_MQTT_BIND: `127.0.0.1:${mqttPort}`, GATEWAY_A_HTTP: http, GATEWAY_B_HTTP: http,
      // both servers are the one gateway (listening on all addresses), at two addresses: HAProxy's
      // connections come from 127.0.0.1, whose ~28,000 ephemeral ports towards one address must
      // also cover the previous round's connections still in TIME_WAIT
      GATEWAY_A_MQTT: `127.0.0.1:${proxyPort}`, GATEWAY_B_MQTT: `127.0.0.2:${proxyPort}`, LB_ADMIN_BIND: adminSocket,
      LB_THREADS: process.env.LB_THREADS ?? String(os.cpus().length), LB_MAXCONN: String(maxconn),
      TLS_CERT: path.join(gw.certsDir, 'server.crt'), TLS_CA: path.join(gw.certsDir, 'ca-bundle.pem'), TLS_CRL: crlFile,
    },
    // BENCH_HAPROXY_LOG=file: HAProxy's log (`log stdout`) appended there
    stdio: ['ignore', process.env.BENCH_HAPROXY_LOG ? 'pipe' : 'ignore', 'inherit'],
  });
  if (process.env.BENCH_HAPROXY_LOG) proc.stdout!.pipe(fs.createWriteStream(process.env.BENCH_HAPROXY_LOG, { flags: 'a' }));
  const deadline = Date.now() + 30_000;
  for (;;) {
    if (proc.exitCode !== null) throw new Error(`haproxy exited (${proc.exitCode})`);
    const stat = await runtimeCommand(adminSocket, 'show stat').catch(() => '');
    if (/^gateways_mqtt,a,.*,UP,/m.test(stat)) break;
    if (Date.now() > deadline) throw new Error('haproxy: the MQTT backend did not come up');
    await new Promise((r) => setTimeout(r, 300));
  }
  return {
    pid: proc.pid!, port: mqttPort,
    stop: () => new Promise<void>((resolve) => {
      if (proc.exitCode !== null) return resolve();
      proc.once('exit', () => resolve());
      proc.kill('SIGTERM');
    }),
  };
}

async function main(): Promise<void> {
  const { values: args } = parseArgs({ args: process.argv.slice(2), options: { 'no-write': { type: 'boolean', default: false } } });
  const n = Number(process.env.CONNECTIONS ?? 10_000);
  const workersN = Number(process.env.WORKERS ?? 4);
  const only = (process.env.ONLY ?? 'gateway,offload,mosquitto,baseline').split(',');
  // a gateway process and Mosquitto hold every session in one process (Node and Mosquitto raise their soft limit to the hard one)
  if (n + 300 > openFilesLimit()) throw new Error(`${n} sessions need more open files per process than the hard limit ${openFilesLimit()} (ulimit -Hn)`);
  const lb = haproxyProcesses(n, workersN);
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'bench-conn-'));
  const loadBefore = os.loadavg()[0];
  console.log(`bench:connections  ${n} mTLS MQTT 5 sessions, ${workersN} client processes, ${os.cpus().length} CPUs, node ${process.version}`);
  const gateway = await startGatewayProcess(dir);
  // the gateway of another checkout, same certificates (its own database), for a before/after in the same rounds
  const baseline = process.env.BASELINE_ROOT && only.includes('baseline') ? await startGatewayProcess(path.join(dir, 'baseline'), {}, gateway.certsDir, process.env.BASELINE_ROOT) : undefined;
  let mosquitto: Awaited<ReturnType<typeof startMosquitto>> | undefined;
  let offloaded: Awaited<ReturnType<typeof startGatewayProcess>> | undefined;
  const haproxies: Awaited<ReturnType<typeof startHaproxy>>[] = [];
  try {
    if (HAPROXY_BIN && process.env.HAPROXY !== '0' && only.includes('offload')) {
      // a gateway of its own behind HAProxy (same certificates): its memory is not the first gateway's
      const proxyPort = await freePort();
      const adminSockets = Array.from({ length: lb.count }, (_, i) => path.join(dir, `haproxy-admin-${i}.sock`));
      const crlFile = path.join(dir, 'haproxy-crl.pem');
      offloaded = await startGatewayProcess(path.join(dir, 'offloaded'), { MQTT_HOST: '0.0.0.0', MQTT_PROXY_PORT: String(proxyPort), TRUSTED_PROXIES: '127.0.0.1', HAPROXY_RUNTIME_API: adminSockets.join(','), HAPROXY_CRL_PATH: crlFile }, gateway.certsDir);
      for (const socket of adminSockets) haproxies.push(await startHaproxy(offloaded, proxyPort, socket, crlFile, lb.maxconn));
      if (lb.count > 1) console.log(`  ${lb.count} HAProxy processes of maxconn ${lb.maxconn} (hard limit of open files ${openFilesLimit()}: two per proxied connection)`);
    }
    const per = Math.ceil(n / workersN);
    const workers = Array.from({ length: workersN }, (_, i) => spawn(process.execPath, ['--import', 'tsx', fileURLToPath(import.meta.url), '--conn-worker', String(Math.min(per, n - i * per)), gateway.certsDir, String(i)], { cwd: ROOT, stdio: ['pipe', 'pipe', 'inherit'] }));
    const lines = workers.map((w) => readline.createInterface({ input: w.stdout! }));
    const nextLine = (i: number) => new Promise<string>((resolve) => lines[i].once('line', resolve));
    const ask = (line: string) => {
      const answers = workers.map((_, i) => nextLine(i));
      for (const w of workers) w.stdin!.write(`${line}\n`);
      return Promise.all(answers);
    };
    const t0 = performance.now();
    await Promise.all(workers.map((_, i) => nextLine(i)));
    console.log(`  certificates issued in ${((performance.now() - t0) / 1000).toFixed(1)} s`);
    mosquitto = await startMosquitto(dir, gateway.certsDir);
    const brokers: { name: string; pids: number[]; port: string; idle?: IdleRates & { apart: number[] } }[] = [
      ...(baseline ? [{ name: 'gateway, baseline', pids: [baseline.pid], port: String(baseline.mqttPort) }] : []),
      ...(only.includes('gateway') ? [{ name: 'gateway (Aedes)', pids: [gateway.pid], port: String(gateway.mqttPort) }] : []),
      ...(haproxies.length && offloaded ? [{ name: OFFLOAD, pids: [offloaded.pid, ...haproxies.map((h) => h.pid)], port: haproxies.map((h) => h.port).join(',') }] : []),
      ...(only.includes('mosquitto') ? [{ name: 'mosquitto 2', pids: [mosquitto.pid], port: String(mosquitto.port) }] : []),
    ];
    for (const b of brokers) b.idle = await idleRates(b.pids);
    console.log(`  idle CPU: ${brokers.map((b) => `${b.name} ${(b.idle!.own * 1000).toFixed(0)} ms/s (child processes ${(b.idle!.children * 1000).toFixed(0)} ms/s)`).join(', ')}`);
    // not measured: every broker's first connects (JIT warm-up of the gateways, session caches)
    for (const b of brokers) {
      await ask(`go ${b.port} ${Math.ceil(Math.min(500, n / 4) / workersN)}`);
      await ask('stop');
    }
    const results: { name: string; round: 'full' | 'resumed'; r: Measured }[] = [];
    for (const command of ['go', 'resume'] as const) {
      for (const b of brokers) {
        const r = await measure(b.pids, b.port, n, ask, command, b.idle!);
        const round = command === 'go' ? 'full' : 'resumed';
        results.push({ name: b.name, round, r });
        console.log(`  ${b.name}, ${round}: ${r.connected}/${n}${r.failed ? ` (${r.failed} failed)` : ''} in ${r.seconds.toFixed(1)} s (${r.resumed} resumed), ${r.cpuMsPerSession.toFixed(2)} ms CPU per session (${r.cpuSettledMsPerSession.toFixed(2)} with the 3 s after, less idle; database ${r.dbMsPerSession.toFixed(2)}), ${r.kibPerConnection.toFixed(1)} KiB per connection`);
      }
    }
    for (const w of workers) w.stdin!.write('exit\n');
    await Promise.all(workers.map((w) => new Promise((r) => (w.exitCode !== null ? r(null) : w.once('exit', r)))));
    const rows = results.map(({ name, round, r }) =>
      `| ${name} | ${round}${round === 'resumed' ? ` (${r.resumed.toLocaleString('en-US')})` : ''} | ${r.connected.toLocaleString('en-US')} of ${r.n.toLocaleString('en-US')} | **${Math.round(r.connected / r.seconds)}** | ${r.seconds.toFixed(1)} s | ${r.latencies} | ${r.cpuMsPerSession.toFixed(2)} / **${r.cpuSettledMsPerSession.toFixed(2)}** | ${r.dbMsPerSession.toFixed(2)} | ${round === 'full' ? `${(r.rssBefore / 2 ** 20).toFixed(0)} / ${(r.rssAfter / 2 ** 20).toFixed(0)} MiB | **${r.kibPerConnection.toFixed(1)}**` : '- | -'} |`);
    const table = `| broker | handshakes (resumed) | sessions | handshakes/s | time to connect all | connect latency p50/p99 per client process (ms) | broker CPU ms per session: connects / with the 3 s after, less idle | its child processes (PostgreSQL) CPU ms per session | RSS before / after | KiB per connection |
|---|---|---|---|---|---|---|---|---|---|
${rows.join('\n')}`;
    console.log(`\n${table}`);
    const offloadRow = haproxies.length > 0;
    const of = (name: string, round: string) => results.find((x) => x.name === name && x.round === round)?.r;
    const ratioLine = (name: string) => (['full', 'resumed'] as const).map((round) => {
      const g = of(name, round);
      const m = of('mosquitto 2', round);
      if (!g || !m) return `${round}: -`;
      return `${round}: handshakes/s ${((g.connected / g.seconds) / (m.connected / m.seconds)).toFixed(2)}, CPU per session ${(m.cpuSettledMsPerSession / g.cpuSettledMsPerSession).toFixed(2)} (Mosquitto's / the gateway's, with the 3 s after, less idle)${round === 'full' ? `, memory per connection ${(m.kibPerConnection / g.kibPerConnection).toFixed(2)}` : ''}`;
    }).join('; ');
    const apart = offloadRow ? (['full', 'resumed'] as const).map((round) => {
      const r = of(OFFLOAD, round)!;
      // the HAProxy processes together
      const lbCpu = sum(r.apart.slice(1).map((a) => a.cpuSettledMsPerSession));
      const lbKib = sum(r.apart.slice(1).map((a) => a.kibPerConnection));
      return `${round}: gateway ${r.apart[0].cpuSettledMsPerSession.toFixed(2)} ms CPU per session${round === 'full' ? ` and ${r.apart[0].kibPerConnection.toFixed(1)} KiB per connection` : ''}, HAProxy ${lbCpu.toFixed(2)} ms${round === 'full' ? ` and ${lbKib.toFixed(1)} KiB` : ''}`;
    }).join('; ') : '';
    const ratios = [
      ...(only.includes('gateway') ? [`Ratios gateway/Mosquitto: ${ratioLine('gateway (Aedes)')}.`] : []),
      ...(offloadRow ? [`Ratios gateway + haproxy (TLS offload)/Mosquitto: ${ratioLine(OFFLOAD)}.`, `Gateway + haproxy apart (CPU with the 3 s after, less idle; RSS growth): ${apart}.`] : []),
      ...(baseline ? [`Baseline gateway/Mosquitto: ${ratioLine('gateway, baseline')}.`] : []),
    ].join('\n');
    console.log(ratios);
    const loadAfter = os.loadavg()[0];
    console.log(`load average ${loadBefore.toFixed(1)} at the start, ${loadAfter.toFixed(1)} at the end`);
    if (!args['no-write']) {
      const section = `### Connections (\`npm run bench:connections\`)

Measured ${new Date().toISOString().slice(0, 16)}Z on ${os.cpus().length} cores, Node ${process.versions.node} (1-minute load average ${loadBefore.toFixed(1)} at the start, ${loadAfter.toFixed(1)} at the end).
${n.toLocaleString('en-US')} concurrent MQTT 5 sessions with mutual TLS (EC P-256 client certificates), opened all at once by
${workersN} mqtt.js client processes (100 connects in flight each, TLS contexts prepared before), first against the gateway, then the same clients
against Mosquitto 2 (Debian; the bench:mqtt configuration); then all of them again, each presenting the TLS 1.3 session
ticket it got (resumed: no certificate signature or chain check). The client processes share the 2 cores with the broker,
so handshakes/s is a floor for both; the broker CPU per session is the figure that compares the brokers' own cost.
Each broker gets an unmeasured warm-up round first; the CPU "with the 3 s after" runs until 3 s after the last CONNACK
(the gateway's batched bookkeeping is written by then) less the broker's idle rate, measured once before any connect.
The gateway's CPU per session includes the connect bookkeeping (connectivity rows, retained lifecycle messages,
domain events, written in batches since issue 19; the certificate first-use question, which here is always asked,
batched, since the bench's certificates are minutes old); its PostgreSQL's CPU is the separate column. Mosquitto keeps nothing.
The gateway runs with glibc's \`MALLOC_MMAP_THRESHOLD_=65536\`, as deployed (Dockerfile, \`npm start\`).
${offloadRow ? `Row "${OFFLOAD}": a second gateway process behind Debian's HAProxy ${`(docs/haproxy-mqtt-tls.cfg, nbthread = cores${lb.count > 1 ? `; ${lb.count} processes of maxconn ${lb.maxconn}, each client process connecting to one: two descriptors per proxied connection, ${openFilesLimit()} at most per process here` : ''})`}, which terminates
the mutual TLS (device CA, CRL) and hands each connection to the gateway's MQTT_PROXY_PORT with a PROXY v2 header; its CPU
and RSS growth are all processes' together, the gateway's and HAProxy's apart in the line below the ratios.
` : ''}
${table}

${ratios}
`;
      writeBenchmarkSection(section);
    }
  } finally {
    await Promise.all(haproxies.map((h) => h.stop()));
    await offloaded?.stop();
    await mosquitto?.stop();
    await baseline?.stop();
    await gateway.stop();
    fs.rmSync(dir, { recursive: true, force: true });
  }
}

/** the row of the gateway behind HAProxy */
const OFFLOAD = 'gateway + haproxy (TLS offload)';

if (process.argv[2] === '--conn-worker') await worker();
else await main();
