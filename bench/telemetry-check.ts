/**
 * bench:telemetry-check: CPU per telemetry payload of the broker's check, the byte scan
 * (src/broker/jsonScan.ts, what the gateway does) against the decode, `JSON.parse` and merge into
 * the latest values it replaced (parseJsonPayload + Object.assign, the baseline), in alternating
 * rounds in one process; the bench:mqtt payloads (1 KiB of 64 readings, 48 bytes), and 1 KiB of
 * readings whose values change from call to call (256 payloads in turn, as a fleet's messages: a
 * scan of the same bytes again and again lets the CPU's branch predictor learn them).
 *
 *   npm run bench:telemetry-check            (ROUNDS=5, CALLS=200000)
 *   BEFORE=/work/main/src/broker/jsonScan.ts npm run bench:telemetry-check
 *                                            (adds that copy of the scan as "before", in the same rounds)
 *   MORE=1 ...                               (and three other shapes: ASCII text, UTF-8 text, nesting)
 */
import os from 'node:os';
import { scanTelemetry } from '../src/broker/jsonScan.js';
import { parseJsonPayload } from '../src/broker/payload.js';

/** another jsonScan.ts (e.g. the main branch's), measured beside this one */
const before: { scanTelemetry(b: Uint8Array): number } | undefined = process.env.BEFORE ? await import(process.env.BEFORE) : undefined;

const ROUNDS = Number(process.env.ROUNDS ?? 5);
const CALLS = Number(process.env.CALLS ?? 200_000);

function kibPayload(): string {
  const values: Record<string, number> = { temperature: 21.5, humidity: 40, voltage: 3.3 };
  for (let i = 0; JSON.stringify(values).length < 1000; i++) values[`sensor_${String(i).padStart(2, '0')}`] = Math.round(1000 * Math.sin(i + 1) * 100) / 100;
  const text = JSON.stringify(values);
  return text.slice(0, 1) + `"pad":"${'x'.repeat(1024 - text.length - 9)}",` + text.slice(1);
}

/** 256 payloads of about 1 KiB: 60 readings of -1000 to 1000 with up to two decimals, other values in each */
function variedPayloads(): Buffer[] {
  let seed = 1;
  const random = () => (seed = (seed * 1103515245 + 12345) % 2 ** 31) / 2 ** 31;
  return Array.from({ length: 256 }, () => {
    const values: Record<string, number> = {};
    for (let i = 0; i < 60; i++) values[`sensor_${String(i).padStart(2, '0')}`] = Math.round(random() * 200_000 - 100_000) / 100;
    return Buffer.from(JSON.stringify(values));
  });
}

/** per shape, the payloads taken in turn (a power of two of them) */
const payloads: Record<string, Buffer[]> = {
  '1 KiB': [Buffer.from(kibPayload())],
  '1 KiB varied': variedPayloads(),
  '48 B': [Buffer.from(JSON.stringify({ temperature: 21.5, humidity: 40, voltage: 3.3 }))],
};
if (process.env.MORE) {
  // other shapes than the bench:mqtt payloads: a long ASCII string, non-ASCII text, nesting and other values
  payloads['text'] = [Buffer.from(JSON.stringify({ a: 1, text: 'lorem ipsum dolor sit amet '.repeat(37) }))];
  payloads['UTF-8'] = [Buffer.from(JSON.stringify({ a: 1, text: 'éèà ünïcödé '.repeat(40) }))];
  payloads['nested'] = [Buffer.from(JSON.stringify({ gps: { lat: 48.8566, lon: 2.3522 }, arr: [1, 2, 3, 4.5e3, true, null, false], s: 'ok', t: 1732600000000 }))];
}
let sink: unknown;
const latest: Record<string, unknown> = {};
const ways: Record<string, (b: Buffer) => void> = {
  scan: (b: Buffer) => { sink = scanTelemetry(b); },
  'parse + merge': (b: Buffer) => { const r = parseJsonPayload(b, true); if (r.ok) Object.assign(latest, r.value); },
};
if (before) {
  const f = before.scanTelemetry;
  ways['scan before'] = (b: Buffer) => { sink = f(b); };
}
const micros = (f: (b: Buffer) => void, list: Buffer[]) => {
  const mask = list.length - 1;
  const t = process.hrtime.bigint();
  for (let i = 0; i < CALLS; i++) f(list[i & mask]);
  return Number(process.hrtime.bigint() - t) / CALLS / 1000;
};
const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];

console.log(`bench:telemetry-check  ${ROUNDS} alternating rounds of ${CALLS} calls, node ${process.version}, load ${os.loadavg().map((l) => l.toFixed(2)).join(' ')}`);
for (const [name, b] of Object.entries(payloads)) {
  for (const f of Object.values(ways)) micros(f, b); // warm-up
  const r: Record<string, number[]> = Object.fromEntries(Object.keys(ways).map((way) => [way, []]));
  for (let i = 0; i < ROUNDS; i++) for (const [way, f] of Object.entries(ways)) r[way].push(micros(f, b));
  const m = Object.fromEntries(Object.entries(r).map(([way, xs]) => [way, median(xs)]));
  const figures = Object.entries(r).map(([way, xs]) => `${way} ${m[way].toFixed(3)} µs (${xs.map((x) => x.toFixed(2)).join(', ')})`).join('  ');
  console.log(`${name.padEnd(12)} ${figures}  scan/parse ${(m.scan / m['parse + merge']).toFixed(2)}${before ? `  before/scan ${(m['scan before'] / m.scan).toFixed(2)}` : ''}`);
}
void sink;
