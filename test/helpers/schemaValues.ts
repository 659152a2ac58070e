/**
 * Valid-shaped values from the JSON Schemas of an OpenAPI 3.1 document (what zod emits: type,
 * enum, const, format, pattern, lengths, bounds, properties, additionalProperties, anyOf/oneOf),
 * driven by a seeded generator so a fuzz run is repeatable.
 */
export type Schema = Record<string, any>;

/** mulberry32: a tiny seeded PRNG; returns floats in [0, 1). */
export function seeded(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

export class ValueGen {
  constructor(
    readonly random: () => number,
    /** values to use for properties / params of these names (real ids of seeded resources) */
    readonly known: Record<string, unknown> = {},
  ) {}

  int(lo: number, hi: number): number {
    return lo + Math.floor(this.random() * (hi - lo + 1));
  }

  pick<T>(items: readonly T[]): T {
    return items[this.int(0, items.length - 1)];
  }

  uuid(): string {
    const hex = Array.from({ length: 32 }, () => this.int(0, 15).toString(16)).join('');
    return `${hex.slice(0, 8)}-${hex.slice(8, 12)}-4${hex.slice(13, 16)}-${'89ab'[this.int(0, 3)]}${hex.slice(17, 20)}-${hex.slice(20)}`;
  }

  /** A value that satisfies `schema` as far as this generator understands it. */
  value(schema: Schema | boolean | undefined, name = ''): unknown {
    if (name in this.known) return this.known[name];
    if (schema === undefined || schema === true || schema === false) return 'fuzz';
    const options = schema.anyOf ?? schema.oneOf;
    if (options) return this.value(this.pick((options as Schema[]).filter((o) => o.type !== 'null')), name);
    if ('const' in schema) return schema.const;
    if (schema.enum) return this.pick(schema.enum);
    const type = Array.isArray(schema.type) ? schema.type.find((t: string) => t !== 'null') : schema.type;
    switch (type) {
      case 'string':
        return this.string(schema);
      case 'integer':
      case 'number': {
        const lo = schema.minimum ?? (schema.exclusiveMinimum !== undefined ? schema.exclusiveMinimum + 1 : 1);
        const hi = Math.min(schema.maximum ?? lo + 100, lo + 100);
        return this.int(lo, hi);
      }
      case 'boolean':
        return this.random() < 0.5;
      case 'null':
        return null;
      case 'array':
        return this.array(schema, name);
      case 'object':
      default:
        return this.object(schema);
    }
  }

  private string(schema: Schema): string {
    const min = schema.minLength ?? 0;
    const max = schema.maxLength ?? 64;
    if (schema.format === 'uuid') return this.uuid();
    if (schema.format === 'email') return 'fuzz@example.com';
    if (schema.format === 'uri') return 'https://example.com/fuzz';
    if (schema.format === 'date-time') return '2026-11-23T10:00:00Z';
    if (schema.pattern) {
      const re = new RegExp(schema.pattern, 'u');
      const hit = PATTERN_CANDIDATES.find((c) => re.test(c) && c.length >= min && c.length <= max);
      if (hit) return hit;
    }
    const s = `fuzz-${this.int(0, 1e6)}`;
    return s.length > max ? s.slice(0, Math.max(max, min)) : s.padEnd(min, 'x');
  }

  private array(schema: Schema, name: string): unknown[] {
    const n = Math.max(schema.minItems ?? 0, 1);
    const items = schema.items as Schema | undefined;
    if (items?.enum) return [...items.enum].slice(0, Math.min(n + 1, schema.maxItems ?? n + 1, items.enum.length));
    return Array.from({ length: Math.min(n, schema.maxItems ?? n) }, () => this.value(items, name));
  }

  private object(schema: Schema): Record<string, unknown> {
    const out: Record<string, unknown> = {};
    const required = new Set<string>(schema.required ?? []);
    for (const [key, prop] of Object.entries((schema.properties ?? {}) as Record<string, Schema>)) {
      if (required.has(key) || this.random() < 0.6) out[key] = this.value(prop, key);
    }
    if (!schema.properties && schema.additionalProperties !== false) {
      const keyPattern = schema.propertyNames?.pattern ? new RegExp(schema.propertyNames.pattern, 'u') : undefined;
      const key = keyPattern ? PATTERN_CANDIDATES.find((c) => keyPattern.test(c)) ?? 'en' : `key${this.int(0, 9)}`;
      const additional = schema.additionalProperties;
      out[key] = additional && typeof additional === 'object' && Object.keys(additional).length ? this.value(additional) : 'value';
    }
    return out;
  }
}

/** Strings tried, in order, against a schema's `pattern`. */
const PATTERN_CANDIDATES = [
  'general/message', 'fuzz', 'en', 'FFF1', 'ASIA0123456789ABCDEF', 'idc-fuzz', '08:00', '/things/fuzz',
  'fuzz@example.com', '3f1c2a9e-6b7d-4e8f-9a0b-1c2d3e4f5a6b', 'fuzz-name',
];
