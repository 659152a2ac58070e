/**
 * bench:connections: CONNECTIONS (default 10,000) concurrent mutual-TLS MQTT 5 sessions on one
 * gateway process, then the same clients against Debian's Mosquitto 2 (same certificates, TLS
 * settings and ACL as bench:mqtt): handshakes per second (TLS handshake + CONNECT/CONNACK, all
 * clients started together), broker CPU per session and resident memory per connection, with the
 * ratio gateway/Mosquitto. Clients run in WORKERS processes (mqtt.js; each issues its own device
 * certificates from the gateway's device CA first). Rewrites its docs/benchmarks.md section.
 *
 *   npm run bench:connections
 *   CONNECTIONS=2000 npm run bench:connections -- --no-write
 */
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import readline from 'node:readline';
import { spawn } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import type { MqttClient } from 'mqtt';
import { ROOT, connectMany, cpuSeconds, issueDevices, rssBytes, startGatewayProcess, startMosquitto } from './lib/brokers.js';
import { writeBenchmarkSection } from './lib/report.js';

interface WorkerResult { connected: number; failed: number; p50: number; p99: number }

/** Worker: issues its certificates, then on `go <port>` connects them all and reports; `stop` disconnects. */
async function worker(): Promise<void> {
  const [count, certsDir] = process.argv.slice(3);
  const creds = await issueDevices(certsDir, Number(count));
  const ca = fs.readFileSync(path.join(certsDir, 'ca-bundle.pem'), 'utf8');
  process.stdout.write('ready\n');
  let clients: MqttClient[] = [];
  for await (const line of readline.createInterface({ input: process.stdin })) {
    const [command, port] = line.split(' ');
    if (command === 'go') {
      const latencies: number[] = [];
      let failed = 0;
      try {
        clients = await connectMany(Number(port), creds, ca, 100, (ms) => latencies.push(ms));
      } catch (err) {
        failed += 1;
        process.stderr.write(`connect failed: ${(err as Error).message}\n`);
      }
      latencies.sort((a, b) => a - b);
      const result: WorkerResult = { connected: clients.filter(Boolean).length, failed, p50: latencies[Math.floor(latencies.length / 2)], p99: latencies[Math.floor(latencies.length * 0.99)] };
      process.stdout.write(JSON.stringify(result) + '\n');
    } else if (command === 'stop') {
      await Promise.all(clients.map((c) => c?.endAsync(true)));
      clients = [];
      process.stdout.write('stopped\n');
    } else break;
  }
  process.exit(0);
}

interface Measured { connected: number; n: number; seconds: number; cpuMsPerSession: number; rssBefore: number; rssAfter: number; kibPerConnection: number; latencies: string }

async function measure(pid: number, port: number, n: number, ask: (line: string) => Promise<string[]>): Promise<Measured> {
  await new Promise((r) => setTimeout(r, 2000));
  const rssBefore = rssBytes(pid);
  const cpuBefore = cpuSeconds(pid);
  const start = performance.now();
  const outs = (await ask(`go ${port}`)).map((l) => JSON.parse(l) as WorkerResult);
  const seconds = (performance.now() - start) / 1000;
  const cpu = cpuSeconds(pid) - cpuBefore;
  await new Promise((r) => setTimeout(r, 3000)); // connect bookkeeping (database writes) settles
  const rssAfter = rssBytes(pid);
  const connected = outs.reduce((a, o) => a + o.connected, 0);
  await ask('stop');
  return {
    connected, n, seconds, rssBefore, rssAfter,
    cpuMsPerSession: cpu * 1000 / Math.max(1, connected),
    kibPerConnection: (rssAfter - rssBefore) / Math.max(1, connected) / 1024,
    latencies: outs.map((o) => `${Math.round(o.p50)}/${Math.round(o.p99)}`).join(', '),
  };
}

async function main(): Promise<void> {
  const { values: args } = parseArgs({ args: process.argv.slice(2), options: { 'no-write': { type: 'boolean', default: false } } });
  const n = Number(process.env.CONNECTIONS ?? 10_000);
  const workersN = Number(process.env.WORKERS ?? 4);
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'bench-conn-'));
  const loadBefore = os.loadavg()[0];
  console.log(`bench:connections  ${n} mTLS MQTT 5 sessions, ${workersN} client processes, ${os.cpus().length} CPUs, node ${process.version}`);
  const gateway = await startGatewayProcess(dir);
  let mosquitto: Awaited<ReturnType<typeof startMosquitto>> | undefined;
  try {
    const per = Math.ceil(n / workersN);
    const workers = Array.from({ length: workersN }, (_, i) => spawn(process.execPath, ['--import', 'tsx', fileURLToPath(import.meta.url), '--conn-worker', String(Math.min(per, n - i * per)), gateway.certsDir], { cwd: ROOT, stdio: ['pipe', 'pipe', 'inherit'] }));
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
    const g = await measure(gateway.pid, gateway.mqttPort, n, ask);
    console.log(`  gateway:   ${g.connected}/${n} in ${g.seconds.toFixed(1)} s, ${g.cpuMsPerSession.toFixed(2)} ms CPU per session, ${g.kibPerConnection.toFixed(1)} KiB per connection`);
    const m = await measure(mosquitto.pid, mosquitto.port, n, ask);
    console.log(`  mosquitto: ${m.connected}/${n} in ${m.seconds.toFixed(1)} s, ${m.cpuMsPerSession.toFixed(2)} ms CPU per session, ${m.kibPerConnection.toFixed(1)} KiB per connection`);
    for (const w of workers) w.stdin!.write('exit\n');
    await Promise.all(workers.map((w) => new Promise((r) => (w.exitCode !== null ? r(null) : w.once('exit', r)))));
    const rows = ([['gateway (Aedes)', g], ['mosquitto 2', m]] as const).map(([name, r]) =>
      `| ${name} | ${r.connected.toLocaleString('en-US')} of ${r.n.toLocaleString('en-US')} | ${Math.round(r.connected / r.seconds)} | ${r.seconds.toFixed(1)} s | ${r.latencies} | ${r.cpuMsPerSession.toFixed(2)} | ${(r.rssBefore / 2 ** 20).toFixed(0)} / ${(r.rssAfter / 2 ** 20).toFixed(0)} MiB | **${r.kibPerConnection.toFixed(1)}** |`);
    const table = `| broker | sessions | handshakes/s | time to connect all | connect latency p50/p99 per client process (ms) | broker CPU ms per session | RSS before / after | KiB per connection |
|---|---|---|---|---|---|---|---|
${rows.join('\n')}`;
    console.log(`\n${table}`);
    const ratios = `Ratios gateway/Mosquitto: handshakes/s ${((g.connected / g.seconds) / (m.connected / m.seconds)).toFixed(2)}, CPU per session ${(m.cpuMsPerSession / g.cpuMsPerSession).toFixed(2)} (Mosquitto's / the gateway's), memory per connection ${(m.kibPerConnection / g.kibPerConnection).toFixed(2)} (Mosquitto's / the gateway's).`;
    console.log(ratios);
    if (!args['no-write']) {
      const section = `### Connections (\`npm run bench:connections\`)

Measured ${new Date().toISOString().slice(0, 16)}Z on ${os.cpus().length} cores, Node ${process.versions.node} (1-minute load average ${loadBefore.toFixed(1)} at the start).
${n.toLocaleString('en-US')} concurrent MQTT 5 sessions with mutual TLS (EC P-256 client certificates), opened all at once by
${workersN} mqtt.js client processes (100 connects in flight each), first against the gateway, then the same clients
against Mosquitto 2 (Debian; the bench:mqtt configuration). The client processes share the 2 cores with the broker,
so handshakes/s is a floor for both. The gateway's CPU per session includes the connect bookkeeping
(connectivity row, retained lifecycle message, domain event; since issue 19 no first-use query for a
certificate that is neither young nor awaiting first use); Mosquitto keeps nothing. A perf profile of
the gateway during the connects (2026-11-22) put about 23% in OpenSSL, 7% in OpenSSL's locks and 10% in
the PostgreSQL bookkeeping; the rest is Node's TLS and stream objects, Aedes and garbage collection.
The bench's device certificates are minutes old, so here every connect still takes the first-use
query (a young certificate is always looked up); devices in the field mostly present older ones.
The gateway runs with glibc's \`MALLOC_MMAP_THRESHOLD_=65536\`, as deployed (Dockerfile, \`npm start\`).

${table}

${ratios}
`;
      writeBenchmarkSection(section);
    }
  } finally {
    await mosquitto?.stop();
    await gateway.stop();
    fs.rmSync(dir, { recursive: true, force: true });
  }
}

if (process.argv[2] === '--conn-worker') await worker();
else await main();
