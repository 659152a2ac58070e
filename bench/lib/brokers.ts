/**
 * What the MQTT benchmarks share: the gateway and Mosquitto 2 as child processes (same device CA,
 * equivalent TLS settings and ACL), device certificates, and CPU and memory readings from /proc.
 */
import crypto from 'node:crypto';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import net from 'node:net';
import tls from 'node:tls';
import { spawn, type ChildProcess } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import mqtt, { type MqttClient } from 'mqtt';
import { Pki } from '../../src/pki/pki.js';
import { gatewayClient } from '../../src/clients/api.js';

export interface Creds { thingId: string; cert: string; key: string }

export const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..', '..');
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
/** Every process below `pid` (a gateway's embedded PostgreSQL server and its backends; tsx's esbuild). */
export function descendants(pid: number): number[] {
  const parents = new Map<number, number>();
  for (const entry of fs.readdirSync('/proc')) {
    if (!/^\d+$/.test(entry)) continue;
    try {
      const stat = fs.readFileSync(`/proc/${entry}/stat`, 'utf8');
      parents.set(Number(entry), Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[1]));
    } catch { /* exited meanwhile */ }
  }
  const out: number[] = [];
  const walk = (p: number) => {
    for (const [child, parent] of parents) if (parent === p) { out.push(child); walk(child); }
  };
  walk(pid);
  return out;
}

export function cpuSeconds(pid: number): number {
  const stat = fs.readFileSync(`/proc/${pid}/stat`, 'utf8');
  const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  return (Number(fields[11]) + Number(fields[12])) / TICKS;
}

/** CPU seconds of a process in the kernel (system time) */
export function systemSeconds(pid: number): number {
  const stat = fs.readFileSync(`/proc/${pid}/stat`, 'utf8');
  return Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[12]) / TICKS;
}

export function rssBytes(pid: number): number {
  const status = fs.readFileSync(`/proc/${pid}/status`, 'utf8');
  return Number(/VmRSS:\s+(\d+) kB/.exec(status)![1]) * 1024;
}

/**
 * glibc's malloc setting the gateway is deployed with (Dockerfile, `npm start`): allocations of
 * 64 KiB and more get their own mapping, so Node's per-TLS-connection 64 KiB input buffer costs only
 * the pages it writes (docs/decisions.md, issue 19). The benchmarks run the gateway the same way.
 */
export const GATEWAY_MALLOC_ENV = { MALLOC_MMAP_THRESHOLD_: '65536' };

export interface GatewayProcess { proc: ChildProcess; pid: number; httpUrl: string; mqttPort: number; certsDir: string; stop(): Promise<void> }

/** A gateway in a child process (embedded PostgreSQL in a temporary folder), `node --import tsx` so its pid is the broker's. */
export async function startGatewayProcess(dir: string, extraEnv: Record<string, string> = {}, certsDir = path.join(dir, 'certs'), root = ROOT): Promise<GatewayProcess> {
  const [httpPort, mqttPort, pgPort] = [await freePort(), await freePort(), await freePort()];
  fs.mkdirSync(dir, { recursive: true });
  fs.chmodSync(dir, 0o755); // embedded PostgreSQL runs as its own user when we are root
  // BENCH_CPU_PROF=dir writes a V8 CPU profile of the gateway process there (on exit), sampled every BENCH_CPU_PROF_INTERVAL µs (2000)
  const prof = process.env.BENCH_CPU_PROF ? ['--cpu-prof', '--cpu-prof-interval', process.env.BENCH_CPU_PROF_INTERVAL ?? '2000', '--cpu-prof-dir', process.env.BENCH_CPU_PROF] : [];
  // BENCH_GATEWAY_NODE_ARGS: more options for the gateway's node (e.g. --trace-gc, with BENCH_GATEWAY_LOG)
  const nodeArgs = (process.env.BENCH_GATEWAY_NODE_ARGS ?? '').split(' ').filter(Boolean);
  const proc = spawn(process.execPath, [...prof, ...nodeArgs, '--import', 'tsx', 'src/main.ts'], {
    cwd: root,
    env: {
      ...process.env, ...GATEWAY_MALLOC_ENV, HTTP_HOST: '127.0.0.1', HTTP_PORT: String(httpPort), MQTT_HOST: '127.0.0.1', MQTT_PORT: String(mqttPort),
      EMBEDDED_PG_PORT: String(pgPort), DATA_DIR: path.join(dir, 'data'), CERTS_DIR: certsDir, LOG_LEVEL: 'warn', LOG_PRETTY: 'false',
      PUBLIC_BASE_URL: `http://127.0.0.1:${httpPort}`, DATABASE_URL: '', REDIS_URL: '', ...extraEnv,
    },
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  let startupLog = '';
  proc.stdout!.on('data', (d) => { if (startupLog.length < 20_000) startupLog += d; });
  // BENCH_GATEWAY_LOG=file: the gateway's standard output appended there (e.g. with NODE_OPTIONS=--trace-gc)
  if (process.env.BENCH_GATEWAY_LOG) proc.stdout!.pipe(fs.createWriteStream(process.env.BENCH_GATEWAY_LOG, { flags: 'a' }));
  const httpUrl = `http://127.0.0.1:${httpPort}`;
  const deadline = Date.now() + 120_000;
  for (;;) {
    if (proc.exitCode !== null) throw new Error(`gateway exited during start:\n${startupLog}`);
    const ok = await gatewayClient(httpUrl).GET('/readyz').then(({ response }) => response.ok, () => false);
    // a multi-core gateway answers /readyz once its first worker serves; its banner comes when all do
    if (ok && (Number(extraEnv.BROKER_WORKERS ?? 1) <= 1 || startupLog.includes('worker processes)'))) break;
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

/** Device certificates issued directly by the gateway's device CA (files in CERTS_DIR); CN = a new thingId, or the given names. */
export async function issueDevices(certsDir: string, n: number, names?: string[]): Promise<Creds[]> {
  const pki = await Pki.ensure(undefined as never, { dir: certsDir, serverNames: ['localhost'], crlUrl: 'http://127.0.0.1/crl' });
  const out: Creds[] = [];
  for (let i = 0; i < n; i++) {
    const thingId = names?.[i] ?? crypto.randomUUID();
    const { spki, privateKeyPem } = await pki.generateDeviceKeyPair();
    const cert = await pki.signDeviceCertificate(thingId, spki, 2);
    out.push({ thingId, cert: cert.pem, key: privateKeyPem });
  }
  return out;
}

/** CN of the certificate with which a benchmark reads Mosquitto's $SYS counters */
export const MONITOR_CN = 'bench-monitor';

/** Mosquitto 2 with TLS, required client certificates (same CA), identity as username and an ACL per client. */
export async function startMosquitto(dir: string, certsDir: string): Promise<{ proc: ChildProcess; pid: number; port: number; stop(): Promise<void> }> {
  const port = await freePort();
  const conf = path.join(dir, 'mosquitto.conf');
  fs.writeFileSync(path.join(dir, 'acl'), `pattern readwrite devices/%u/#\n\nuser ${MONITOR_CN}\ntopic read $SYS/#\n`);
  fs.writeFileSync(path.join(dir, 'server-chain.crt'), fs.readFileSync(path.join(certsDir, 'server.crt'), 'utf8') + fs.readFileSync(path.join(certsDir, 'root-ca.crt'), 'utf8'));
  fs.writeFileSync(conf, [
    // keeps the invoking user (as root it would switch to 'mosquitto', who cannot read the key)
    `user ${os.userInfo().username}`, 'per_listener_settings false', 'persistence false', 'log_dest none', `acl_file ${path.join(dir, 'acl')}`,
    'allow_anonymous false', 'set_tcp_nodelay true', 'max_queued_messages 100000', 'max_inflight_messages 0', 'sys_interval 1',
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

/**
 * TLS details of a connect: a prepared secure context (key, certificate and CA parsed once), a TLS
 * session to resume, where to put the tickets the broker sends, the loopback address to connect
 * from (one per client process: each address has its own ~28,000 ephemeral ports towards a broker)
 */
export interface ConnectTls { secureContext?: tls.SecureContext; session?: Buffer; onSession?: (session: Buffer) => void; localAddress?: string }

export function connectDevice(port: number, c: Creds, ca: string, protocolVersion: 4 | 5 = 5, t: ConnectTls = {}): Promise<MqttClient> {
  const client = mqtt.connect(`mqtts://127.0.0.1:${port}`, {
    ...(t.secureContext ? { secureContext: t.secureContext } : { key: c.key, cert: c.cert, ca }),
    ...(t.session ? { session: t.session } : {}),
    ...(t.localAddress ? { localAddress: t.localAddress } : {}),
    servername: 'localhost', clientId: c.thingId, username: c.thingId,
    protocolVersion, reconnectPeriod: 0, connectTimeout: 300_000, keepalive: 600,
  } as mqtt.IClientOptions);
  // TLS 1.3 tickets arrive after the handshake, before CONNACK
  if (t.onSession) client.stream.on('session', t.onSession);
  return new Promise((resolve, reject) => {
    // a failed client does not hold its socket (reconnectPeriod 0: it would not retry anyway)
    const failed = (err: Error) => { client.end(true); reject(err); };
    // closed by the broker before CONNACK (mqtt.js then reports no error: the connect would wait forever)
    const closed = () => failed(new Error('closed before CONNACK'));
    client.once('connect', () => { client.off('error', failed); client.off('close', closed); resolve(client); });
    client.once('error', failed);
    client.once('close', closed);
  });
}

/**
 * Connects `creds` with `concurrency` connects in flight. Without `onFail` the first failed connect
 * rejects (and the clients connected so far stay open); with it, a failed client's slot stays empty
 * and the others go on (a benchmark counts what connected).
 */
export async function connectMany(port: number, creds: Creds[], ca: string, concurrency: number, onEach?: (ms: number) => void, tlsOf?: (i: number) => ConnectTls, onFail?: (err: Error) => void): Promise<MqttClient[]> {
  const clients: MqttClient[] = new Array(creds.length);
  let next = 0;
  await Promise.all(Array.from({ length: concurrency }, async () => {
    while (next < creds.length) {
      const i = next++;
      const t0 = performance.now();
      try {
        clients[i] = await connectDevice(port, creds[i], ca, 5, tlsOf?.(i));
      } catch (err) {
        if (!onFail) throw err;
        onFail(err as Error);
        continue;
      }
      onEach?.(performance.now() - t0);
    }
  }));
  return clients;
}

