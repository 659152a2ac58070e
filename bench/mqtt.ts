/**
 * bench:mqtt: the same load generator against the gateway's embedded broker and against Debian's
 * Mosquitto 2 (started here on a free port with TLS, required client certificates and a per-client
 * ACL `devices/%u/#`), in one run: telemetry messages/s at QoS 0 and QoS 1 from DEVICES connected
 * devices, and the broker process's CPU time per 1,000 messages (robust on a small machine where
 * the Node load generator saturates first; its own CPU share is reported too).
 *
 *   npm run bench:mqtt                    (DEVICES=1000 SECONDS=10 by default)
 *   DEVICES=200 SECONDS=5 npm run bench:mqtt
 */
import crypto from 'node:crypto';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import net from 'node:net';
import readline from 'node:readline';
import { spawn, type ChildProcess } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import mqtt, { type MqttClient } from 'mqtt';
import { Pki } from '../src/pki/pki.js';

export interface Creds { thingId: string; cert: string; key: string }

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
const TICKS = 100; // USER_HZ of /proc/<pid>/stat

export function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const s = net.createServer();
    s.once('error', reject);
    s.listen(0, '127.0.0.1', () => {
      const { port } = s.address() as net.AddressInfo;
      s.close(() => resolve(port));
    });
  });
}

/** CPU seconds (user + system) a process has used so far. */
export function cpuSeconds(pid: number): number {
  const stat = fs.readFileSync(`/proc/${pid}/stat`, 'utf8');
  const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  return (Number(fields[11]) + Number(fields[12])) / TICKS;
}

export function rssBytes(pid: number): number {
  const status = fs.readFileSync(`/proc/${pid}/status`, 'utf8');
  return Number(/VmRSS:\s+(\d+) kB/.exec(status)![1]) * 1024;
}

export interface GatewayProcess { proc: ChildProcess; pid: number; httpUrl: string; mqttPort: number; certsDir: string; stop(): Promise<void> }

/** A gateway in a child process (embedded PostgreSQL in a temporary folder), `node --import tsx` so its pid is the broker's. */
export async function startGatewayProcess(dir: string, extraEnv: Record<string, string> = {}): Promise<GatewayProcess> {
  const [httpPort, mqttPort, pgPort] = [await freePort(), await freePort(), await freePort()];
  const certsDir = path.join(dir, 'certs');
  fs.chmodSync(dir, 0o755); // embedded PostgreSQL runs as its own user when we are root
  // BENCH_CPU_PROF=dir writes a V8 CPU profile of the gateway process there (on exit)
  const prof = process.env.BENCH_CPU_PROF ? ['--cpu-prof', '--cpu-prof-dir', process.env.BENCH_CPU_PROF] : [];
  const proc = spawn(process.execPath, [...prof, '--import', 'tsx', 'src/main.ts'], {
    cwd: ROOT,
    env: {
      ...process.env, HTTP_HOST: '127.0.0.1', HTTP_PORT: String(httpPort), MQTT_HOST: '127.0.0.1', MQTT_PORT: String(mqttPort),
      EMBEDDED_PG_PORT: String(pgPort), DATA_DIR: path.join(dir, 'data'), CERTS_DIR: certsDir, LOG_LEVEL: 'warn', LOG_PRETTY: 'false',
      PUBLIC_BASE_URL: `http://127.0.0.1:${httpPort}`, DATABASE_URL: '', REDIS_URL: '', ...extraEnv,
    },
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  let startupLog = '';
  proc.stdout!.on('data', (d) => { if (startupLog.length < 20_000) startupLog += d; });
  const httpUrl = `http://127.0.0.1:${httpPort}`;
  const deadline = Date.now() + 120_000;
  for (;;) {
    if (proc.exitCode !== null) throw new Error(`gateway exited during start:\n${startupLog}`);
    const ok = await fetch(`${httpUrl}/readyz`).then((r) => r.ok, () => false);
    if (ok) break;
    if (Date.now() > deadline) throw new Error('gateway did not become ready');
    await new Promise((r) => setTimeout(r, 300));
  }
  return {
    proc, pid: proc.pid!, httpUrl, mqttPort, certsDir,
    stop: () => new Promise<void>((resolve) => {
      if (proc.exitCode !== null) return resolve();
      proc.once('exit', () => resolve());
      proc.kill('SIGTERM');
    }),
  };
}

/** Device certificates issued directly by the gateway's device CA (files in CERTS_DIR). */
export async function issueDevices(certsDir: string, n: number): Promise<Creds[]> {
  const pki = await Pki.ensure(undefined as never, { dir: certsDir, serverNames: ['localhost'], crlUrl: 'http://127.0.0.1/crl' });
  const out: Creds[] = [];
  for (let i = 0; i < n; i++) {
    const thingId = crypto.randomUUID();
    const { publicKey, privateKeyPem } = await pki.generateDeviceKey();
    const cert = await pki.issueDeviceCertificate(thingId, publicKey, 2);
    out.push({ thingId, cert: cert.pem, key: privateKeyPem });
  }
  return out;
}

/** Mosquitto 2 with TLS, required client certificates (same CA), identity as username and an ACL per client. */
export async function startMosquitto(dir: string, certsDir: string): Promise<{ proc: ChildProcess; pid: number; port: number; stop(): Promise<void> }> {
  const port = await freePort();
  const conf = path.join(dir, 'mosquitto.conf');
  fs.writeFileSync(path.join(dir, 'acl'), 'pattern readwrite devices/%u/#\n');
  fs.writeFileSync(path.join(dir, 'server-chain.crt'), fs.readFileSync(path.join(certsDir, 'server.crt'), 'utf8') + fs.readFileSync(path.join(certsDir, 'root-ca.crt'), 'utf8'));
  fs.writeFileSync(conf, [
    // keeps the invoking user (as root it would switch to 'mosquitto', who cannot read the key)
    `user ${os.userInfo().username}`, 'per_listener_settings false', 'persistence false', 'log_dest none', `acl_file ${path.join(dir, 'acl')}`,
    'allow_anonymous false', 'max_queued_messages 100000', 'max_inflight_messages 0',
    `listener ${port} 127.0.0.1`, `cafile ${path.join(certsDir, 'ca-bundle.pem')}`, `certfile ${path.join(dir, 'server-chain.crt')}`,
    `keyfile ${path.join(certsDir, 'server.key')}`, 'require_certificate true', 'use_identity_as_username true', '',
  ].join('\n'));
  const proc = spawn('mosquitto', ['-c', conf], { stdio: ['ignore', 'ignore', 'inherit'] });
  for (let i = 0; i < 50; i++) {
    const open = await new Promise<boolean>((resolve) => {
      const s = net.connect(port, '127.0.0.1', () => { s.destroy(); resolve(true); });
      s.on('error', () => resolve(false));
    });
    if (open) break;
    await new Promise((r) => setTimeout(r, 100));
  }
  return { proc, pid: proc.pid!, port, stop: () => new Promise((resolve) => { proc.once('exit', () => resolve()); proc.kill('SIGTERM'); }) };
}

export function connectDevice(port: number, c: Creds, ca: string, protocolVersion: 4 | 5 = 5): Promise<MqttClient> {
  return mqtt.connectAsync(`mqtts://127.0.0.1:${port}`, {
    key: c.key, cert: c.cert, ca, servername: 'localhost', clientId: c.thingId, username: c.thingId,
    protocolVersion, reconnectPeriod: 0, connectTimeout: 300_000, keepalive: 600,
  });
}

export async function connectMany(port: number, creds: Creds[], ca: string, concurrency: number, onEach?: (ms: number) => void): Promise<MqttClient[]> {
  const clients: MqttClient[] = new Array(creds.length);
  let next = 0;
  await Promise.all(Array.from({ length: concurrency }, async () => {
    while (next < creds.length) {
      const i = next++;
      const t0 = performance.now();
      clients[i] = await connectDevice(port, creds[i], ca);
      onEach?.(performance.now() - t0);
    }
  }));
  return clients;
}

/** Worker process: connects the devices, waits for "go", publishes for SECONDS, prints its counts. */
async function worker(): Promise<void> {
  const [port, qos, seconds, credsFile, caFile] = process.argv.slice(3);
  const creds = JSON.parse(fs.readFileSync(credsFile, 'utf8')) as Creds[];
  const ca = fs.readFileSync(caFile, 'utf8');
  const clients = await connectMany(Number(port), creds, ca, 50);
  process.stdout.write('ready\n');
  await new Promise<void>((resolve) => readline.createInterface({ input: process.stdin }).once('line', () => resolve()));
  const cpu0 = process.cpuUsage();
  const t0 = performance.now();
  const until = t0 + Number(seconds) * 1000;
  let sent = 0;
  const payload = JSON.stringify({ temperature: 21.5, humidity: 40, voltage: 3.3 });
  // one message in flight per device: the next is published when the previous was written (QoS 0) or acknowledged (QoS 1)
  await Promise.all(clients.map((client, i) => new Promise<void>((resolve) => {
    const topic = `devices/${creds[i].thingId}/telemetry`;
    const pub = () => {
      if (performance.now() >= until) return resolve();
      client.publish(topic, payload, { qos: Number(qos) as 0 | 1 }, (err) => {
        if (!err) sent += 1;
        pub();
      });
    };
    pub();
  })));
  const elapsed = (performance.now() - t0) / 1000;
  const cpu = process.cpuUsage(cpu0);
  process.stdout.write(JSON.stringify({ sent, seconds: elapsed, cpuSeconds: (cpu.user + cpu.system) / 1e6 }) + '\n');
  await Promise.all(clients.map((c) => c.endAsync(true)));
  process.exit(0);
}

interface RunResult { msgsPerSecond: number; brokerCpuMsPer1000: number; brokerCpuShare: number; generatorCpuShare: number }

/** One measurement: workers connect, then publish together while the broker's CPU time is read. */
async function measure(brokerPid: number, port: number, qos: 0 | 1, seconds: number, credsFiles: string[], caFile: string): Promise<RunResult> {
  const workers = credsFiles.map((f) => spawn(process.execPath, ['--import', 'tsx', fileURLToPath(import.meta.url), '--worker', String(port), String(qos), String(seconds), f, caFile], { cwd: ROOT, stdio: ['pipe', 'pipe', 'inherit'] }));
  const lines = workers.map((w) => readline.createInterface({ input: w.stdout! }));
  const nextLine = (i: number) => new Promise<string>((resolve, reject) => {
    lines[i].once('line', resolve);
    workers[i].once('exit', (code) => reject(new Error(`load worker exited with ${code}`)));
  });
  await Promise.all(workers.map((_, i) => nextLine(i)));
  const cpu0 = cpuSeconds(brokerPid);
  const t0 = performance.now();
  const results = workers.map((_, i) => nextLine(i));
  for (const w of workers) w.stdin!.write('go\n');
  const outs = (await Promise.all(results)).map((l) => JSON.parse(l) as { sent: number; seconds: number; cpuSeconds: number });
  const wall = (performance.now() - t0) / 1000;
  const brokerCpu = cpuSeconds(brokerPid) - cpu0;
  const sent = outs.reduce((a, o) => a + o.sent, 0);
  await Promise.all(workers.map((w) => new Promise((r) => (w.exitCode !== null ? r(null) : w.once('exit', r)))));
  return {
    msgsPerSecond: Math.round(sent / Math.max(...outs.map((o) => o.seconds))),
    brokerCpuMsPer1000: Math.round((brokerCpu * 1000 * 1000 / sent) * 100) / 100,
    brokerCpuShare: Math.round((brokerCpu / wall) * 100) / 100,
    generatorCpuShare: Math.round((outs.reduce((a, o) => a + o.cpuSeconds, 0) / wall) * 100) / 100,
  };
}

async function main(): Promise<void> {
  const devices = Number(process.env.DEVICES ?? 1000);
  const seconds = Number(process.env.SECONDS ?? 10);
  const workersN = Number(process.env.WORKERS ?? 2);
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'bench-mqtt-'));
  console.log(`bench:mqtt  ${devices} devices, ${seconds} s per run, ${workersN} load workers, ${os.cpus().length} CPUs, node ${process.version}`);
  const gateway = await startGatewayProcess(dir);
  let mosquitto: Awaited<ReturnType<typeof startMosquitto>> | undefined;
  try {
    const creds = await issueDevices(gateway.certsDir, devices);
    const caFile = path.join(gateway.certsDir, 'ca-bundle.pem');
    const credsFiles = Array.from({ length: workersN }, (_, w) => {
      const f = path.join(dir, `creds-${w}.json`);
      fs.writeFileSync(f, JSON.stringify(creds.filter((_, i) => i % workersN === w)));
      return f;
    });
    mosquitto = await startMosquitto(dir, gateway.certsDir);
    const rows: { broker: string; qos: number; r: RunResult }[] = [];
    for (const qos of [0, 1] as const) {
      for (const [broker, pid, port] of [['gateway (Aedes)', gateway.pid, gateway.mqttPort], ['mosquitto 2', mosquitto.pid, mosquitto.port]] as const) {
        const r = await measure(pid, port, qos, seconds, credsFiles, caFile);
        rows.push({ broker, qos, r });
        console.log(`  QoS ${qos}  ${broker.padEnd(16)} ${String(r.msgsPerSecond).padStart(7)} msg/s  broker CPU ${r.brokerCpuMsPer1000} ms/1000 msgs  (broker ${Math.round(r.brokerCpuShare * 100)}% of a core, load generator ${Math.round(r.generatorCpuShare * 100)}%)`);
      }
    }
    console.log('\n| QoS | broker | messages/s | broker CPU ms per 1,000 msgs | broker CPU (cores) | generator CPU (cores) |\n|---|---|---|---|---|---|');
    for (const { broker, qos, r } of rows) console.log(`| ${qos} | ${broker} | ${r.msgsPerSecond} | ${r.brokerCpuMsPer1000} | ${r.brokerCpuShare} | ${r.generatorCpuShare} |`);
    for (const qos of [0, 1]) {
      const g = rows.find((x) => x.qos === qos && x.broker.startsWith('gateway'))!.r;
      const m = rows.find((x) => x.qos === qos && x.broker.startsWith('mosquitto'))!.r;
      console.log(`QoS ${qos}: ratio gateway/mosquitto  throughput ${(g.msgsPerSecond / m.msgsPerSecond).toFixed(2)}  CPU efficiency (mosquitto CPU per msg / gateway CPU per msg) ${(m.brokerCpuMsPer1000 / g.brokerCpuMsPer1000).toFixed(2)}`);
    }
  } finally {
    await mosquitto?.stop();
    await gateway.stop();
    fs.rmSync(dir, { recursive: true, force: true });
  }
}

if (process.argv[2] === '--worker') await worker();
else if (process.argv[1] && path.resolve(process.argv[1]) === fileURLToPath(import.meta.url)) await main();
