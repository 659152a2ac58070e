/**
 * bench:bridge-parts: the pieces of a data bridge rule's delivery, each against a baseline in the same run.
 * - A NATS JetStream publish as the NATS sink makes it (src/bridges/sinks.ts: acknowledged, `Nats-Msg-Id`, batches of 64
 *   pipelined) against the same publishes without headers: CPU per message of this process and of nats-server (when it
 *   runs on this machine: /proc).
 * - An envelope from a rule's `Envelopes` (parts kept per thing) against one encoded whole, field by field (the builder
 *   it replaced), each with its `Buffer.from`.
 * - An event's envelope head and its encoding as a delivery makes them (`Envelopes.headParts`: fixed parts as bytes, id and
 *   time as latin1) against text heads (`Envelopes.head`), 48-byte payloads, in both formats.
 * - An event's time when every point has its own millisecond: `Envelopes.time` (a second's text formatted once, the
 *   milliseconds appended) against `toISOString` per millisecond (what it did before).
 * - `pointRanges` (a history row's points; strings passed with indexOf) against the character-by-character scan it replaced, on 48-byte, 1 KiB
 *   and mixed payloads (short strings, escapes, brackets inside strings).
 * The sink: NATS at 127.0.0.1:4222 (else a `nats-server -js` started here), a memory stream.
 *
 *   npm run bench:bridge-parts                 (NATS_MSGS=200000, LOOPS=500000)
 *   npm run bench:bridge-parts -- --no-write
 */
import crypto from 'node:crypto';
import { execFileSync, spawn } from 'node:child_process';
import fs from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { parseArgs } from 'node:util';
import { connect, createInbox } from '@nats-io/transport-node';
import { jetstreamManager, StorageType } from '@nats-io/jetstream';
import { Envelopes, EVENT_TYPES, pointRanges } from '../src/bridges/envelope.js';
import { encode, type EventPart } from '../src/bridges/delivery.js';
import { openSink, type SinkMessage } from '../src/bridges/sinks.js';
import { cpuSeconds, freePort } from './lib/brokers.js';
import { writeBenchmarkSection } from './lib/report.js';

const { values: args } = parseArgs({ options: { 'no-write': { type: 'boolean', default: false } } });
const NATS_MSGS = Number(process.env.NATS_MSGS ?? 200_000);
const LOOPS = Number(process.env.LOOPS ?? 500_000);
const BATCH = 64;

const listening = (port: number) => new Promise<boolean>((resolve) => {
  const s = net.connect({ host: '127.0.0.1', port }, () => { s.destroy(); resolve(true); });
  s.on('error', () => resolve(false));
});
const ownCpu = () => { const u = process.cpuUsage(); return (u.user + u.system) / 1e6; };

/** The builder `Envelopes` replaced: every field encoded for every event. */
function envelopeWhole(f: { id: string; type: string; accountId: string; thingId: string; kind: string; ruleId: string; time: string; data: string }): string {
  return `{"specversion":"1.0","id":${JSON.stringify(f.id)},"source":${JSON.stringify(`/accounts/${f.accountId}/things/${f.thingId}`)},`
    + `"type":${JSON.stringify(f.type)},"time":${JSON.stringify(f.time)},"subject":${JSON.stringify(f.thingId)},`
    + `"datacontenttype":"application/json","account":${JSON.stringify(f.accountId)},"kind":"${f.kind}","rule":${JSON.stringify(f.ruleId)},"data":${f.data}}`;
}

/** The scan `pointRanges` replaced: character by character, strings included. */
function pointRangesByChar(text: string): { at: number; start: number; end: number }[] {
  const out: { at: number; start: number; end: number }[] = [];
  let depth = 0;
  let inString = false;
  let pointStart = -1;
  let objectStart = -1;
  for (let i = 0; i < text.length; i++) {
    const c = text.charCodeAt(i);
    if (inString) {
      if (c === 92) i++;
      else if (c === 34) inString = false;
      continue;
    }
    if (c === 34) inString = true;
    else if (c === 91 || c === 123) {
      depth++;
      if (depth === 2 && c === 91) pointStart = i + 1;
      else if (depth === 3 && c === 123) objectStart = i;
    } else if (c === 93 || c === 125) {
      if (depth === 3 && c === 125 && objectStart >= 0) {
        out.push({ at: Number(text.slice(pointStart, text.indexOf(',', pointStart))), start: objectStart, end: i + 1 });
        objectStart = -1;
      }
      depth--;
    }
  }
  return out;
}

async function natsRow(url: string, natsPid: number | undefined): Promise<string[]> {
  const u = new URL(url);
  const nc = await connect({ servers: `${u.hostname}:${u.port}` });
  const jsm = await jetstreamManager(nc);
  const prefix = `bp${crypto.randomBytes(4).toString('hex')}`;
  const stream = prefix.toUpperCase();
  await jsm.streams.add({ name: stream, subjects: [`${prefix}.>`], storage: StorageType.Memory, max_bytes: 512 * 1024 * 1024, duplicate_window: 60_000_000_000 });
  const body = `{"specversion":"1.0","id":"x","source":"/accounts/a/things/t","type":"${EVENT_TYPES.telemetry}","data":{"temperature":21.5,"humidity":40}}`;
  const server = () => (natsPid ? cpuSeconds(natsPid) : NaN);

  // the sink as rules use it
  const sink = openSink({ type: 'nats', url, timeoutMs: 30_000 });
  await sink.publish([{ subject: `${prefix}.warm.telemetry`, id: 'warm', body }]);
  let [c0, s0] = [ownCpu(), server()];
  for (let b = 0; b < NATS_MSGS / BATCH; b++) {
    const batch: SinkMessage[] = Array.from({ length: BATCH }, (_, i) => ({ subject: `${prefix}.t${i % 50}.telemetry`, id: `r:${b}-${i}`, body }));
    await sink.publish(batch);
  }
  const withHeader = { client: ((ownCpu() - c0) * 1e6) / NATS_MSGS, server: ((server() - s0) * 1e6) / NATS_MSGS };
  await sink.close();

  // baseline: the same pipelined, acknowledged publishes without headers
  const inbox = createInbox();
  let acked = 0;
  let wake: (() => void) | undefined;
  nc.subscribe(`${inbox}.>`, { callback: (_e, m) => { JSON.parse(new TextDecoder().decode(m.data)); acked++; if (acked % BATCH === 0) wake?.(); } });
  [c0, s0] = [ownCpu(), server()];
  for (let b = 0; b < NATS_MSGS / BATCH; b++) {
    const done = new Promise<void>((r) => (wake = r));
    for (let i = 0; i < BATCH; i++) nc.publish(`${prefix}.t${i % 50}.telemetry`, Buffer.from(body), { reply: `${inbox}.${b}.${i}` });
    await done;
  }
  const bare = { client: ((ownCpu() - c0) * 1e6) / NATS_MSGS, server: ((server() - s0) * 1e6) / NATS_MSGS };
  await jsm.streams.delete(stream);
  await nc.close();
  const f = (x: number) => (Number.isNaN(x) ? 'not measured' : x.toFixed(2));
  console.log(`NATS publish µs/msg: sink (Nats-Msg-Id) client ${f(withHeader.client)} server ${f(withHeader.server)}; no headers client ${f(bare.client)} server ${f(bare.server)}`);
  return [
    `| NATS publish, as the sink makes it (with \`Nats-Msg-Id\`): client / nats-server | ${f(withHeader.client)} / ${f(withHeader.server)} µs | without headers: ${f(bare.client)} / ${f(bare.server)} µs | ${(withHeader.client / bare.client).toFixed(2)} / ${Number.isNaN(bare.server) ? '-' : (withHeader.server / bare.server).toFixed(2)} |`,
  ];
}

/** Best of 5 loops, µs per item. */
function best(f: () => number): number {
  let out = Infinity;
  for (let r = 0; r < 5; r++) {
    const t0 = performance.now();
    const items = f();
    out = Math.min(out, ((performance.now() - t0) * 1000) / items);
  }
  return out;
}

function envelopeRow(): string[] {
  const accountId = crypto.randomUUID();
  const ruleId = crypto.randomUUID();
  const things = Array.from({ length: 50 }, () => crypto.randomUUID());
  const data = JSON.stringify({ temperature: 21.5, humidity: 40, voltage: 3.3, seq: 1 });
  const kept = best(() => {
    const envs = new Envelopes(accountId, ruleId);
    let bytes = 0;
    for (let i = 0; i < LOOPS; i++) {
      const thingId = things[i % 50];
      bytes += Buffer.from(envs.of('telemetry', EVENT_TYPES.telemetry, thingId, `123456-${thingId}-${i}`, envs.time(1764300000000 + (i >> 4)), data)).length;
    }
    return bytes > 0 ? LOOPS : 0;
  });
  const whole = best(() => {
    let bytes = 0;
    for (let i = 0; i < LOOPS; i++) {
      const thingId = things[i % 50];
      bytes += Buffer.from(envelopeWhole({ id: `123456-${thingId}-${i}`, type: EVENT_TYPES.telemetry, accountId, thingId, kind: 'telemetry', ruleId, time: new Date(1764300000000 + (i >> 4)).toISOString(), data })).length;
    }
    return bytes > 0 ? LOOPS : 0;
  });
  console.log(`envelope µs: Envelopes ${kept.toFixed(2)}, whole ${whole.toFixed(2)}`);
  return [`| an envelope with its \`Buffer.from\` (\`Envelopes\`, ${LOOPS} in a loop) | ${kept.toFixed(2)} µs | encoded whole: ${whole.toFixed(2)} µs | ${(kept / whole).toFixed(2)} |`];
}

/** Envelope heads and their encoding as a delivery makes them (`Envelopes.headParts`, bytes in parts) against text heads (`Envelopes.head`, what it did before), 48-byte payloads, both formats. */
function headRows(): string[] {
  const envs = new Envelopes(crypto.randomUUID(), crypto.randomUUID());
  const things = Array.from({ length: 50 }, () => crypto.randomUUID());
  const data = Buffer.from(JSON.stringify({ temperature: 21.5, humidity: 40, voltage: 3.3, seq: 1 }).padEnd(48, ' '));
  const N = 5_000;
  const loop = (parts: boolean, format: 'event' | 'batch') => best(() => {
    let n = 0;
    for (let r = 0; r < LOOPS / N; r++) {
      const events: EventPart[] = [];
      for (let i = 0; i < N; i++) {
        const thingId = things[Math.floor(i / 100) % 50];
        const id = `12345${r}-${thingId}-${i}`;
        const time = envs.time(1764300000000 + i);
        const head = (parts ? envs.headParts('telemetry', EVENT_TYPES.telemetry, thingId, id, time) : undefined) ?? envs.head('telemetry', EVENT_TYPES.telemetry, thingId, id, time);
        events.push({ subject: `p.${thingId}.telemetry`, id: `rule:${id}`, head, data });
      }
      n += encode(events, format).length > 0 ? N : 0;
    }
    return n;
  });
  return (['event', 'batch'] as const).map((format) => {
    const [now, before] = [loop(true, format), loop(false, format)];
    console.log(`heads and encode (${format}) µs: in parts ${now.toFixed(2)}, text ${before.toFixed(2)}`);
    return `| an event's envelope head and its encoding, 48 B, format ${format} (\`headParts\`, ${LOOPS} in deliveries of ${N}) | ${now.toFixed(2)} µs | text heads: ${before.toFixed(2)} µs | ${(now / before).toFixed(2)} |`;
  });
}

/** An event's time when every point has its own millisecond: `Envelopes.time` (a second formatted once) against toISOString per millisecond (the code it replaced). */
function timeRow(): string[] {
  const start = 1764300000000;
  const kept = best(() => { const envs = new Envelopes('a', 'r'); let n = 0; for (let i = 0; i < LOOPS; i++) n += envs.time(start + i * 3).length; return n > 0 ? LOOPS : 0; });
  const before = best(() => { let n = 0; for (let i = 0; i < LOOPS; i++) n += new Date(start + i * 3).toISOString().length; return n > 0 ? LOOPS : 0; });
  console.log(`time µs: Envelopes.time ${kept.toFixed(3)}, toISOString ${before.toFixed(3)}`);
  return [`| an event's time, each point its own millisecond (\`Envelopes.time\`, ${LOOPS} in a loop) | ${kept.toFixed(3)} µs | toISOString each: ${before.toFixed(3)} µs | ${(kept / before).toFixed(2)} |`];
}

function splitRows(): string[] {
  const payloads = {
    '48 B': JSON.stringify({ temperature: 21.5, humidity: 40, voltage: 3.3, seq: 1 }),
    '1 KiB': JSON.stringify({ blob: 'x'.repeat(1000) }),
    mixed: JSON.stringify({ t: 21.5, h: 40, seq: 1, name: 'sensor "a" [x]', arr: [1, 2, { a: 'b]' }], nested: { deep: { k: 'v}' } } }),
  };
  return Object.entries(payloads).map(([name, p]) => {
    const text = `[${Array.from({ length: 20 }, (_, i) => `[${1764300000000 + i},${p}]`).join(',')}]`;
    if (JSON.stringify(pointRanges(text)) !== JSON.stringify(pointRangesByChar(text))) throw new Error(`pointRanges differs from the scan on ${name}`);
    const rows = Math.max(1, Math.round(LOOPS / 25));
    const now = best(() => { let k = 0; for (let r = 0; r < rows; r++) k += pointRanges(text).length; return k; });
    const before = best(() => { let k = 0; for (let r = 0; r < rows; r++) k += pointRangesByChar(text).length; return k; });
    console.log(`pointRanges ${name} µs/point: ${now.toFixed(3)}, by character ${before.toFixed(3)}`);
    return `| pointRanges (a row's points), ${name} payloads (rows of 20 points) | ${now.toFixed(3)} µs a point | by character: ${before.toFixed(3)} µs | ${(now / before).toFixed(2)} |`;
  });
}

async function natsSink(dir: string): Promise<{ url: string; pid?: number; stop(): Promise<void> }> {
  if (await listening(4222)) {
    let pid: number | undefined;
    try { pid = Number(execFileSync('pgrep', ['-x', 'nats-server']).toString().trim().split('\n')[0]) || undefined; } catch { /* not ours to see */ }
    return { url: 'nats://127.0.0.1:4222', pid, stop: async () => {} };
  }
  const port = await freePort();
  const proc = spawn('/usr/sbin/nats-server', ['-js', '-a', '127.0.0.1', '-p', String(port), '-sd', path.join(dir, 'nats')], { stdio: 'ignore' });
  while (!(await listening(port))) await new Promise((r) => setTimeout(r, 100));
  return { url: `nats://127.0.0.1:${port}`, pid: proc.pid, stop: () => new Promise((r) => { proc.once('exit', () => r()); proc.kill('SIGTERM'); }) };
}

async function main(): Promise<void> {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'bench-bridge-parts-'));
  const loads = os.loadavg().map((l) => l.toFixed(1)).join(' ');
  const sink = await natsSink(dir);
  const rows = [...(await natsRow(sink.url, sink.pid)), ...envelopeRow(), ...headRows(), ...timeRow(), ...splitRows()];
  await sink.stop();
  fs.rmSync(dir, { recursive: true, force: true });
  const section = `## Bridge delivery parts (\`npm run bench:bridge-parts\`, issue 34)

\`npm run bench:bridge-parts\`, ${new Date().toISOString().slice(0, 10)}, ${os.cpus().length} CPUs, node ${process.version}, load average at the start ${loads}.
Each piece of a rule's delivery against a baseline in the same run. NATS: ${NATS_MSGS} acknowledged publishes to a memory stream
(${sink.url === 'nats://127.0.0.1:4222' ? "the machine's nats-server" : 'nats-server -js'}), ${BATCH} pipelined at a time, CPU of this process and of
nats-server per message. Envelopes, times and pointRanges: best of 5 loops; the baselines are the code they replaced (kept in the bench).

| piece | now | baseline | ratio |
|---|---|---|---|
${rows.join('\n')}
`;
  console.log(section);
  if (!args['no-write']) writeBenchmarkSection(section);
}

main().then(() => process.exit(0), (err) => { console.error(err); process.exit(1); });
