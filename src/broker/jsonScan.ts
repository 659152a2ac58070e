import { isUtf8 } from 'node:buffer';
import fs from 'node:fs';
import { MAX_JSON_BYTES, MAX_JSON_DEPTH, parseJsonPayload, type PayloadProblem } from './payload.js';

/**
 * A strict JSON checker over the payload's bytes, for telemetry: it builds nothing (no string, no
 * object), so a message costs one pass over its bytes instead of a decode and `JSON.parse` (the
 * values are parsed later, by PostgreSQL, once per thing and batch: see IngestBuffer). It accepts
 * exactly what PostgreSQL stores as jsonb (RFC 8259 JSON in UTF-8, without `\u0000` and lone
 * surrogates), within the gateway's limits: MAX_JSON_BYTES, MAX_JSON_DEPTH, and numbers that
 * PostgreSQL's numeric holds.
 *
 * `keys` is a signature of the top-level keys in order (FNV-1a's multiply over their bytes, four at
 * a time, and their lengths): two messages of a thing with the same signature have the same keys, so
 * the last of them alone carries the thing's latest values (a batch merges its messages only when
 * they differ).
 *
 * The scan itself is WebAssembly with 128-bit SIMD (wasm/jsonScan.c, built by `npm run build:wasm`
 * into wasm/jsonScan.wasm, which is committed): strings, keys, numbers and digits are read 16
 * bytes per step. It replaced a JavaScript scan of the same grammar reading 4 bytes per step (one
 * DataView read and bit arithmetic): even with it on 48-byte payloads and on one 1 KiB payload
 * scanned again and again, 1.4 times as fast on 1 KiB payloads whose values change, 2 to 4 times on
 * strings (bench:telemetry-check; docs/benchmarks.md, issue 19, seventh pass).
 * UTF-8 is checked natively (isUtf8) only when the payload holds a byte >= 0x80 or is refused
 * (where invalid UTF-8 is the reason given first); otherwise every byte was ASCII.
 */
export type JsonScan = { ok: true; keys: number } | { ok: false; problem: PayloadProblem };

/** Checks a payload that must be a JSON object (telemetry). */
export function scanJsonObject(b: Uint8Array): JsonScan {
  const r = scanTelemetry(b);
  return r >= 0 ? { ok: true, keys: r } : { ok: false, problem: scanProblem(b, r) };
}

/**
 * The module's exports (see wasm/jsonScan.c): `scan(n)` checks the first n bytes at `payload()`
 * (it writes its own zero sentinel after them) and returns the key signature (>= 0) or a negative
 * code below; the byte at `highBytes()` is then 1 when the payload holds a byte >= 0x80. Its memory
 * never grows, so one view of it serves for the process's life.
 */
interface ScanExports { memory: { buffer: ArrayBuffer }; payload(): number; highBytes(): number; scan(n: number): number; maxBytes(): number; maxDepth(): number }

/** Node's WebAssembly (the project's TypeScript libraries do not declare it) */
interface Wasm { Module: new (bytes: Uint8Array) => object; Instance: new (module: object) => { exports: unknown } }

const wasm = (() => {
  const { Module, Instance } = (globalThis as unknown as { WebAssembly: Wasm }).WebAssembly;
  const e = new Instance(new Module(fs.readFileSync(new URL('./wasm/jsonScan.wasm', import.meta.url)))).exports as ScanExports;
  // the C has its own copy of the limits: a module built with others would check other payloads (or overrun its buffer)
  if (e.maxBytes() !== MAX_JSON_BYTES || e.maxDepth() !== MAX_JSON_DEPTH) {
    throw new Error(`wasm/jsonScan.wasm was built for ${e.maxBytes()} bytes and depth ${e.maxDepth()}, payload.ts says ${MAX_JSON_BYTES} and ${MAX_JSON_DEPTH}: change wasm/jsonScan.c and run npm run build:wasm`);
  }
  return { memory: new Uint8Array(e.memory.buffer), at: e.payload(), high: e.highBytes(), scan: e.scan };
})();

/** scanJsonObject for the per-message path, without a result object: the key signature (>= 0), or a code for scanProblem. */
export function scanTelemetry(b: Uint8Array): number {
  if (b.length > MAX_JSON_BYTES) return TOO_LARGE;
  wasm.memory.set(b, wasm.at);
  const r = wasm.scan(b.length);
  // invalid UTF-8 (without overlong forms or encoded surrogates) is the first reason, as in parseJsonPayload
  if ((r < 0 || wasm.memory[wasm.high] !== 0) && !isUtf8(b)) return INVALID_UTF8;
  return r;
}

/** Why scanTelemetry refused `b` (its negative result). */
export function scanProblem(b: Uint8Array, code: number): PayloadProblem {
  // not an object at all (rare): the full parse tells the wrong kind of JSON from no JSON
  if (code === NOT_OBJECT) {
    const parsed = parseJsonPayload(Buffer.from(b.buffer, b.byteOffset, b.length), true);
    return parsed.ok ? 'not_object' : parsed.problem;
  }
  const problem = PROBLEM[-code - 1];
  return problem === 'not_json' && b.indexOf(0) !== -1 ? 'nul' : problem;
}

/** the problem of code -1 - k (wasm/jsonScan.c returns -1 to -6; -7 and -8 are given here) */
const PROBLEM: PayloadProblem[] = ['not_json', 'not_object', 'too_deep', 'nul', 'lone_surrogate', 'number_out_of_range', 'too_large', 'invalid_utf8'];
const NOT_OBJECT = -2;
const TOO_LARGE = -7;
const INVALID_UTF8 = -8;
