import { z } from 'zod';
import { named } from '../http/components.js';
import { RESOURCES } from './resources.js';

export const MODES = ['DELTA', 'FULL_REFRESH'] as const;
export const ITEM_STATUSES = ['ACCEPTED', 'REPLAY', 'QUARANTINED', 'REJECTED'] as const;
export const JOB_STATES = ['QUEUED', 'RUNNING', 'COMPLETED', 'COMPLETED_WITH_ERRORS'] as const;

/** Most items in one synchronous batch; more go in a bulk job. */
export const BATCH_MAX_ITEMS = 1000;

const items = z
  .array(z.unknown())
  .describe('Items, each checked on its own (an invalid item is REJECTED, the others go on). Every item has source_id (string) and source_version (integer >= 0) plus the resource fields: products {sku, description?, uom? EA|CS|PL, weight_kg?, gtin?}; stock {sku, location, quantity (integer), lot?, expires_on? YYYY-MM-DD}.');

/** The request envelope. Missing fields and unknown modes are 400; wrong formats of present fields are 422. */
const envelope = {
  partner_id: z.string().min(1).max(200).describe("the partner's account id (UUID); another format is 422, another account's 403"),
  correlation_id: z.string().min(1).max(200).describe('idempotency key of the request within the partner: 1-128 of A-Z a-z 0-9 . _ : -; a retry with the same key gets the first answer'),
  mode: z.enum(MODES).describe('DELTA: upsert the items; FULL_REFRESH (bulk jobs only): the items are the complete set, records the job does not name are deleted'),
  warehouse_id: z.string().min(1).max(200).describe('a warehouse registered for the partner (PUT /wms-ingest/v1/warehouses/{warehouse_id}) that the caller is scoped to'),
};

export const batchBody = z.strictObject({ ...envelope, items });
export const jobBody = z.strictObject({ ...envelope, resource: z.enum(RESOURCES), items });
export type BatchBody = z.infer<typeof batchBody>;
export type JobBody = z.infer<typeof jobBody>;

export const itemResult = z.object({
  index: z.number().int().describe('position in the request (from 0)'),
  source_id: z.string().nullable(),
  status: z.enum(ITEM_STATUSES),
  source_version: z.number().int().optional(),
  internal_id: z.uuid().optional().describe('ACCEPTED (and REPLAY): the stored record'),
  code: z.string().optional().describe('QUARANTINED: the business rule; REJECTED: SCHEMA; REPLAY: STALE or CONCURRENT when not an exact repeat'),
  reason: z.string().optional(),
  quarantine_id: z.uuid().optional(),
});

const counts = z.object({ accepted: z.number().int(), replayed: z.number().int(), quarantined: z.number().int(), rejected: z.number().int() });

export const batchResponse = z.object({
  partner_id: z.string(),
  correlation_id: z.string(),
  warehouse_id: z.string(),
  resource: z.enum(RESOURCES),
  mode: z.enum(MODES),
  summary: counts,
  results: z.array(itemResult),
});

export const jobView = z.object({
  job_id: z.uuid(),
  partner_id: z.string(),
  correlation_id: z.string(),
  warehouse_id: z.string(),
  resource: z.enum(RESOURCES),
  mode: z.enum(MODES),
  state: z.enum(JOB_STATES),
  total_items: z.number().int(),
  processed_items: z.number().int(),
  accepted: z.number().int(),
  replayed: z.number().int(),
  quarantined: z.number().int(),
  rejected: z.number().int(),
  deleted: z.number().int().describe('FULL_REFRESH: records deleted because the job did not name them'),
  created_at: z.string(),
  started_at: z.string().nullable(),
  completed_at: z.string().nullable(),
  status_url: z.string(),
  errors_url: z.string().optional().describe('COMPLETED_WITH_ERRORS: where the item errors are listed'),
  errors_expire_at: z.string().nullable().describe('job errors are kept 30 days after completion'),
});

export const jobsQuery = z.strictObject({
  warehouse_id: z.string().min(1).max(200),
  state: z.enum(JOB_STATES).optional(),
  page_token: z.string().max(500).optional(),
  limit: z.coerce.number().int().min(1).max(100).default(20),
});
export const jobsPage = z.object({ items: z.array(jobView), next_page_token: z.string().nullable(), has_more: z.boolean() });

export const jobIdParams = z.object({ job_id: z.string().max(100) });
export const pageQuery = z.strictObject({
  page_token: z.string().max(500).optional(),
  limit: z.coerce.number().int().min(1).max(1000).default(100),
});

export const jobErrorItem = z.object({
  index: z.number().int(),
  source_id: z.string().nullable(),
  status: z.enum(['QUARANTINED', 'REJECTED']),
  code: z.string(),
  reason: z.string(),
  quarantine_id: z.uuid().nullable(),
});
export const jobErrorsPage = z.object({
  items: z.array(jobErrorItem),
  next_page_token: z.string().nullable(),
  has_more: z.boolean(),
});

export const quarantineEntry = z.object({
  quarantine_id: z.uuid(),
  partner_id: z.string(),
  warehouse_id: z.string(),
  resource: z.enum(RESOURCES),
  source_id: z.string(),
  source_version: z.number().int(),
  code: z.string(),
  reason: z.string(),
  item: z.record(z.string(), z.unknown()),
  correlation_id: z.string(),
  job_id: z.uuid().nullable(),
  created_at: z.string(),
});
export const quarantineQuery = z.strictObject({
  warehouse_id: z.string().min(1).max(200),
  resource: z.enum(RESOURCES).optional(),
  page_token: z.string().max(500).optional(),
  limit: z.coerce.number().int().min(1).max(1000).default(100),
});
export const quarantinePage = z.object({
  items: z.array(quarantineEntry),
  next_page_token: z.string().nullable(),
  has_more: z.boolean(),
});
export const quarantineParams = z.object({ quarantine_id: z.string().max(100) });
export const warehouseParams = z.object({ warehouse_id: z.string().min(1).max(100) });
export const warehouseBody = z.strictObject({
  name: z.string().trim().min(1).max(200),
  principals: z.array(z.string().min(1).max(200)).max(1000).nullable().default(null)
    .describe('subjects (user ids, which are also their credentials\' principal ids) that may ingest into and read this warehouse; null: every user of the account'),
});
export const warehouseView = z.object({
  warehouse_id: z.string(),
  name: z.string(),
  principals: z.array(z.string()).nullable(),
  created_at: z.string(),
  updated_at: z.string(),
});

// --- OpenAPI components (issue 39): the resources above by name
named(batchBody, 'IngestBatch', { description: 'A DELTA batch of products or stock items for one warehouse' });
named(itemResult, 'IngestItemResult');
named(batchResponse, 'IngestBatchResult');
named(jobView, 'IngestJob', { description: 'A bulk ingest job' });
named(jobsPage, 'IngestJobPage');
named(jobErrorItem, 'IngestJobError');
named(jobErrorsPage, 'IngestJobErrorPage');
named(quarantineEntry, 'QuarantineEntry');
named(quarantinePage, 'QuarantinePage');
