import { z } from 'zod';
import { EXAMPLE, named } from '../http/components.js';
import { isSemver, PRODUCT_STATES } from '../../machines/marketplaceProduct.js';

/** Schemas of the marketplace routes (src/marketplace/routes.ts). */
const text = z.string().trim().min(1).max(200).regex(/^[^\u0000-\u001f\u007f]*$/, 'no control characters');
const description = z.string().max(4000).regex(/^[^\u0000]*$/, 'no NUL characters');
const semver = z.string().max(128).refine(isSemver, 'must be a semantic version (MAJOR.MINOR.PATCH[-pre-release][+build], semver.org)');
const hex4 = z.string().regex(/^[0-9a-fA-F]{4}$/, 'four hexadecimal digits');

/** A bundle of the model, named by name and version (and kind when the model has both kinds under that name and version). */
export const bundleRefSchema = z.strictObject({
  name: text,
  version: z.string().trim().min(1).max(64),
  kind: z.enum(['software', 'driver']).optional(),
});
export type BundleRef = z.infer<typeof bundleRefSchema>;

const bundleRefs = z.array(bundleRefSchema).max(50)
  .describe("bundles of the model (GET /api/v1/models/{id}/software), by name and version; the product keeps a copy of their descriptors");

export const productCreateSchema = z.strictObject({
  model_id: z.uuid().describe("one of your account's models (not an imported one)"),
  name: text,
  description: description.optional(),
  version: semver.optional().describe('default 1.0.0'),
  bundles: bundleRefs.optional().describe('default none (a product needs at least one to be published)'),
});
export type ProductCreate = z.infer<typeof productCreateSchema>;

export const productPatchSchema = z.strictObject({
  name: text.optional(),
  description: description.optional(),
  version: semver.optional().describe('a published product: greater than the published version (default: the next patch); unpublished: greater to republish'),
  bundles: bundleRefs.optional().describe('replaces the list'),
}).refine((b) => Object.keys(b).length > 0, 'send at least one of name, description, version, bundles');
export type ProductPatch = z.infer<typeof productPatchSchema>;

export const productParams = z.object({ id: z.uuid() });

const listFields = {
  limit: z.coerce.number().int().min(1).max(200).default(50),
  cursor: z.string().max(200).optional().describe('next_cursor of the previous page (opaque)'),
  model_id: z.uuid().optional(),
  vid: hex4.optional().describe("the model's vendor id"),
  pid: hex4.optional().describe("the model's product id"),
  q: z.string().trim().min(1).max(100).regex(/^[^\u0000-\u001f\u007f]*$/, 'no control characters').optional()
    .describe('text the name or the description contains (case-insensitive)'),
};
export const publishedListQuery = z.strictObject({
  ...listFields,
  account_id: z.uuid().optional().describe('the publishing account'),
});
export const ownListQuery = z.strictObject({
  ...listFields,
  state: z.enum(PRODUCT_STATES.filter((s) => s !== 'DELETED') as ['DRAFT', 'PUBLISHED', 'UNPUBLISHED']).optional(),
});
export type PublishedListQuery = z.infer<typeof publishedListQuery>;
export type OwnListQuery = z.infer<typeof ownListQuery>;

export const productBundleSchema = z.object({
  kind: z.enum(['software', 'driver']),
  name: z.string(),
  version: z.string(),
  url: z.string(),
  sha256: z.string().optional(),
});

export const productSchema = z.object({
  id: z.uuid(),
  account_id: z.uuid().describe('the publishing account'),
  model_id: z.uuid(),
  descriptor: z.string().describe("the model's vid:pid"),
  name: z.string(),
  description: z.string(),
  version: z.string().describe('version of the content shown'),
  bundles: z.array(productBundleSchema),
  state: z.enum(['DRAFT', 'PUBLISHED', 'UNPUBLISHED']),
  published_version: z.string().nullable().describe('the version live (PUBLISHED) or last published; null before the first publication'),
  published_at: z.string().nullable(),
  unpublished_at: z.string().nullable(),
  created_at: z.string(),
  updated_at: z.string(),
});
export type ProductView = z.infer<typeof productSchema>;

export const productPageSchema = z.object({ items: z.array(productSchema), next_cursor: z.string().nullable() });

// --- OpenAPI components (issue 39): the resources above by name
named(productCreateSchema, 'ProductCreate', { example: { model_id: EXAMPLE.modelId, name: 'Smart plug app', version: '1.0.0', bundles: [{ name: 'plug-firmware', version: '2.4.1' }] } });
named(productPatchSchema, 'ProductPatch');
named(productSchema, 'Product', { description: 'A marketplace product and its bundles' });
named(productPageSchema, 'ProductPage');
