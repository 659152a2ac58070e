/**
 * bench:recent-history: what RecentHistory's index costs once its ring is full (src/broker/recentHistory.ts), against
 * the index it replaced (a key string `tx/thing` and an object per row in one Map), in the same run: the JavaScript
 * heap it holds, one full collection with it, and adding and finding a row. Two shapes of bench:bridges: rows of 3,000
 * bytes (1 KiB payloads, QoS 1) and of 150 bytes (48-byte payloads), 50 things a transaction, 256 MiB. Needs
 * `--expose-gc` (the npm script passes it).
 *
 *   npm run bench:recent-history
 *   npm run bench:recent-history -- --no-write
 */
import crypto from 'node:crypto';
import { parseArgs } from 'node:util';
import { RecentHistory } from '../src/broker/recentHistory.js';
import { writeBenchmarkSection } from './lib/report.js';

const { values: args } = parseArgs({ options: { 'no-write': { type: 'boolean', default: false } } });
const gc = (globalThis as { gc?: () => void }).gc;
if (!gc) throw new Error('run with node --expose-gc (npm run bench:recent-history)');
const MEMORY = 256 * 1024 * 1024;
const SLAB = 8 * 1024 * 1024;
const THINGS = 50;

interface Index {
  add(tx: string, thingId: string, length: number): void;
  get(tx: string, thingId: string): unknown;
  readonly size: number;
}

/** The index RecentHistory had before: a key and an object per row, forgotten slab by slab. */
class PerRowIndex implements Index {
  private readonly rows = new Map<string, { slab: number; start: number; end: number }>();
  private readonly keys: string[][] = [];
  private current = -1;
  private used = SLAB;
  add(tx: string, thingId: string, length: number): void {
    if (this.used + length > SLAB) {
      this.current = (this.current + 1) % (MEMORY / SLAB);
      for (const k of this.keys[this.current] ?? []) this.rows.delete(k);
      this.keys[this.current] = [];
      this.used = 0;
    }
    const key = `${tx}/${thingId}`;
    this.rows.set(key, { slab: this.current, start: this.used, end: this.used + length });
    this.keys[this.current].push(key);
    this.used += length;
  }
  get(tx: string, thingId: string) {
    return this.rows.get(`${tx}/${thingId}`);
  }
  get size() {
    return this.rows.size;
  }
}

/** RecentHistory as the ingest uses it, its rows' bytes left unwritten (the index is measured, not the copy). */
function current(): Index {
  const recent = new RecentHistory(MEMORY);
  recent.touch('1');
  return { add: (tx, thingId, length) => recent.add(tx, thingId, length, () => {}), get: (tx, thingId) => recent.get(tx, thingId), get size() { return recent.size; } };
}

function measure(make: () => Index, rowBytes: number) {
  const things = Array.from({ length: THINGS }, () => crypto.randomUUID());
  gc!();
  const before = process.memoryUsage().heapUsed;
  const index = make();
  const rows = Math.floor((MEMORY - SLAB) / rowBytes);
  let t = process.hrtime.bigint();
  for (let i = 0; i < rows; i++) index.add(String(1000 + Math.floor(i / THINGS)), things[i % THINGS], rowBytes);
  const addNs = Number(process.hrtime.bigint() - t) / rows;
  t = process.hrtime.bigint();
  let found = 0;
  for (let i = 0; i < rows; i++) if (index.get(String(1000 + Math.floor(i / THINGS)), things[i % THINGS])) found++;
  const getNs = Number(process.hrtime.bigint() - t) / rows;
  gc!();
  const heapMB = (process.memoryUsage().heapUsed - before) / 1e6;
  t = process.hrtime.bigint();
  for (let i = 0; i < 5; i++) gc!();
  const gcMs = Number(process.hrtime.bigint() - t) / 5e6;
  return { rows: index.size, found, heapMB, gcMs, addNs, getNs };
}

const table: string[] = [];
for (const rowBytes of [3000, 150]) {
  const before = measure(() => new PerRowIndex(), rowBytes);
  const now = measure(current, rowBytes);
  const line = (name: string, m: ReturnType<typeof measure>) => `${name}: ${m.rows} rows kept, heap ${m.heapMB.toFixed(1)} MB, full GC ${m.gcMs.toFixed(1)} ms, add ${(m.addNs / 1000).toFixed(2)} µs, find ${(m.getNs / 1000).toFixed(2)} µs`;
  console.log(`rows of ${rowBytes} B\n  ${line('per transaction (now)', now)}\n  ${line('per row (before)', before)}`);
  table.push(`| ${rowBytes} B | ${now.rows.toLocaleString('en-US')} / ${before.rows.toLocaleString('en-US')} | ${now.heapMB.toFixed(1)} / ${before.heapMB.toFixed(1)} MB | ${now.gcMs.toFixed(1)} / ${before.gcMs.toFixed(1)} ms (${(now.gcMs / before.gcMs).toFixed(2)}) | ${(now.addNs / 1000).toFixed(2)} / ${(before.addNs / 1000).toFixed(2)} µs | ${(now.getNs / 1000).toFixed(2)} / ${(before.getNs / 1000).toFixed(2)} µs |`);
}

if (!args['no-write']) {
  writeBenchmarkSection(`## RecentHistory's index (\`npm run bench:recent-history\`)

A full ring (256 MiB, 50 things a transaction), the index per transaction (a map of things to row numbers and a typed
array per transaction, at most 16,384 rows a slab) against the one it replaced (a key string and an object per row), in
one run. Each cell: now / before. At 150 B the index now keeps at most 524,288 rows (the count limit), so most of that
shape's finds are of rows it no longer holds, and a miss costs less: the 3,000 B row compares like with like.

| row size | rows kept | JavaScript heap held | one full collection (ratio) | add a row | find a row |
|---|---|---|---|---|---|
${table.join('\n')}
`);
}
