import { execFileSync, spawnSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import fc from 'fast-check';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { scanJsonObject } from '../../src/broker/jsonScan.js';
import { MAX_JSON_BYTES, MAX_JSON_DEPTH, parseJsonPayload } from '../../src/broker/payload.js';
import { createTestDatabase, type TestDatabase } from '../helpers/db.js';

let db: TestDatabase;

beforeAll(async () => {
  db = await createTestDatabase();
});
afterAll(async () => db?.drop());

/** Whether Postgres stores this JSON text as jsonb (what the telemetry and twin tables hold). */
async function postgresAccepts(text: string): Promise<boolean> {
  try {
    // sent as text: a jsonb-typed parameter would be JSON-encoded again by postgres.js
    await db.sql`select ${text}::text::jsonb`;
    return true;
  } catch {
    return false;
  }
}

// string units that stress the checks: NUL, lone surrogates, a pair, a backslash, plain text
const unit = fc.oneof(
  fc.constantFrom('\u0000', '\ud800', '\udbff', '\udc00', '\udfff', '\ud83d\ude00', '\\', '"', 'a', 'é'),
  fc.integer({ min: 0, max: 0xffff }).map((c) => String.fromCharCode(c)),
);

describe('parseJsonPayload', () => {
  it('accepts a JSON payload exactly when Postgres stores it as jsonb, and returns what was sent', async () => {
    const seen = { accepted: 0, refused: 0 };
    await fc.assert(
      fc.asyncProperty(fc.jsonValue({ maxDepth: 3, stringUnit: unit }), async (value) => {
        // JSON.stringify writes NUL and lone surrogates as \u escapes, as a device's JSON library would
        const text = JSON.stringify(value);
        const result = parseJsonPayload(Buffer.from(text), false);
        expect(result.ok).toBe(await postgresAccepts(text));
        if (result.ok) expect(result.value).toEqual(JSON.parse(text));
        seen[result.ok ? 'accepted' : 'refused'] += 1;
      }),
      { numRuns: 300 },
    );
    // both sides of the equivalence were exercised
    expect(seen.accepted).toBeGreaterThan(30);
    expect(seen.refused).toBeGreaterThan(30);
  });

  it(`refuses nesting deeper than ${MAX_JSON_DEPTH}, and objects only where required`, () => {
    const nested = (depth: number) => '['.repeat(depth) + ']'.repeat(depth);
    expect(parseJsonPayload(Buffer.from(nested(MAX_JSON_DEPTH)), false).ok).toBe(true);
    expect(parseJsonPayload(Buffer.from(nested(MAX_JSON_DEPTH + 1)), false)).toEqual({ ok: false, problem: 'too_deep' });
    // deep but cheap to reject: the walk stops at the limit
    expect(parseJsonPayload(Buffer.from(nested(20_000)), false)).toEqual({ ok: false, problem: 'too_deep' });
    expect(parseJsonPayload(Buffer.from('[]'), true)).toEqual({ ok: false, problem: 'not_object' });
    expect(parseJsonPayload(Buffer.from('null'), true)).toEqual({ ok: false, problem: 'not_object' });
    expect(parseJsonPayload(Buffer.from('{"__proto__":{"a":"\\u0000"}}'), true)).toEqual({ ok: false, problem: 'nul' });
  });
});

/** What the telemetry check must accept: a JSON object that Postgres stores as jsonb, within the limits. */
async function acceptable(text: string): Promise<boolean> {
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch {
    return false;
  }
  if (value === null || typeof value !== 'object' || Array.isArray(value)) return false;
  return postgresAccepts(text);
}

/** The scan's verdict on `runs` generated texts is PostgreSQL's every time, and both verdicts came more than `least` times. */
async function agreesWithPostgres(texts: fc.Arbitrary<string>, runs: number, least: number): Promise<void> {
  const seen = { accepted: 0, refused: 0 };
  await fc.assert(
    fc.asyncProperty(texts, async (text) => {
      const scanned = scanJsonObject(Buffer.from(text));
      expect(scanned.ok, text).toBe(await acceptable(text));
      seen[scanned.ok ? 'accepted' : 'refused'] += 1;
    }),
    { numRuns: runs },
  );
  expect(seen.accepted).toBeGreaterThan(least);
  expect(seen.refused).toBeGreaterThan(least);
}

/** JSON objects as text, with keys from `keys` and strings of `stringUnit` */
const objectText = (keys: fc.Arbitrary<string>, stringUnit: fc.Arbitrary<string> | 'grapheme') =>
  fc.dictionary(keys, fc.oneof(fc.jsonValue({ maxDepth: 3, stringUnit }), fc.double({ noNaN: true, noDefaultInfinity: true }))).map((o) => JSON.stringify(o));

/** JSON texts with a byte changed, removed or repeated: near misses of valid JSON */
const mutated = fc
  .tuple(fc.jsonValue({ maxDepth: 3, stringUnit: unit }).map((v) => JSON.stringify({ v, w: [v, 1.5e3, -0.25, true, null] })), fc.nat(), fc.constantFrom(...' \t\n{}[]":,.-+eE0159\\u/tfnlrx\u0000'.split('')), fc.constantFrom('replace', 'insert', 'delete'))
  .map(([text, at, c, how]) => {
    const i = at % text.length;
    return how === 'replace' ? text.slice(0, i) + c + text.slice(i + 1) : how === 'insert' ? text.slice(0, i) + c + text.slice(i) : text.slice(0, i) + text.slice(i + 1);
  });

describe('scanJsonObject (the telemetry check: no parse)', () => {
  it('accepts exactly the JSON objects Postgres stores as jsonb: generated objects and near misses', async () => {
    await agreesWithPostgres(fc.oneof(objectText(fc.string({ unit }), unit), objectText(fc.string(), 'grapheme'), mutated), 600, 100);
  });

  it('accepts exactly what Postgres stores for flat objects of numbers (the scan\'s fast path) and their near misses', async () => {
    // (longer numbers than 1,000 characters are the gateway's own limit: see the reasons below)
    const token = fc.oneof(
      fc.double({ noNaN: true, noDefaultInfinity: true }).map((x) => JSON.stringify(x)),
      fc.integer().map(String),
      fc.constantFrom('0', '-0', '01', '-01', '1.', '-', '-.5', '.5', '1/2', '--1', '1-', '1.2.3', '0.0', '1e5', '2e', '1.5E+3', '9'.repeat(1000), '"s"', 'true', '{}', '[1]', ' 1', '1 '),
    );
    const member = fc.tuple(fc.constantFrom('a', 'temperature', 'sensor_07', 'k\\"', 'é', 'x,y}', 'a b!'), fc.constantFrom(':', ':', ' :', ': '), token).map(([k, colon, v]) => `${JSON.stringify(k)}${colon}${v}`);
    const text = fc.tuple(fc.array(member, { minLength: 1, maxLength: 6 }), fc.constantFrom(',', ',', ', ', ',,'), fc.constantFrom('}', '}', ' }', ',}', '', '} 1'))
      .map(([members, comma, close]) => `{${members.join(comma)}${close}`);
    await agreesWithPostgres(text, 400, 50);
  });

  it('reads nothing of an earlier, longer payload past the end of this one', () => {
    expect(scanJsonObject(Buffer.from('{"a":1,"b":2.5}')).ok).toBe(true);
    for (const prefix of ['{"a":1,"b":2.5', '{"a":1,"b":2.', '{"a":1,"b"', '{"a":1,']) expect(scanJsonObject(Buffer.from(prefix)), prefix).toEqual({ ok: false, problem: 'not_json' });
    // and a payload inside a larger buffer: only its own bytes
    const big = Buffer.from('{"a":1}}');
    expect(scanJsonObject(big.subarray(0, 7)).ok).toBe(true);
    expect(scanJsonObject(big.subarray(0, 6))).toEqual({ ok: false, problem: 'not_json' });
  });

  it('checks UTF-8 whatever the rest of the payload is', () => {
    const bytes = (...parts: (string | number[])[]) => Buffer.concat(parts.map((p) => (typeof p === 'string' ? Buffer.from(p) : Buffer.from(p))));
    // a bad sequence after plain members, an encoded surrogate, and one before a syntax error: invalid_utf8 first
    expect(scanJsonObject(bytes('{"a":1,"b":-2.5,"c":"', [0xc3, 0x28], '"}'))).toEqual({ ok: false, problem: 'invalid_utf8' });
    expect(scanJsonObject(bytes('{"a":"', [0xed, 0xa0, 0x80], '"}'))).toEqual({ ok: false, problem: 'invalid_utf8' });
    expect(scanJsonObject(bytes('{"', [0xff], '":1,,}'))).toEqual({ ok: false, problem: 'invalid_utf8' });
    expect(scanJsonObject(bytes('{"a":1}', [0xe9]))).toEqual({ ok: false, problem: 'invalid_utf8' });
    // valid multi-byte text in keys and values, then ASCII members
    expect(scanJsonObject(Buffer.from('{"é€😀":"ünï","a":1.5,"b":"x"}')).ok).toBe(true);
  });

  it('gives the same reasons as the parse for what it refuses', () => {
    const cases: [string, string][] = [
      ['[1,2]', 'not_object'], ['"text"', 'not_object'], ['12', 'not_object'], ['null', 'not_object'],
      ['{"a":1', 'not_json'], ['{"a":01}', 'not_json'], ['{"a":1,}', 'not_json'], ['{a:1}', 'not_json'], ['{"a":"\t"}', 'not_json'],
      ['{"a":1} {}', 'not_json'], ['', 'not_json'], ['{"a":tru}', 'not_json'], ['{"a":-}', 'not_json'], ['{"a":1.}', 'not_json'], ['{"a":1e}', 'not_json'],
      ['{"a":"\\u0000"}', 'nul'], ['{"\\u0000":1}', 'nul'], ['{"a":1}\u0000', 'nul'],
      ['{"a":"\\ud800"}', 'lone_surrogate'], ['{"a":"\\udc00\\ud800"}', 'lone_surrogate'], ['{"\\ud83dx":1}', 'lone_surrogate'],
      ['{"a":1e10000}', 'number_out_of_range'], [`{"a":${'9'.repeat(1001)}}`, 'number_out_of_range'],
      // members of the fast path: a number that is not JSON, or out of range, before more members
      ['{"a":1/2,"b":1}', 'not_json'], ['{"a":1-,"b":1}', 'not_json'], ['{"a":01,"b":1}', 'not_json'], ['{"a":-.5,"b":1}', 'not_json'], ['{"a":1.2.3,"b":1}', 'not_json'],
      ['{"a":1e10000,"b":x}', 'number_out_of_range'], [`{"a":-${'9'.repeat(1000)},"b":1}`, 'number_out_of_range'], ['{"a":1,"b":2,}', 'not_json'], ['{"a":1,"b":2}}', 'not_json'],
    ];
    for (const [text, problem] of cases) expect(scanJsonObject(Buffer.from(text)), text).toEqual({ ok: false, problem });
    expect(scanJsonObject(Buffer.from([0x7b, 0x22, 0xff, 0x22, 0x3a, 0x31, 0x7d]))).toEqual({ ok: false, problem: 'invalid_utf8' });
    const nested = (depth: number) => '{"a":'.repeat(depth) + '1' + '}'.repeat(depth);
    expect(scanJsonObject(Buffer.from(nested(MAX_JSON_DEPTH))).ok).toBe(true);
    expect(scanJsonObject(Buffer.from(nested(MAX_JSON_DEPTH + 1)))).toEqual({ ok: false, problem: 'too_deep' });
    expect(scanJsonObject(Buffer.from(`{"a":${'['.repeat(20_000)}`))).toEqual({ ok: false, problem: 'too_deep' });
    expect(scanJsonObject(Buffer.alloc(MAX_JSON_BYTES + 1, 0x20))).toEqual({ ok: false, problem: 'too_large' });
    // the limits' edges are what Postgres' numeric holds
    for (const ok of ['{"a":1e9999}', '{"a":-1.5E-9999}', `{"a":${'9'.repeat(1000)}}`, '{"a":0.0e+0}', ' {"\\ud83d\\ude00":[{},[],""]} ']) expect(scanJsonObject(Buffer.from(ok)).ok, ok).toBe(true);
  });

  it('signs the top-level keys in order: the same keys give the same signature, other keys another', () => {
    const keys = (o: Record<string, unknown>) => { const r = scanJsonObject(Buffer.from(JSON.stringify(o))); return r.ok ? r.keys : -1; };
    expect(keys({ a: 1, b: 'x' })).toBe(keys({ a: 2.5, b: { c: 1 } }));
    expect(keys({ a: { x: 1 } })).toBe(keys({ a: { y: 2 } })); // nested keys are values of `a`
    // whichever path reads the member (a number on the fast path; another value, or a key with a space, on the general one)
    expect(keys({ a: 1, 'b c': 2, d: 3 })).toBe(keys({ a: 'x', 'b c': [1], d: { e: 1 } }));
    const signatures = new Set([keys({}), keys({ a: 1 }), keys({ b: 1 }), keys({ a: 1, b: 1 }), keys({ b: 1, a: 1 }), keys({ ab: 1 }), keys({ a: 1, bc: 1 }), keys({ ab: 1, c: 1 }), keys({ 'a"': 1 })]);
    expect(signatures.size).toBe(9);
    expect(scanJsonObject(Buffer.from('{"\\u00e9":1}'))).not.toEqual(scanJsonObject(Buffer.from('{"é":1}')));
  });
});

describe('the telemetry check module (src/broker/wasm/jsonScan.wasm)', () => {
  const clang = spawnSync('clang-14', ['--version']).status === 0;
  if (!clang) console.warn('skipped: the committed jsonScan.wasm is not rebuilt here (no clang-14: apt-get install clang-14 lld-14)');
  it.skipIf(!clang)('is the build of wasm/jsonScan.c by `npm run build:wasm` (not a stale binary)', () => {
    const script = (JSON.parse(fs.readFileSync('package.json', 'utf8')) as { scripts: Record<string, string> }).scripts['build:wasm'];
    const out = path.join(fs.mkdtempSync(path.join(os.tmpdir(), 'wasm-')), 'jsonScan.wasm');
    expect(script).toContain('-o src/broker/wasm/jsonScan.wasm');
    execFileSync('sh', ['-c', script.replace('-o src/broker/wasm/jsonScan.wasm', `-o ${out}`)]);
    expect(fs.readFileSync(out).equals(fs.readFileSync('src/broker/wasm/jsonScan.wasm'))).toBe(true);
  });
});
