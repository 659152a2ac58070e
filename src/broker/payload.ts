import { isUtf8 } from 'node:buffer';

declare global {
  // ES2024 (Node 20 has it; the project's TypeScript lib is ES2023)
  interface String {
    isWellFormed(): boolean;
  }
}

/** largest JSON payload the gateway parses and stores */
export const MAX_JSON_BYTES = 64 * 1024;
/** deepest JSON nesting accepted (objects and arrays) */
export const MAX_JSON_DEPTH = 64;

/** Why a payload cannot be taken: the `reason` label of `broker_payloads_rejected_total`. */
export const PAYLOAD_PROBLEMS = ['too_large', 'invalid_utf8', 'nul', 'lone_surrogate', 'not_json', 'not_object', 'too_deep', 'number_out_of_range'] as const;
export type PayloadProblem = (typeof PAYLOAD_PROBLEMS)[number];

export type JsonCheck = { ok: true; value: unknown } | { ok: false; problem: PayloadProblem };

/**
 * Parses a device payload the gateway stores as JSON (Postgres jsonb), refusing what Postgres
 * would refuse (NUL, lone surrogates) or what would poison a batch write, before it is acknowledged.
 * Cheap on the hot path: one native UTF-8 check besides the parse; a walk of the parsed value for
 * its depth only when the text has enough brackets to be too deep, and for its strings only when
 * the text has a `\u` escape (the only way a NUL or a lone surrogate gets past the UTF-8 check and
 * the parse). Telemetry does not come here: it is checked by jsonScan.ts without a parse.
 */
export function parseJsonPayload(payload: Buffer, requireObject: boolean): JsonCheck {
  if (payload.length > MAX_JSON_BYTES) return { ok: false, problem: 'too_large' };
  // UTF-8 without overlong forms or encoded surrogates; otherwise toString() would silently put U+FFFD in
  if (!isUtf8(payload)) return { ok: false, problem: 'invalid_utf8' };
  const text = payload.toString('utf8');
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch {
    // a raw NUL is never valid JSON (control characters must be escaped), so it is looked for only here
    return { ok: false, problem: payload.indexOf(0) === -1 ? 'not_json' : 'nul' };
  }
  if (requireObject && (value === null || typeof value !== 'object' || Array.isArray(value))) return { ok: false, problem: 'not_object' };
  const strings = text.includes('\\u');
  const problem = strings || mayBeTooDeep(payload) ? check(value, 1, strings) : undefined;
  return problem ? { ok: false, problem } : { ok: true, value };
}

/** Nesting deeper than MAX_JSON_DEPTH needs more than MAX_JSON_DEPTH opening brackets (counted natively, stopping early). */
function mayBeTooDeep(payload: Buffer): boolean {
  if (payload.length <= 2 * MAX_JSON_DEPTH) return false;
  let brackets = 0;
  for (const bracket of [0x7b /* { */, 0x5b /* [ */]) {
    for (let at = payload.indexOf(bracket); at !== -1; at = payload.indexOf(bracket, at + 1)) {
      if (++brackets > MAX_JSON_DEPTH) return true;
    }
  }
  return false;
}

/** Nesting depth and, when `strings`, every key and string value. */
function check(value: unknown, depth: number, strings: boolean): PayloadProblem | undefined {
  if (typeof value === 'string') return strings ? stringProblem(value) : undefined;
  if (value === null || typeof value !== 'object') return undefined;
  if (depth > MAX_JSON_DEPTH) return 'too_deep';
  if (Array.isArray(value)) {
    for (const item of value) {
      const problem = check(item, depth + 1, strings);
      if (problem) return problem;
    }
    return undefined;
  }
  for (const key in value) {
    const problem = (strings ? stringProblem(key) : undefined) ?? check((value as Record<string, unknown>)[key], depth + 1, strings);
    if (problem) return problem;
  }
  return undefined;
}

function stringProblem(s: string): PayloadProblem | undefined {
  if (s.includes('\0')) return 'nul';
  if (!s.isWellFormed()) return 'lone_surrogate';
  return undefined;
}
