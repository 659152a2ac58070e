import fc from 'fast-check';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { MAX_JSON_DEPTH, parseJsonPayload } from '../../src/broker/payload.js';
import { createTestDatabase, type TestDatabase } from '../helpers/db.js';

let db: TestDatabase;

beforeAll(async () => {
  db = await createTestDatabase({ migrated: false });
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
