/**
 * Text Postgres can store. A `text` column refuses NUL, and a lone UTF-16 surrogate (valid in a
 * JSON string, `"\ud800"`) fails as a jsonb parameter and is silently replaced when sent as text:
 * either way the value must be refused before it reaches a statement shared with other requests.
 * The HTTP input guard refuses such text anywhere in a request; domain code that parses JSON held
 * in a string field (or builds strings itself) checks here.
 */

// NUL, a high surrogate not followed by a low one, or a low one not preceded by a high one.
const BAD_CHAR = /\u0000|[\ud800-\udbff](?![\udc00-\udfff])|(?<![\ud800-\udbff])[\udc00-\udfff]/;

export function isStorableText(value: string): boolean {
  return !BAD_CHAR.test(value);
}

/** Why `s` is not storable, or undefined when it is. */
export function badCharacter(s: string): string | undefined {
  const m = BAD_CHAR.exec(s);
  if (!m) return undefined;
  if (m[0] === '\u0000') return 'contains a NUL character';
  return `contains a lone surrogate (U+${m[0].charCodeAt(0).toString(16).toUpperCase()}), which is not valid Unicode`;
}

/** The first string field of `record` that is not storable text, if any (nested values are not searched). */
export function unstorableField(record: Record<string, unknown>): string | undefined {
  return Object.entries(record).find(([, v]) => typeof v === 'string' && !isStorableText(v))?.[0];
}

/** `body.to.subscriberId`, `body.items.0`, `body.desired["a b"]`. */
export function fieldPath(parent: string, key: string): string {
  return /^[A-Za-z_$][\w$-]*$|^\d+$/.test(key) ? `${parent}.${key}` : `${parent}[${JSON.stringify(key)}]`;
}

/**
 * The first key or string value (depth first) that `check` refuses: its keys and the reason.
 * Recursive: only for values of bounded depth (a parsed request body is checked for depth first).
 * Paths are built only on failure.
 */
function find(value: unknown, check: (s: string) => string | undefined): { keys: string[]; why: string } | undefined {
  if (typeof value === 'string') {
    const why = check(value);
    return why ? { keys: [], why } : undefined;
  }
  if (value === null || typeof value !== 'object') return undefined;
  for (const key in value) {
    const why = check(key);
    if (why) return { keys: [key], why: `field name ${why}` };
    const found = find((value as Record<string, unknown>)[key], check);
    if (found) {
      found.keys.unshift(key);
      return found;
    }
  }
  return undefined;
}

/**
 * The first key or string value under `root`, at any depth, that is not storable text (or that
 * `check` refuses), as `path: reason`, e.g. `body.to.subscriberId: contains a NUL character`.
 */
export function findRefusedText(value: unknown, root: string, check: (s: string) => string | undefined = badCharacter): string | undefined {
  const found = find(value, check);
  return found && `${found.keys.reduce(fieldPath, root)}: ${found.why}`;
}
