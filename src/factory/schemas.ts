import { z } from 'zod';
import { FACTORY_SERVICE_STATES } from '../../machines/factoryService.js';

const role = z.enum(['identify', 'provision']);

const endpointUrl = z
  .url({ protocol: /^https?$/, error: 'must be an http:// or https:// URL' })
  .max(2048)
  .refine((u) => {
    // runs even when an earlier check failed, so the string may not parse
    const url = URL.parse(u);
    return url !== null && !url.username && !url.password;
  }, 'must be a URL without credentials (user:password@)')
  .describe('base URL of the factory backend; the health check probes `<endpoint_url>/healthz`');

export const idParams = z.object({ id: z.uuid() });

export const createBody = z.strictObject({
  role,
  model_id: z.uuid().describe("a model of the caller's account"),
  registrar_id: z.uuid().nullable().optional().describe('the registrar the service acts for (registrars arrive with a later issue; not checked yet)'),
  endpoint_url: endpointUrl,
});

/** Only `endpoint_url` may change (any other field is a 400). */
export const patchBody = z.strictObject({ endpoint_url: endpointUrl });

export const listQuery = z.strictObject({
  role: role.optional(),
  state: z.enum(FACTORY_SERVICE_STATES.filter((s) => s !== 'HARD_DELETED') as ['ACTIVE', 'SOFT_DELETED']).optional(),
  registrar: z.uuid().optional().describe('registrar id'),
  model: z.uuid().optional().describe('model id'),
  limit: z.coerce.number().int().min(1).max(100).default(20),
  after: z.uuid().optional().describe('next_cursor of the previous page'),
});

export const factoryServiceSchema = z.object({
  id: z.uuid(),
  account_id: z.uuid(),
  role,
  state: z.string().describe('ACTIVE, or SOFT_DELETED while draining'),
  registrar_id: z.uuid().nullable(),
  model_id: z.uuid(),
  endpoint_url: z.string(),
  access_key_id: z.string().describe('AKSV + 16 upper-case hex; signs requests as X-SVC-Access-Key-Id'),
  rotation_pending: z.boolean(),
  last_health_check_at: z.string().nullable(),
  last_health_check_status: z.enum(['HEALTHY', 'UNHEALTHY']).nullable(),
  last_health_check_http_status: z.number().int().nullable(),
  last_health_check_latency_ms: z.number().int().nullable(),
  last_health_check_error: z.string().nullable(),
  created_at: z.string(),
  updated_at: z.string(),
  deleted_at: z.string().nullable(),
});

export const withSecretSchema = factoryServiceSchema.extend({
  secret_access_key: z.string().describe('shown once: the gateway keeps it sealed and never returns it again'),
});

export const pageSchema = z.object({ items: z.array(factoryServiceSchema), next_cursor: z.string().nullable() });
