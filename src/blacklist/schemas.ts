import { z } from 'zod';
import { EXAMPLE, named } from '../http/components.js';

// printable text: no control characters (they would travel into edge lists and logs)
const text = (max: number) => z.string().min(1).max(max).regex(/^[^\u0000-\u001f\u007f]*$/, 'must not contain control characters');

const model = text(128).describe('the model as things carry it: a `vid:pid` descriptor (FFF1:8001) or a model id (both stored as the descriptor), or the name an unregistered device sent');
const sn = text(128).describe('serial number');

export const entrySchema = z.object({
  model: z.string(),
  sn: z.string(),
  reason: z.string(),
  added_by: z.string().describe('subject (user, factory service or operator) that added it'),
  added_at: z.string(),
});

export const addBody = z.strictObject({ model, sn, reason: text(500).describe('why this identity is refused (not shown to devices)') });
export const addedSchema = entrySchema.extend({
  revoked_things: z.number().int().describe('enrolled things of this identity revoked by the add (certificate on the CRL, broker session closed)'),
});

export const entryParams = z.object({ model, sn });

export const listQuery = z.strictObject({
  limit: z.coerce.number().int().min(1).max(1000).default(100),
  after: z.string().max(400).optional().describe('next_cursor of the previous page'),
  model: model.optional().describe('only entries of this model'),
});
export const pageSchema = z.object({ items: z.array(entrySchema), next_cursor: z.string().nullable() });

export const checkQuery = z.strictObject({
  sn: sn.describe('the serial to check (required)'),
  model: model.optional().describe('accepted for compatibility: when given, only the entry of that (model, sn) matches'),
});

export const deltasQuery = z.strictObject({
  cursor: z.string().max(100).describe('next_cursor of a previous answer, or `cursor` of the signed snapshot'),
  limit: z.coerce.number().int().min(1).max(10_000).default(1000),
});
export const deltasSchema = z.object({
  items: z.array(z.object({
    op: z.enum(['add', 'remove']),
    model: z.string(),
    sn: z.string(),
    reason: z.string().nullable().describe('the entry\'s reason (adds)'),
    by: z.string(),
    at: z.string(),
  })).describe('changes after the cursor, oldest first; replayed in order onto the snapshot of that cursor they give the current list'),
  next_cursor: z.string(),
  has_more: z.boolean().describe('true when more changes follow next_cursor now'),
});

export const jwsSchema = z.object({
  protected: z.string().describe('base64url JSON header: alg ES256, kid (see jwks), typ identity-blacklist-snapshot+json'),
  payload: z.string().describe('base64url JSON: cursor, seq, generated_at, count, entries [{ model, sn, reason, added_at }] sorted by model, sn'),
  signature: z.string(),
}).describe('RFC 7515 flattened JWS JSON serialization');

export const jwksSchema = z.object({
  keys: z.array(z.object({ kty: z.literal('EC'), crv: z.literal('P-256'), x: z.string(), y: z.string(), kid: z.string(), alg: z.literal('ES256'), use: z.literal('sig') })),
});

// --- OpenAPI components (issue 39): the resources above by name, with examples
const entry = { model: 'FFF1:8001', sn: 'SN-000666', reason: 'cloned serial seen on two lines', added_by: 'admin@acme', added_at: EXAMPLE.at };
named(entrySchema, 'BlacklistEntry', { description: 'An identity (model, serial) refused enrollment', example: entry });
named(addBody, 'BlacklistEntryCreate', { example: { model: 'FFF1:8001', sn: 'SN-000666', reason: 'cloned serial seen on two lines' } });
named(addedSchema, 'BlacklistEntryAdded', { example: { ...entry, revoked_things: 1 } });
named(pageSchema, 'BlacklistPage');
named(deltasSchema, 'BlacklistDeltas', { example: { items: [{ op: 'add', model: 'FFF1:8001', sn: 'SN-000666', reason: 'cloned serial seen on two lines', by: 'admin@acme', at: EXAMPLE.at }], next_cursor: 'bl.1043', has_more: false } });
named(jwsSchema, 'SignedBlacklistSnapshot');
named(jwksSchema, 'BlacklistJwks');
