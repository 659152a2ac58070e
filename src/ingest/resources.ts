import { z } from 'zod';

/**
 * What partners ingest. Each resource has an item schema (a failing item is REJECTED, the others
 * go on) whose output is the normalized record, and business rules (a failing item is
 * QUARANTINED). Every item carries `source_id` (the partner's key) and `source_version` (a
 * number that grows with every change at the partner: a sequence or a timestamp in ms).
 */
export const RESOURCES = ['products', 'stock'] as const;
export type ResourceName = (typeof RESOURCES)[number];

const sourceFields = {
  source_id: z.string().trim().min(1).max(128).regex(/^[\x21-\x7e]+$/, 'printable ASCII without spaces'),
  source_version: z.number().int().min(0).max(Number.MAX_SAFE_INTEGER),
};
/** The item's source_id as its schema reads it (trimmed), or null when it has none the schema accepts. */
export function sourceIdOf(item: unknown): string | null {
  const value = item !== null && typeof item === 'object' ? (item as { source_id?: unknown }).source_id : undefined;
  const parsed = sourceFields.source_id.safeParse(value);
  return parsed.success ? parsed.data : null;
}

const sku = z.string().trim().min(1).max(64).transform((s) => s.toUpperCase());

const product = z.strictObject({
  ...sourceFields,
  sku,
  description: z.string().trim().max(256).optional(),
  uom: z.enum(['EA', 'CS', 'PL']).default('EA'),
  weight_kg: z.number().min(0).max(100_000).optional(),
  gtin: z.string().regex(/^\d{8}$|^\d{12,14}$/, 'GTIN-8, -12, -13 or -14 digits').optional(),
});

const stock = z.strictObject({
  ...sourceFields,
  sku,
  location: z.string().trim().min(1).max(64),
  quantity: z.number().int().min(-1e9).max(1e9),
  lot: z.string().trim().min(1).max(64).optional(),
  expires_on: z.iso.date().optional(),
});

export type Item = z.infer<typeof product> | z.infer<typeof stock>;

export interface RuleFailure {
  code: string;
  reason: string;
}

/** GS1 check digit: weights 3 and 1 from the right, excluding the check digit itself. */
export function gtinCheckDigitValid(gtin: string): boolean {
  const digits = [...gtin].map(Number);
  const check = digits.pop()!;
  const sum = digits.reverse().reduce((s, d, i) => s + d * (i % 2 === 0 ? 3 : 1), 0);
  return (10 - (sum % 10)) % 10 === check;
}

interface Resource {
  schema: z.ZodType<Item>;
  /** the first business rule the item breaks, if any */
  rules(item: Item): RuleFailure | undefined;
}

export const resources: Record<ResourceName, Resource> = {
  products: {
    schema: product as unknown as z.ZodType<Item>,
    rules(item) {
      const p = item as z.infer<typeof product>;
      if (p.gtin && !gtinCheckDigitValid(p.gtin)) return { code: 'GTIN_CHECK_DIGIT', reason: `gtin ${p.gtin} has a wrong check digit` };
      return undefined;
    },
  },
  stock: {
    schema: stock as unknown as z.ZodType<Item>,
    rules(item) {
      const s = item as z.infer<typeof stock>;
      if (s.quantity < 0) return { code: 'NEGATIVE_QUANTITY', reason: `quantity ${s.quantity} is negative` };
      return undefined;
    },
  },
};

/** A short, readable account of why an item does not match its schema. */
export function schemaReason(error: z.ZodError): string {
  return error.issues
    .slice(0, 5)
    .map((i) => `${i.path.length ? i.path.join('.') : 'item'}: ${i.message}`)
    .join('; ');
}

/** The OpenAPI view of the item schemas (the envelope accepts any items; each is checked alone). */
export const itemSchemas = { products: product, stock } as const;
