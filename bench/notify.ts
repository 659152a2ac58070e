/**
 * Notifications benchmark (`npm run bench:notify`):
 *  1. publish-to-SSE latency, p50/p99, with 1,000 open streams (1,000 users of one account):
 *     user-scope (one stream receives) and tenant-scope (fan-out to all 1,000 streams);
 *  2. memory per open stream with N streams (default 10,000), against a baseline of N idle
 *     TCP connections to the same server measured in the same run.
 * The gateway runs as a child process (embedded PostgreSQL in a temporary folder) so that its
 * resident memory (VmRSS from /proc) is not mixed with the client's.
 * Options: --streams 1000 --memory-streams 10000 --samples 300 --fanout-samples 30 --no-write
 * Rewrites its section of docs/benchmarks.md.
 */
import fs from 'node:fs';
import http from 'node:http';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { spawn, type ChildProcess } from 'node:child_process';
import { parseArgs } from 'node:util';
import { freePort } from '../src/db/embedded.js';

const { values: args } = parseArgs({
  options: {
    streams: { type: 'string', default: '1000' },
    'memory-streams': { type: 'string', default: '10000' },
    samples: { type: 'string', default: '300' },
    'fanout-samples': { type: 'string', default: '30' },
    'no-write': { type: 'boolean', default: false },
  },
});
const STREAMS = Number(args.streams);
const MEM_STREAMS = Number(args['memory-streams']);
const SAMPLES = Number(args.samples);
const FANOUT = Number(args['fanout-samples']);

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const agent = new http.Agent({ keepAlive: true, maxSockets: 64 });

function request(base: string, method: string, url: string, body?: unknown, headers: Record<string, string> = {}): Promise<{ status: number; headers: http.IncomingHttpHeaders; text: string }> {
  return new Promise((resolve, reject) => {
    const payload = body === undefined ? undefined : JSON.stringify(body);
    const req = http.request(base + url, { method, agent, headers: { ...headers, ...(payload ? { 'content-type': 'application/json', 'content-length': Buffer.byteLength(payload) } : {}) } }, (res) => {
      let text = '';
      res.setEncoding('utf8');
      res.on('data', (c) => (text += c));
      res.on('end', () => resolve({ status: res.statusCode ?? 0, headers: res.headers, text }));
    });
    req.on('error', reject);
    req.end(payload);
  });
}

function rssKb(pid: number): number {
  const m = /VmRSS:\s+(\d+) kB/.exec(fs.readFileSync(`/proc/${pid}/status`, 'utf8'));
  return m ? Number(m[1]) : NaN;
}

async function settledRss(pid: number): Promise<number> {
  await sleep(3000);
  const samples: number[] = [];
  for (let i = 0; i < 5; i++) {
    samples.push(rssKb(pid));
    await sleep(400);
  }
  return samples.sort((a, b) => a - b)[2];
}

const pct = (sorted: number[], p: number) => sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))];

interface Stream {
  onFrame?: (data: any, at: number) => void;
  req: http.ClientRequest;
  close(): void;
}

function openStream(base: string, cookie: string): Promise<Stream> {
  return new Promise((resolve, reject) => {
    const req = http.get(base + '/api/notifications/stream', { agent: false, headers: { cookie, accept: 'text/event-stream' } }, (res) => {
      if (res.statusCode !== 200) return reject(new Error(`stream: ${res.statusCode}`));
      const s: Stream = { req, close: () => req.destroy() };
      let buf = '';
      res.setEncoding('utf8');
      res.on('data', (chunk: string) => {
        const at = performance.now();
        buf += chunk;
        let i: number;
        while ((i = buf.indexOf('\n\n')) >= 0) {
          const frame = buf.slice(0, i);
          buf = buf.slice(i + 2);
          const data = frame.split('\n').find((l) => l.startsWith('data: '));
          if (data && frame.includes('event: notification')) s.onFrame?.(JSON.parse(data.slice(6)), at);
        }
      });
      res.on('error', () => {});
      resolve(s);
    });
    req.on('error', reject);
  });
}

async function inBatches<T>(n: number, batch: number, fn: (i: number) => Promise<T>): Promise<T[]> {
  const out: T[] = new Array(n);
  for (let i = 0; i < n; i += batch) {
    const part = await Promise.all(Array.from({ length: Math.min(batch, n - i) }, (_, k) => fn(i + k)));
    part.forEach((v, k) => (out[i + k] = v));
  }
  return out;
}

async function main() {
  const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'bench-notify-'));
  const port = await freePort();
  const base = `http://127.0.0.1:${port}`;
  const child: ChildProcess = spawn(process.execPath, ['--import', 'tsx', 'src/main.ts'], {
    env: {
      ...process.env,
      HTTP_HOST: '127.0.0.1', HTTP_PORT: String(port), MQTT_HOST: '127.0.0.1', MQTT_PORT: '0',
      EMBEDDED_PG_PORT: String(await freePort()), DATA_DIR: tmp, CERTS_DIR: path.join(tmp, 'certs'),
      PUBLIC_BASE_URL: base, LOG_LEVEL: 'warn', DATABASE_POOL_SIZE: '20', DATABASE_URL: '',
    },
    stdio: ['ignore', 'ignore', 'inherit'],
  });
  const streams: Stream[] = [];
  const idle: net.Socket[] = [];
  try {
    for (let i = 0; ; i++) {
      if (child.exitCode !== null) throw new Error('gateway exited');
      const ok = await request(base, 'GET', '/healthz').then((r) => r.status === 200, () => false);
      if (ok) break;
      if (i > 600) throw new Error('gateway did not start');
      await sleep(200);
    }
    const pid = child.pid!;
    const token = async (realm: string, sub: string, roles: string[]) => JSON.parse((await request(base, 'POST', '/dev/token', { realm, sub, roles, expires_in: 7200 })).text).access_token as string;
    const accountId = crypto.randomUUID();
    const publisher = await token('platform', 'bench-publisher', ['notification-publisher']);
    const auth = { authorization: `Bearer ${publisher}` };

    // 1,000 users with one stream each
    console.log(`opening ${STREAMS} SSE streams…`);
    const cookies = await inBatches(STREAMS, 50, async (i) => {
      const t = await token(`acc-${accountId}`, `user-${i}`, ['viewer']);
      const r = await request(base, 'POST', '/api/notifications/stream/auth', undefined, { authorization: `Bearer ${t}`, 'x-account-id': accountId });
      if (r.status !== 204) throw new Error(`stream auth ${r.status} ${r.text}`);
      return String(r.headers['set-cookie']).split(';')[0];
    });
    const latencyStreams = await inBatches(STREAMS, 100, (i) => openStream(base, cookies[i]));
    streams.push(...latencyStreams);
    await sleep(1000);

    const publish = (body: Record<string, unknown>) => request(base, 'POST', '/api/notifications/publish', { channel: ['in_app'], template: 'general/message', ...body }, auth);
    // warm-up
    for (let i = 0; i < 20; i++) await publish({ to: { subscriberId: `user-${i}` }, data: { subject: 'warm-up', message: '-' } });

    console.log(`user-scope publish -> SSE, ${SAMPLES} samples…`);
    const userLat: number[] = [];
    for (let i = 0; i < SAMPLES; i++) {
      const k = Math.floor(Math.random() * STREAMS);
      const subject = `u-${i}`;
      const got = new Promise<number>((resolve) => {
        latencyStreams[k].onFrame = (d, at) => d.notification?.title === subject && resolve(at);
      });
      const t0 = performance.now();
      const res = await publish({ to: { subscriberId: `user-${k}` }, data: { subject, message: '-' } });
      if (res.status !== 201) throw new Error(`publish ${res.status} ${res.text}`);
      userLat.push((await got) - t0);
      latencyStreams[k].onFrame = undefined;
    }

    console.log(`tenant-scope publish -> ${STREAMS} SSE streams, ${FANOUT} samples…`);
    const fanLat: number[] = [];
    const fanLast: number[] = [];
    for (let i = 0; i < FANOUT; i++) {
      const subject = `t-${i}`;
      const arrivals: Promise<number>[] = latencyStreams.map((s) => new Promise<number>((resolve) => {
        s.onFrame = (d, at) => d.notification?.title === subject && resolve(at);
      }));
      const t0 = performance.now();
      const res = await publish({ scope: 'tenant', to: { subscriberId: accountId }, data: { subject, message: '-' } });
      if (res.status !== 201) throw new Error(`publish ${res.status} ${res.text}`);
      const ats = await Promise.all(arrivals);
      for (const at of ats) fanLat.push(at - t0);
      fanLast.push(Math.max(...ats) - t0);
    }
    for (const s of latencyStreams) s.onFrame = undefined;
    const publishOnly: number[] = [];
    for (let i = 0; i < 50; i++) {
      const t0 = performance.now();
      await publish({ to: { subscriberId: 'nobody-listening' }, data: { subject: 'x', message: '-' } });
      publishOnly.push(performance.now() - t0);
    }

    // memory: N idle TCP connections vs N SSE streams
    for (const s of streams.splice(0)) s.close();
    const rssBase = await settledRss(pid);
    console.log(`memory: ${MEM_STREAMS} idle connections…`);
    for (let i = 0; i < MEM_STREAMS; i += 500) {
      await Promise.all(Array.from({ length: Math.min(500, MEM_STREAMS - i) }, () => new Promise<void>((resolve, reject) => {
        const sock = net.connect(port, '127.0.0.1', () => resolve());
        sock.on('error', reject);
        idle.push(sock);
      })));
    }
    const rssIdle = await settledRss(pid);
    for (const s of idle.splice(0)) s.destroy();
    const rssBase2 = await settledRss(pid);
    console.log(`memory: ${MEM_STREAMS} SSE streams…`);
    const memStreams = await inBatches(MEM_STREAMS, 200, (i) => openStream(base, cookies[i % cookies.length]));
    streams.push(...memStreams);
    const rssSse = await settledRss(pid);
    // are they all live? one tenant notification reaches every stream
    let delivered = 0;
    const all = Promise.all(memStreams.map((s) => new Promise<void>((resolve) => {
      s.onFrame = (d) => {
        if (d.notification?.title === 'memory-check') {
          delivered++;
          resolve();
        }
      };
    })));
    const t0 = performance.now();
    await publish({ scope: 'tenant', to: { subscriberId: accountId }, data: { subject: 'memory-check', message: '-' } });
    await Promise.race([all, sleep(60_000)]);
    const fan10k = performance.now() - t0;

    const s = (a: number[]) => a.slice().sort((x, y) => x - y);
    const u = s(userLat), f = s(fanLat), fl = s(fanLast), po = s(publishOnly);
    const idleKb = (rssIdle - rssBase) / MEM_STREAMS;
    const sseKb = (rssSse - rssBase2) / MEM_STREAMS;
    const results = {
      userP50: pct(u, 50), userP99: pct(u, 99), fanP50: pct(f, 50), fanP99: pct(f, 99), fanLastP50: pct(fl, 50), fanLastP99: pct(fl, 99),
      publishP50: pct(po, 50), publishP99: pct(po, 99), rssBase, rssIdle, rssBase2, rssSse, idleKb, sseKb, delivered, fan10k,
    };
    console.log(JSON.stringify(results, null, 2));

    const ms = (x: number) => `${x.toFixed(1)} ms`;
    const section = [
      '## Notifications (`npm run bench:notify`)',
      '',
      `Measured ${new Date().toISOString().slice(0, 10)} on ${os.cpus().length} cores, Node ${process.versions.node}; gateway in a child process with embedded`,
      'PostgreSQL; client and gateway on the same machine. Latency = from sending `POST /api/notifications/publish`',
      'to the `event: notification` frame arriving on the SSE connection (includes the publish transaction,',
      'the authorization call over HTTP and the cluster broadcast).',
      '',
      `| ${STREAMS} open SSE streams | p50 | p99 |`,
      '|---|---|---|',
      `| baseline: publish request alone (no listener), ${publishOnly.length} samples | ${ms(results.publishP50)} | ${ms(results.publishP99)} |`,
      `| user scope -> its one stream, ${SAMPLES} samples | ${ms(results.userP50)} | ${ms(results.userP99)} |`,
      `| tenant scope -> every stream (per-stream arrival), ${FANOUT} x ${STREAMS} | ${ms(results.fanP50)} | ${ms(results.fanP99)} |`,
      `| tenant scope -> last of ${STREAMS} streams | ${ms(results.fanLastP50)} | ${ms(results.fanLastP99)} |`,
      '',
      `Memory (gateway VmRSS, median of 5 samples after settling), ${MEM_STREAMS} connections:`,
      '',
      '| State | RSS | per connection |',
      '|---|---|---|',
      `| baseline, no connections | ${(rssBase / 1024).toFixed(1)} MiB | |`,
      `| ${MEM_STREAMS} idle TCP connections (baseline) | ${(rssIdle / 1024).toFixed(1)} MiB | ${idleKb.toFixed(1)} KiB |`,
      `| after closing them | ${(rssBase2 / 1024).toFixed(1)} MiB | |`,
      `| ${MEM_STREAMS} open SSE streams | ${(rssSse / 1024).toFixed(1)} MiB | **${sseKb.toFixed(1)} KiB** |`,
      '',
      `With ${MEM_STREAMS} streams open, one tenant-scope notification reached ${delivered} of them in ${ms(fan10k)}.`,
      '',
    ].join('\n');
    if (!args['no-write']) {
      const file = path.join(process.cwd(), 'docs', 'benchmarks.md');
      const text = fs.readFileSync(file, 'utf8');
      const re = /## Notifications \(`npm run bench:notify`\)[\s\S]*?(?=\n## |$)/;
      const next = re.test(text) ? text.replace(re, section.trimEnd() + '\n') : `${text.trimEnd()}\n\n${section}`;
      fs.writeFileSync(file, next);
      console.log('docs/benchmarks.md updated');
    }
  } finally {
    for (const s of streams) s.close();
    for (const s of idle) s.destroy();
    agent.destroy();
    child.kill('SIGTERM');
    await new Promise((r) => (child.exitCode !== null ? r(null) : child.once('exit', r)));
    fs.rmSync(tmp, { recursive: true, force: true });
  }
}

main().catch((err) => {
  console.error(err);
  process.exit(1);
});
