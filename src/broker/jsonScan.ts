import { isUtf8 } from 'node:buffer';
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
 * How it is fast (bench:telemetry-check; see docs/benchmarks.md, "Telemetry scan, four bytes at a time"):
 * - the payload is copied (natively) into a fixed buffer followed by zero bytes: a zero ends every run
 *   (string, digits, spaces) and is never valid where the scan reads it, so no read checks the end;
 * - string bodies and digits are read four bytes at a time (one DataView read, big-endian on any
 *   platform) and the first byte that ends the run found with bit arithmetic: its mask's highest bit,
 *   by Math.clz32;
 * - the common telemetry member, `"key":number` then `,`, is found by its two runs first and checked
 *   beside them: each member's position then depends on two runs only, not on every check;
 * - UTF-8 is checked natively (isUtf8) only when a string held a byte >= 0x80 or the payload is
 *   refused (where invalid UTF-8 is the reason given first); otherwise every byte was ASCII.
 * One function with local state and an explicit stack of open containers: V8 keeps the position
 * in a register; the helpers it calls on the common path are small enough to be inlined.
 */
export type JsonScan = { ok: true; keys: number } | { ok: false; problem: PayloadProblem };

/** longest number token taken; with the exponent's limit any such number fits PostgreSQL's numeric */
const MAX_NUMBER_CHARS = 1000;
/** largest exponent magnitude taken (numeric holds 131,072 digits before the point, 16,383 after) */
const MAX_EXPONENT = 9999;

const HEX = new Int8Array(256).fill(-1);
for (let c = 0; c < 10; c++) HEX[0x30 + c] = c;
for (let c = 0; c < 6; c++) HEX[0x61 + c] = HEX[0x41 + c] = 10 + c;

/** the open containers, 1 for an object (one scan at a time: the scan is synchronous) */
const objects = new Uint8Array(MAX_JSON_DEPTH + 2);

/** the payload being scanned, copied, then zero bytes: a sentinel that ends every run (no bounds check per byte) */
const S = new Uint8Array(MAX_JSON_BYTES + 16);
/** four bytes of S at any position in one read (big-endian for the runs, little-endian for the signature) */
const DV = new DataView(S.buffer);
/** the payload's length */
let len = 0;
/** 0x80808080 while no string held a byte >= 0x80 (such a byte ends a run then), 0 after: the payload goes to isUtf8 */
let hiMask = 0;

/** Checks a payload that must be a JSON object (telemetry). */
export function scanJsonObject(b: Uint8Array): JsonScan {
  const r = scanTelemetry(b);
  return r >= 0 ? { ok: true, keys: r } : { ok: false, problem: scanProblem(b, r) };
}

/** scanJsonObject for the per-message path, without a result object: the key signature (>= 0), or a code for scanProblem. */
export function scanTelemetry(b: Uint8Array): number {
  const n = b.length;
  if (n > MAX_JSON_BYTES) return TOO_LARGE;
  S.set(b);
  // the sentinel: a run reads at most four bytes past its end
  DV.setInt32(n, 0);
  DV.setInt32(n + 4, 0);
  len = n;
  hiMask = 0x80808080 | 0;
  const r = scan();
  // invalid UTF-8 (without overlong forms or encoded surrogates) is the first reason, as in parseJsonPayload
  if ((r < 0 || hiMask === 0) && !isUtf8(b)) return INVALID_UTF8;
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

const PROBLEM: PayloadProblem[] = ['not_json', 'not_object', 'too_deep', 'nul', 'lone_surrogate', 'number_out_of_range', 'too_large', 'invalid_utf8'];
const NOT_JSON = -1;
const NOT_OBJECT = -2;
const TOO_DEEP = -3;
const NUL = -4;
const LONE_SURROGATE = -5;
const OUT_OF_RANGE = -6;
const TOO_LARGE = -7;
const INVALID_UTF8 = -8;

/**
 * The first byte from p that ends a string's run (a control character, `"`, `\`, the sentinel), four
 * bytes per step. Per byte of w, bit 7 of the mask is set for a byte < 0x20 (its low seven bits plus
 * 0x60 stay below 0x80), equal to 0x22 or 0x5c (its low bits xor the byte, plus 0x7f, stay below
 * 0x80 only for 0), or >= 0x80 while hiMask; no carry crosses a byte. The first such byte is the
 * highest bit set (the read is big-endian).
 */
function run(p: number): number {
  for (;;) {
    const w = DV.getInt32(p);
    const l = w & 0x7f7f7f7f;
    const m = ((w & hiMask) | ~(w | ((l + 0x60606060) & ((l ^ 0x22222222) + 0x7f7f7f7f) & ((l ^ 0x5c5c5c5c) + 0x7f7f7f7f)))) & 0x80808080;
    if (m !== 0) {
      p += Math.clz32(m) >> 3;
      if (S[p] < 0x80) return p;
      // the first byte >= 0x80: from now on such bytes are left to isUtf8
      hiMask = 0;
      p++;
    } else p += 4;
  }
}

/**
 * run() for the fast path's keys, with fewer operations: any byte < 0x23 (so also a space and `!`) or
 * >= 0x80 ends it too; such a key is not followed by `":` and goes to the general path.
 */
function keyRun(p: number): number {
  for (;;) {
    const w = DV.getInt32(p);
    const l = w & 0x7f7f7f7f;
    const m = (w | ~((l + 0x5d5d5d5d) & ((l ^ 0x5c5c5c5c) + 0x7f7f7f7f))) & 0x80808080;
    if (m !== 0) return p + (Math.clz32(m) >> 3);
    p += 4;
  }
}

/** The first byte from p that is not a digit, four bytes per step (a digit xor 0x30 is below 10: plus 0x76 it stays below 0x80). */
function digits(p: number): number {
  for (;;) {
    const y = DV.getInt32(p) ^ 0x30303030;
    const m = (((y & 0x7f7f7f7f) + 0x76767676) | y) & 0x80808080;
    if (m !== 0) return p + (Math.clz32(m) >> 3);
    p += 4;
  }
}

/** The first byte from p outside 0x2d-0x39 (`-`, `.`, `/`, digits: the bytes of a number without exponent, and `/`), four bytes per step. */
function numberRun(p: number): number {
  for (;;) {
    const w = DV.getInt32(p);
    const l = w & 0x7f7f7f7f;
    const m = (w | (l + 0x46464646) | ~(l + 0x53535353)) & 0x80808080;
    if (m !== 0) return p + (Math.clz32(m) >> 3);
    p += 4;
  }
}

/** Where -?(0|[1-9][0-9]*)(.[0-9]+)? from p ends, or -1. */
function plainNumber(p: number): number {
  if (S[p] === 0x2d) p++;
  const d = S[p];
  if ((d - 0x30) >>> 0 >= 10) return -1;
  p = d === 0x30 ? p + 1 : digits(p + 1);
  if (S[p] !== 0x2e) return p;
  const first = p + 1;
  p = digits(first);
  return p === first ? -1 : p;
}

/**
 * The key signature (>= 0), or a negative PROBLEM code. The loop reads one member of an object
 * (key, colon, value) or one element of an array per turn, then the comma or the closing brackets
 * after it: the common telemetry shape (a flat object of numbers) takes one turn of the inner loop
 * per reading.
 */
function scan(): number {
  const end = len;
  let pos = 0;
  let keys = 0x811c9dc5 | 0;
  let c = S[pos++];
  while (c === 0x20 || c === 0x0a || c === 0x0d || c === 0x09) c = S[pos++];
  if (c !== 0x7b) return NOT_OBJECT;
  let depth = 1;
  objects[1] = 1;
  let inObject = true;
  let opened = true;
  for (;;) {
    member: {
      value: {
        if (inObject) {
          // the common member of a telemetry object, `"key":number` then `,`: its two runs found first and
          // the number checked after, so that each position depends only on the last run's end (the CPU
          // runs the checks beside the next runs); a key without `":` right after it is left to the
          // general path below from its start, any other value from the value's start
          while (S[pos] === 0x22) {
            const p = keyRun(pos + 1);
            if (DV.getUint16(p, true) !== 0x3a22 /* ": */) break;
            if (depth === 1) keys = hashKey(pos + 1, p, keys);
            const v = p + 2;
            const q = numberRun(v);
            c = S[q];
            if (plainNumber(v) !== q || (c | 0x20) === 0x65 /* e E */ || q - v > MAX_NUMBER_CHARS) {
              pos = v;
              break value;
            }
            pos = q + 1;
            if (c !== 0x2c) {
              if (c <= 0x20) while (c === 0x20 || c === 0x0a || c === 0x0d || c === 0x09) c = S[pos++];
              break member;
            }
            opened = false;
          }
        }
        c = S[pos++];
        if (c <= 0x20) while (c === 0x20 || c === 0x0a || c === 0x0d || c === 0x09) c = S[pos++];
        if (opened && (c === 0x7d || c === 0x5d)) {
          if (c !== (inObject ? 0x7d : 0x5d)) return NOT_JSON;
          break member;
        }
        if (!inObject) {
          pos--;
          break value;
        }
        // a key
        if (c !== 0x22) return NOT_JSON;
        const p = run(pos);
        c = S[p];
        if (c === 0x22) {
          if (depth === 1) keys = hashKey(pos, p, keys);
          pos = p + 1;
        } else if (c !== 0x5c) return NOT_JSON;
        else if (depth === 1) {
          keyHash = keys;
          pos = escapedKey(pos);
          if (pos < 0) return pos;
          keys = keyHash;
        } else {
          pos = string(p);
          if (pos < 0) return pos;
        }
        c = S[pos++];
        if (c !== 0x3a) {
          while (c === 0x20 || c === 0x0a || c === 0x0d || c === 0x09) c = S[pos++];
          if (c !== 0x3a) return NOT_JSON;
        }
      }
      // a value, from pos
      c = S[pos++];
      if (c <= 0x20) while (c === 0x20 || c === 0x0a || c === 0x0d || c === 0x09) c = S[pos++];
      if (c === 0x7b || c === 0x5b) {
        if (++depth > MAX_JSON_DEPTH) return TOO_DEEP;
        inObject = c === 0x7b;
        objects[depth] = inObject ? 1 : 0;
        opened = true;
        continue;
      }
      if ((c - 0x30) >>> 0 < 10 || c === 0x2d) {
        // sign, digits and a fraction here; a number with an exponent (or a long one) goes to number()
        const start = pos - 1;
        if (c === 0x2d) {
          c = S[pos++];
          if ((c - 0x30) >>> 0 >= 10) return NOT_JSON;
        }
        if (c !== 0x30) pos = digits(pos);
        if (S[pos] === 0x2e) {
          const first = ++pos;
          pos = digits(pos);
          if (pos === first) return NOT_JSON;
        }
        if ((S[pos] | 0x20) === 0x65 || pos - start > MAX_NUMBER_CHARS) {
          pos = number(start);
          if (pos < 0) return pos;
        }
      } else if (c === 0x22) {
        const p = run(pos);
        pos = S[p] === 0x22 ? p + 1 : string(p);
        if (pos < 0) return pos;
      } else {
        pos = literal(pos - 1);
        if (pos < 0) return pos;
      }
      c = S[pos++];
      if (c <= 0x20) while (c === 0x20 || c === 0x0a || c === 0x0d || c === 0x09) c = S[pos++];
    }
    // after a value: a comma, or closing brackets
    for (;;) {
      if (c === 0x2c) {
        opened = false;
        break;
      }
      if (c !== (inObject ? 0x7d : 0x5d)) return NOT_JSON;
      if (--depth === 0) {
        c = S[pos++];
        while (c === 0x20 || c === 0x0a || c === 0x0d || c === 0x09) c = S[pos++];
        return pos - 1 === end ? keys >>> 0 : NOT_JSON;
      }
      inObject = objects[depth] === 1;
      c = S[pos++];
      if (c <= 0x20) while (c === 0x20 || c === 0x0a || c === 0x0d || c === 0x09) c = S[pos++];
    }
  }
}

/** the signature across escapedKey() */
let keyHash = 0;

/**
 * A top-level key's bytes [start, end) into the signature: four bytes per multiply (FNV-1a's prime),
 * then its length, which separates one key from the next.
 */
function hashKey(start: number, end: number, h: number): number {
  let k = start;
  for (; k + 4 <= end; k += 4) h = Math.imul(h ^ DV.getInt32(k, true), 0x01000193);
  for (; k < end; k++) h = Math.imul(h ^ S[k], 0x01000193);
  return Math.imul(h ^ (end - start), 0x01000193);
}

/** A top-level key with an escape, from its first byte: hashed byte by byte into keyHash; the position after its closing quote. */
function escapedKey(pos: number): number {
  let h = keyHash;
  for (;;) {
    if (pos >= len) return NOT_JSON;
    const c = S[pos++];
    h = Math.imul(h ^ c, 0x01000193);
    if (c === 0x22) {
      keyHash = h;
      return pos;
    }
    if (c === 0x5c) {
      const e = escape(pos);
      if (e < 0) return e;
      for (; pos < e; pos++) h = Math.imul(h ^ S[pos], 0x01000193);
    } else if (c < 0x20) return NOT_JSON;
    else if (c >= 0x80) hiMask = 0;
  }
}

/** true, false or null at pos: the position after it, or NOT_JSON. */
function literal(pos: number): number {
  const c = S[pos];
  const word = c === 0x74 ? TRUE : c === 0x66 ? FALSE : c === 0x6e ? NULL : undefined;
  if (!word || pos + word.length > len) return NOT_JSON;
  for (let k = 1; k < word.length; k++) if (S[pos + k] !== word[k]) return NOT_JSON;
  return pos + word.length;
}
const TRUE = [0x74, 0x72, 0x75, 0x65];
const FALSE = [0x66, 0x61, 0x6c, 0x73, 0x65];
const NULL = [0x6e, 0x75, 0x6c, 0x6c];

/** A string's rest from pos (within it): the position after its closing quote, or a problem code. */
function string(pos: number): number {
  for (;;) {
    pos = run(pos);
    const c = S[pos++];
    if (c === 0x22) return pos;
    if (c !== 0x5c) return NOT_JSON;
    pos = escape(pos);
    if (pos < 0) return pos;
  }
}

/** After a backslash: the position after the escape. A `\u` may not be NUL (jsonb refuses it) or half a surrogate pair. */
function escape(pos: number): number {
  if (pos >= len) return NOT_JSON;
  const c = S[pos++];
  if (c !== 0x75) return c === 0x22 || c === 0x5c || c === 0x2f || c === 0x62 || c === 0x66 || c === 0x6e || c === 0x72 || c === 0x74 ? pos : NOT_JSON;
  const unit = hex4(pos);
  if (unit < 0) return NOT_JSON;
  pos += 4;
  if (unit === 0) return NUL;
  if (unit >= 0xdc00 && unit <= 0xdfff) return LONE_SURROGATE;
  if (unit >= 0xd800 && unit <= 0xdbff) {
    // a high surrogate must be followed at once by an escaped low one
    if (pos + 6 > len || S[pos] !== 0x5c || S[pos + 1] !== 0x75) return LONE_SURROGATE;
    const low = hex4(pos + 2);
    if (low < 0) return NOT_JSON;
    if (low < 0xdc00 || low > 0xdfff) return LONE_SURROGATE;
    pos += 6;
  }
  return pos;
}

function hex4(pos: number): number {
  if (pos + 4 > len) return -1;
  const v = (HEX[S[pos]] << 12) | (HEX[S[pos + 1]] << 8) | (HEX[S[pos + 2]] << 4) | HEX[S[pos + 3]];
  return HEX[S[pos]] < 0 || HEX[S[pos + 1]] < 0 || HEX[S[pos + 2]] < 0 || HEX[S[pos + 3]] < 0 ? -1 : v;
}

/** -?(0|[1-9][0-9]*)(.[0-9]+)?([eE][+-]?[0-9]+)? from `start`: the position after it, or a problem code. */
function number(start: number): number {
  const end = len;
  let pos = start;
  if (S[pos] === 0x2d) pos++;
  if (pos >= end) return NOT_JSON;
  if (S[pos] === 0x30) pos++;
  else {
    const first = pos;
    while (pos < end && (S[pos] - 0x30) >>> 0 < 10) pos++;
    if (pos === first) return NOT_JSON;
  }
  if (pos < end && S[pos] === 0x2e) {
    const first = ++pos;
    while (pos < end && (S[pos] - 0x30) >>> 0 < 10) pos++;
    if (pos === first) return NOT_JSON;
  }
  if (pos < end && (S[pos] === 0x65 || S[pos] === 0x45)) {
    pos++;
    if (pos < end && (S[pos] === 0x2b || S[pos] === 0x2d)) pos++;
    const first = pos;
    let exponent = 0;
    while (pos < end && (S[pos] - 0x30) >>> 0 < 10) {
      if (exponent <= MAX_EXPONENT) exponent = exponent * 10 + (S[pos] - 0x30);
      pos++;
    }
    if (pos === first) return NOT_JSON;
    if (exponent > MAX_EXPONENT) return OUT_OF_RANGE;
  }
  return pos - start > MAX_NUMBER_CHARS ? OUT_OF_RANGE : pos;
}
