/**
 * Text Postgres can store. A `text` column refuses NUL, and a lone UTF-16 surrogate (valid in a
 * JSON string, `"\ud800"`) fails as a jsonb parameter and is silently replaced when sent as text:
 * either way the value must be refused before it reaches a statement shared with other requests.
 */
const LONE_SURROGATE = /[\ud800-\udbff](?![\udc00-\udfff])|(?<![\ud800-\udbff])[\udc00-\udfff]/;

export function isStorableText(value: string): boolean {
  return !value.includes('\u0000') && !LONE_SURROGATE.test(value);
}

/** The first string field of `record` that is not storable text, if any (nested values are not searched). */
export function unstorableField(record: Record<string, unknown>): string | undefined {
  return Object.entries(record).find(([, v]) => typeof v === 'string' && !isStorableText(v))?.[0];
}
