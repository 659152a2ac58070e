import { z } from 'zod';
import { LICENSE_APPROVALS } from './repo.js';
import { modelCreateSchema } from './schemas.js';

/** Schemas of the model routes of the factory surface, part 2 (src/trust/modelRoutes.ts). */
const text = z.string().trim().min(1).max(200).regex(/^[^\u0000-\u001f\u007f]*$/, 'no control characters');

export const bundleSchema = z.strictObject({
  kind: z.enum(['software', 'driver']),
  name: text,
  version: z.string().trim().min(1).max(64).regex(/^[A-Za-z0-9._+-]+$/, 'letters, digits and . _ + -'),
  url: z.url({ protocol: /^https$/, error: 'must be an https:// URL' }).max(2048),
  sha256: z.string().regex(/^[0-9a-f]{64}$/, '64 lower-case hex digits').optional(),
});
export type Bundle = z.infer<typeof bundleSchema>;

/** What PATCH may change; the descriptor (vid:pid) and the provisioning method are fixed. */
export const modelPatchSchema = z.strictObject({
  name: text.optional(),
  description: z.string().max(2000).regex(/^[^\u0000]*$/, 'no NUL characters').optional(),
  licenseApproval: z.enum(LICENSE_APPROVALS).optional(),
  bundles: z.array(bundleSchema).max(50).optional().describe('software and driver bundles of the descriptor (replaces the list)'),
}).refine((b) => Object.keys(b).length > 0, 'send at least one of name, description, licenseApproval, bundles');
export type ModelPatch = z.infer<typeof modelPatchSchema>;

export const modelShareBody = z.strictObject({
  expires_in_seconds: z.number().int().min(60).max(90 * 24 * 3600).optional().describe('default 7 days'),
}).nullish();

export const modelShareSchema = z.object({
  id: z.uuid(),
  model_id: z.uuid(),
  descriptor: z.string(),
  token: z.string().describe('msh_ + 43 base64url characters; shown once (stored as SHA-256)'),
  url: z.string().describe('<PUBLIC_BASE_URL>/links/model#<token>: the token travels in the fragment, which browsers and proxies do not send to servers'),
  expires_at: z.string(),
});

export const modelImportBody = z.strictObject({
  deeplink: z.string().max(4096).optional().describe('the share URL'),
  token: z.string().max(200).optional().describe('or the bare token'),
}).refine((b) => (b.deeplink === undefined) !== (b.token === undefined), 'send exactly one of deeplink, token');

export const softwareSchema = z.object({
  model_id: z.uuid(),
  descriptor: z.string(),
  bundles: z.array(bundleSchema),
});

/** The internal model body: a model of `account_id` (any VID: platform operators are not bound to a namespace). */
export const internalModelCreateSchema = z.discriminatedUnion('provisioning_method', modelCreateSchema.options.map((o) => o.extend({
  account_id: z.uuid().describe('the account the internal model belongs to'),
})) as unknown as [typeof modelCreateSchema.options[0], ...typeof modelCreateSchema.options]);
