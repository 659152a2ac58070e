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
 * a time, and their lengths): two
 * messages of a thing with the same signature have the same keys, so the last of them alone
 * carries the thing's latest values (a batch merges its messages only when they differ).
 *
 * One function with local state and an explicit stack of open containers: V8 keeps the position
 * and the bytes in registers (a recursive descent over module-level state cost about twice as much).
 */
export type JsonScan = { ok: true; keys: number } | { ok: false; problem: PayloadProblem };

/** longest number token taken; with the exponent's limit any such number fits PostgreSQL's numeric */
const MAX_NUMBER_CHARS = 1000;
/** largest exponent magnitude taken (numeric holds 131,072 digits before the point, 16,383 after) */
const MAX_EXPONENT = 9999;

/** byte classes */
const STOP = 1; // inside a string: quote, backslash or a control character
const SPACE = 2;
const DIGIT = 4;
const CLASS = new Uint8Array(256);
for (let c = 0; c < 0x20; c++) CLASS[c] = STOP;
CLASS[0x22] = STOP;
CLASS[0x5c] = STOP;
CLASS[0x20] = SPACE;
CLASS[0x09] = SPACE | STOP;
CLASS[0x0a] = SPACE | STOP;
CLASS[0x0d] = SPACE | STOP;
for (let c = 0x30; c <= 0x39; c++) CLASS[c] = DIGIT;

const HEX = new Int8Array(256).fill(-1);
for (let c = 0; c < 10; c++) HEX[0x30 + c] = c;
for (let c = 0; c < 6; c++) HEX[0x61 + c] = HEX[0x41 + c] = 10 + c;

/** the open containers, 1 for an object (one scan at a time: the scan is synchronous) */
const objects = new Uint8Array(MAX_JSON_DEPTH + 2);

/** Checks a payload that must be a JSON object (telemetry). */
export function scanJsonObject(b: Uint8Array): JsonScan {
  const r = scanTelemetry(b);
  return r >= 0 ? { ok: true, keys: r } : { ok: false, problem: scanProblem(b, r) };
}

/** scanJsonObject for the per-message path, without a result object: the key signature (>= 0), or a code for scanProblem. */
export function scanTelemetry(b: Uint8Array): number {
  if (b.length > MAX_JSON_BYTES) return TOO_LARGE;
  // UTF-8 without overlong forms or encoded surrogates (natively); the scan then only meets ASCII structure
  if (!isUtf8(b)) return INVALID_UTF8;
  return scan(b);
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
 * The key signature (>= 0), or a negative PROBLEM code. The loop reads one member of an object
 * (key, colon, value) or one element of an array per turn, then the comma or the closing brackets
 * after it: the common telemetry shape (a flat object of numbers) takes one turn per reading.
 */
function scan(b: Uint8Array): number {
  const end = b.length;
  let pos = 0;
  let keys = 0x811c9dc5 | 0;
  while (pos < end && CLASS[b[pos]] & SPACE) pos++;
  if (pos >= end || b[pos] !== 0x7b /* { */) return NOT_OBJECT;
  pos++;
  let depth = 1;
  objects[1] = 1;
  let inObject = true;
  /** right after an opening bracket (where a closing one may follow) */
  let opened = true;
  for (;;) {
    while (pos < end && CLASS[b[pos]] & SPACE) pos++;
    if (pos >= end) return NOT_JSON;
    let c = b[pos++];
    if (opened && (c === 0x7d || c === 0x5d)) {
      // an empty container
      if (c !== (inObject ? 0x7d /* } */ : 0x5d /* ] */)) return NOT_JSON;
    } else {
      if (inObject) {
        // the key; a top-level key's bytes (escapes as written, and its closing quote) go into the signature
        if (c !== 0x22 /* " */) return NOT_JSON;
        if (depth === 1) {
          const start = pos;
          while (pos < end && !(CLASS[b[pos]] & STOP)) pos++;
          if (pos >= end) return NOT_JSON;
          if (b[pos] === 0x22) {
            keys = hashKey(b, start, pos, keys);
            pos++;
          } else if (b[pos] === 0x5c /* \ */) {
            // a key with an escape (rare): hashed byte by byte, escapes as written
            keyHash = keys;
            pos = escapedKey(b, start);
            if (pos < 0) return pos;
            keys = keyHash;
          } else return NOT_JSON; // control characters must be escaped
        } else {
          pos = string(b, pos);
          if (pos < 0) return pos;
        }
        while (pos < end && CLASS[b[pos]] & SPACE) pos++;
        if (pos >= end || b[pos++] !== 0x3a /* : */) return NOT_JSON;
        while (pos < end && CLASS[b[pos]] & SPACE) pos++;
        if (pos >= end) return NOT_JSON;
        c = b[pos++];
      }
      // the value
      if (c === 0x7b || c === 0x5b /* [ */) {
        if (++depth > MAX_JSON_DEPTH) return TOO_DEEP;
        inObject = c === 0x7b;
        objects[depth] = inObject ? 1 : 0;
        opened = true;
        continue;
      }
      pos = scalar(b, pos, c);
      if (pos < 0) return pos;
      while (pos < end && CLASS[b[pos]] & SPACE) pos++;
      if (pos >= end) return NOT_JSON;
      c = b[pos++];
    }
    // after a value: a comma, or closing brackets
    for (;;) {
      if (c === 0x2c /* , */) {
        opened = false;
        break;
      }
      if (c !== (inObject ? 0x7d : 0x5d)) return NOT_JSON;
      if (--depth === 0) {
        while (pos < end && CLASS[b[pos]] & SPACE) pos++;
        return pos === end ? keys >>> 0 : NOT_JSON;
      }
      inObject = objects[depth] === 1;
      while (pos < end && CLASS[b[pos]] & SPACE) pos++;
      if (pos >= end) return NOT_JSON;
      c = b[pos++];
    }
  }
}

/** the signature across escapedKey() */
let keyHash = 0;

/**
 * A top-level key's bytes [start, end) into the signature: four bytes per multiply (FNV-1a's prime),
 * then its length, which separates one key from the next.
 */
function hashKey(b: Uint8Array, start: number, end: number, h: number): number {
  let k = start;
  for (; k + 4 <= end; k += 4) h = Math.imul(h ^ (b[k] | (b[k + 1] << 8) | (b[k + 2] << 16) | (b[k + 3] << 24)), 0x01000193);
  for (; k < end; k++) h = Math.imul(h ^ b[k], 0x01000193);
  return Math.imul(h ^ (end - start), 0x01000193);
}

/** A top-level key with an escape, from its first byte: hashed byte by byte into keyHash; the position after its closing quote. */
function escapedKey(b: Uint8Array, pos: number): number {
  let h = keyHash;
  for (;;) {
    if (pos >= b.length) return NOT_JSON;
    const c = b[pos++];
    h = Math.imul(h ^ c, 0x01000193);
    if (c === 0x22) {
      keyHash = h;
      return pos;
    }
    if (c === 0x5c) {
      const e = escape(b, pos);
      if (e < 0) return e;
      for (; pos < e; pos++) h = Math.imul(h ^ b[pos], 0x01000193);
    } else if (c < 0x20) return NOT_JSON;
  }
}

/** A string, number or literal whose first byte `c` is at pos - 1: the position after it, or a problem code. */
function scalar(b: Uint8Array, pos: number, c: number): number {
  if (c === 0x22) return string(b, pos);
  if (c === 0x2d /* - */ || CLASS[c] & DIGIT) {
    // sign, digits and a fraction here; a number with an exponent (or a long one) goes to number()
    const end = b.length;
    const start = pos - 1;
    if (c === 0x2d) {
      if (pos >= end) return NOT_JSON;
      c = b[pos++];
      if (!(CLASS[c] & DIGIT)) return NOT_JSON;
    }
    if (c !== 0x30) while (pos < end && CLASS[b[pos]] & DIGIT) pos++;
    if (pos < end && b[pos] === 0x2e /* . */) {
      const first = ++pos;
      while (pos < end && CLASS[b[pos]] & DIGIT) pos++;
      if (pos === first) return NOT_JSON;
    }
    return (pos < end && (b[pos] | 0x20) === 0x65) /* e E */ || pos - start > MAX_NUMBER_CHARS ? number(b, start) : pos;
  }
  return literal(b, pos - 1);
}

function literal(b: Uint8Array, pos: number): number {
  const c = b[pos];
  const word = c === 0x74 ? TRUE : c === 0x66 ? FALSE : c === 0x6e ? NULL : undefined;
  if (!word || pos + word.length > b.length) return NOT_JSON;
  for (let k = 1; k < word.length; k++) if (b[pos + k] !== word[k]) return NOT_JSON;
  return pos + word.length;
}

const TRUE = [0x74, 0x72, 0x75, 0x65];
const FALSE = [0x66, 0x61, 0x6c, 0x73, 0x65];
const NULL = [0x6e, 0x75, 0x6c, 0x6c];

/** A string's rest after its opening quote: the position after its closing quote, or a problem code. */
function string(b: Uint8Array, pos: number): number {
  const end = b.length;
  for (;;) {
    while (pos < end && !(CLASS[b[pos]] & STOP)) pos++;
    if (pos >= end) return NOT_JSON;
    const c = b[pos++];
    if (c === 0x22) return pos;
    if (c !== 0x5c) return NOT_JSON; // control characters must be escaped
    pos = escape(b, pos);
    if (pos < 0) return pos;
  }
}

/** After a backslash: the position after the escape. A `\u` may not be NUL (jsonb refuses it) or half a surrogate pair. */
function escape(b: Uint8Array, pos: number): number {
  if (pos >= b.length) return NOT_JSON;
  const c = b[pos++];
  if (c !== 0x75 /* u */) return c === 0x22 || c === 0x5c || c === 0x2f || c === 0x62 || c === 0x66 || c === 0x6e || c === 0x72 || c === 0x74 ? pos : NOT_JSON;
  const unit = hex4(b, pos);
  if (unit < 0) return NOT_JSON;
  pos += 4;
  if (unit === 0) return NUL;
  if (unit >= 0xdc00 && unit <= 0xdfff) return LONE_SURROGATE;
  if (unit >= 0xd800 && unit <= 0xdbff) {
    // a high surrogate must be followed at once by an escaped low one
    if (pos + 6 > b.length || b[pos] !== 0x5c || b[pos + 1] !== 0x75) return LONE_SURROGATE;
    const low = hex4(b, pos + 2);
    if (low < 0) return NOT_JSON;
    if (low < 0xdc00 || low > 0xdfff) return LONE_SURROGATE;
    pos += 6;
  }
  return pos;
}

function hex4(b: Uint8Array, pos: number): number {
  if (pos + 4 > b.length) return -1;
  const v = (HEX[b[pos]] << 12) | (HEX[b[pos + 1]] << 8) | (HEX[b[pos + 2]] << 4) | HEX[b[pos + 3]];
  return HEX[b[pos]] < 0 || HEX[b[pos + 1]] < 0 || HEX[b[pos + 2]] < 0 || HEX[b[pos + 3]] < 0 ? -1 : v;
}

/** -?(0|[1-9][0-9]*)(.[0-9]+)?([eE][+-]?[0-9]+)? from `start`: the position after it, or a problem code. */
function number(b: Uint8Array, start: number): number {
  const end = b.length;
  let pos = start;
  if (b[pos] === 0x2d) pos++;
  if (pos >= end) return NOT_JSON;
  if (b[pos] === 0x30) pos++;
  else {
    const first = pos;
    while (pos < end && CLASS[b[pos]] & DIGIT) pos++;
    if (pos === first) return NOT_JSON;
  }
  if (pos < end && b[pos] === 0x2e /* . */) {
    const first = ++pos;
    while (pos < end && CLASS[b[pos]] & DIGIT) pos++;
    if (pos === first) return NOT_JSON;
  }
  if (pos < end && (b[pos] === 0x65 || b[pos] === 0x45) /* e E */) {
    pos++;
    if (pos < end && (b[pos] === 0x2b || b[pos] === 0x2d)) pos++;
    const first = pos;
    let exponent = 0;
    while (pos < end && CLASS[b[pos]] & DIGIT) {
      if (exponent <= MAX_EXPONENT) exponent = exponent * 10 + (b[pos] - 0x30);
      pos++;
    }
    if (pos === first) return NOT_JSON;
    if (exponent > MAX_EXPONENT) return OUT_OF_RANGE;
  }
  return pos - start > MAX_NUMBER_CHARS ? OUT_OF_RANGE : pos;
}
