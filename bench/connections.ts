/**
 * bench:connections: CONNECTIONS (default 10,000) concurrent mutual-TLS MQTT 5 sessions on one
 * gateway process: handshakes per second (TLS handshake + CONNECT/CONNACK, all clients started
 * together) and the gateway's resident memory per connection. Clients run in WORKERS processes
 * (each issues its own device certificates from the gateway's device CA first).
 *
 *   npm run bench:connections
 *   CONNECTIONS=2000 npm run bench:connections
 */
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import readline from 'node:readline';
import { spawn } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import type { MqttClient } from 'mqtt';
import { connectMany, cpuSeconds, issueDevices, rssBytes, startGatewayProcess } from './lib/brokers.js';

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');

async function worker(): Promise<void> {
  const [port, count, certsDir] = process.argv.slice(3);
  const creds = await issueDevices(certsDir, Number(count));
  const ca = fs.readFileSync(path.join(certsDir, 'ca-bundle.pem'), 'utf8');
  process.stdout.write('ready\n');
  const lines = readline.createInterface({ input: process.stdin });
  await new Promise((r) => lines.once('line', r));
  const latencies: number[] = [];
  let clients: MqttClient[] = [];
  let failed = 0;
  try {
    clients = await connectMany(Number(port), creds, ca, 100, (ms) => latencies.push(ms));
  } catch (err) {
    failed += 1;
    process.stderr.write(`connect failed: ${(err as Error).message}\n`);
  }
  latencies.sort((a, b) => a - b);
  process.stdout.write(JSON.stringify({ connected: clients.filter(Boolean).length, failed, p50: latencies[Math.floor(latencies.length / 2)], p99: latencies[Math.floor(latencies.length * 0.99)] }) + '\n');
  await new Promise((r) => lines.once('line', r));
  for (const c of clients) c?.end(true);
  process.exit(0);
}

async function main(): Promise<void> {
  const n = Number(process.env.CONNECTIONS ?? 10_000);
  const workersN = Number(process.env.WORKERS ?? 4);
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'bench-conn-'));
  console.log(`bench:connections  ${n} mTLS MQTT 5 sessions, ${workersN} client processes, ${os.cpus().length} CPUs, node ${process.version}`);
  const gateway = await startGatewayProcess(dir);
  try {
    const per = Math.ceil(n / workersN);
    const workers = Array.from({ length: workersN }, (_, i) => spawn(process.execPath, ['--import', 'tsx', fileURLToPath(import.meta.url), '--conn-worker', String(gateway.mqttPort), String(Math.min(per, n - i * per)), gateway.certsDir], { cwd: ROOT, stdio: ['pipe', 'pipe', 'inherit'] }));
    const lines = workers.map((w) => readline.createInterface({ input: w.stdout! }));
    const nextLine = (i: number) => new Promise<string>((resolve) => lines[i].once('line', resolve));
    const t0 = performance.now();
    await Promise.all(workers.map((_, i) => nextLine(i)));
    console.log(`  certificates issued in ${((performance.now() - t0) / 1000).toFixed(1)} s`);
    await new Promise((r) => setTimeout(r, 2000));
    const rssBefore = rssBytes(gateway.pid);
    const cpuBefore = cpuSeconds(gateway.pid);
    const start = performance.now();
    const results = workers.map((_, i) => nextLine(i));
    for (const w of workers) w.stdin!.write('go\n');
    const outs = (await Promise.all(results)).map((l) => JSON.parse(l) as { connected: number; failed: number; p50: number; p99: number });
    const seconds = (performance.now() - start) / 1000;
    const cpu = cpuSeconds(gateway.pid) - cpuBefore;
    await new Promise((r) => setTimeout(r, 3000)); // let connect bookkeeping (DB writes) settle
    const rssAfter = rssBytes(gateway.pid);
    const connected = outs.reduce((a, o) => a + o.connected, 0);
    const rows = [
      ['sessions connected', `${connected} of ${n}`],
      ['handshakes/s (TLS + CONNECT, all at once)', Math.round(connected / seconds)],
      ['time to connect all', `${seconds.toFixed(1)} s`],
      ['connect latency p50 / p99 per worker (ms)', outs.map((o) => `${Math.round(o.p50)}/${Math.round(o.p99)}`).join(', ')],
      ['gateway CPU during connects', `${cpu.toFixed(1)} s (${(cpu * 1000 / Math.max(1, connected)).toFixed(2)} ms per session)`],
      ['gateway RSS before / after', `${(rssBefore / 2 ** 20).toFixed(0)} MiB / ${(rssAfter / 2 ** 20).toFixed(0)} MiB`],
      ['resident memory per connection', `${((rssAfter - rssBefore) / Math.max(1, connected) / 1024).toFixed(1)} KiB`],
    ];
    console.log('\n| measure | value |\n|---|---|');
    for (const [k, v] of rows) console.log(`| ${k} | ${v} |`);
    for (const w of workers) w.stdin!.write('stop\n');
    await Promise.all(workers.map((w) => new Promise((r) => (w.exitCode !== null ? r(null) : w.once('exit', r)))));
  } finally {
    await gateway.stop();
    fs.rmSync(dir, { recursive: true, force: true });
  }
}

if (process.argv[2] === '--conn-worker') await worker();
else await main();
