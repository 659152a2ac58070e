import { z } from 'zod';
import { EXAMPLE, named } from '../http/components.js';
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
  registrar_id: z.uuid().nullable().optional().describe("the registrar the service acts for: an APPROVED registrar of the caller's account, or one whose owner approved the account's access request (400 otherwise)"),
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

// --- policies (issue 32)
const actionName = z.string().min(1).max(100).describe('factory:<Resource>:<Verb>');

export const policyBody = z.strictObject({
  allow: z.array(actionName).max(200).describe("the actions the service's signed requests may call; replaces the role's default (duplicates are dropped; an unknown action, or one never granted to a service, is a 400 naming it)"),
});

export const policySchema = z.object({
  factory_service_id: z.uuid(),
  role,
  default: z.boolean().describe("true: the role's documented default (it follows the gateway's default); false: set by an account admin"),
  allow: z.array(z.string()).describe('the actions allowed, sorted'),
});

// --- the PROVISION saga
const legName = z.enum(['identify', 'provision']);
const detailText = z.string().trim().min(1).max(2000).regex(/^[^\u0000]*$/, 'no NUL characters');

export const thingParams = z.object({ thingId: z.uuid() });

/** POST provision takes no options (an empty body or `{}`). */
export const provisionBody = z.strictObject({}).nullish();

export const legReportBody = z.strictObject({
  run_id: z.uuid().optional().describe("the run the leg belongs to (default: the thing's running run)"),
  leg: legName,
  outcome: z.enum(['SUCCEEDED', 'FAILED']),
  attempt: z.number().int().min(1).max(100).optional().describe('the attempt reported (from the leg call); a report of an older attempt is 409'),
  detail: detailText.optional().describe('why it failed (kept on the leg)'),
  retryable: z.boolean().optional().describe('false: a FAILED leg is not attempted again and the run fails'),
  result: z.record(z.string(), z.unknown()).optional().describe('what the backend wants recorded with a SUCCEEDED leg (at most 16 KiB of JSON)')
    .refine((r) => r === undefined || JSON.stringify(r).length <= 16_384, 'result must be at most 16 KiB of JSON'),
});

const legSchema = z.object({
  name: legName,
  factory_service_id: z.uuid(),
  state: z.enum(['PENDING', 'RUNNING', 'SUCCEEDED', 'FAILED']),
  attempts: z.number().int(),
  due: z.string().nullable().describe('when a PENDING leg is dispatched (after a backoff)'),
  started_at: z.string().nullable(),
  finished_at: z.string().nullable(),
  error: z.string().nullable(),
  result: z.record(z.string(), z.unknown()).nullable(),
  history: z.array(z.object({
    attempt: z.number().int(), dispatched_at: z.string(), ended_at: z.string().nullable(),
    outcome: z.enum(['SUCCEEDED', 'FAILED', 'TIMED_OUT']).nullable(), error: z.string().nullable(),
  })),
});

export const runSchema = z.object({
  id: z.uuid(),
  thing_id: z.uuid(),
  model_id: z.uuid(),
  state: z.enum(['RUNNING', 'SUCCEEDED', 'FAILED']),
  started_at: z.string(),
  started_by: z.string(),
  finished_at: z.string().nullable(),
  error: z.string().nullable(),
  legs: z.array(legSchema),
});

export const runListQuery = z.strictObject({
  thing_id: z.uuid().optional(),
  state: z.enum(['RUNNING', 'SUCCEEDED', 'FAILED']).optional(),
  after: z.uuid().optional(),
  limit: z.coerce.number().int().min(1).max(200).default(50),
});
export const runPageSchema = z.object({ items: z.array(runSchema), next_cursor: z.uuid().nullable() });

// --- OpenAPI components (issue 39): the resources above by name, with examples
const E = EXAMPLE;
named(createBody, 'FactoryServiceCreate', { example: { role: 'provision', model_id: E.modelId, endpoint_url: 'https://factory.example.net/backend' } });
const service = {
  id: E.otherId, account_id: E.accountId, role: 'provision', state: 'ACTIVE', registrar_id: null, model_id: E.modelId, endpoint_url: 'https://factory.example.net/backend',
  access_key_id: 'AKSV0123456789ABCDEF', rotation_pending: false, last_health_check_at: E.at, last_health_check_status: 'HEALTHY', last_health_check_http_status: 200,
  last_health_check_latency_ms: 35, last_health_check_error: null, created_at: E.at, updated_at: E.at, deleted_at: null,
} as const;
named(factoryServiceSchema, 'FactoryService', { description: 'A factory backend registered as a signing principal', example: service });
named(withSecretSchema, 'FactoryServiceWithSecret', { description: 'A factory service with its secret access key, shown once', example: { ...service, secret_access_key: 'c2VjcmV0LXNlY3JldC1zZWNyZXQtc2VjcmV0LXNlY3JldC1zZWNyZXQ' } });
named(pageSchema, 'FactoryServicePage');
named(policyBody, 'FactoryServicePolicyUpdate', { example: { allow: ['factory:Thing:ReadState', 'factory:Thing:Provision'] } });
named(policySchema, 'FactoryServicePolicy', { example: { factory_service_id: E.otherId, role: 'provision', default: false, allow: ['factory:Thing:Provision', 'factory:Thing:ReadState'] } });
named(legReportBody, 'ProvisioningLegReport', { description: 'A factory backend reports a leg\'s outcome', example: { leg: 'provision', outcome: 'SUCCEEDED', attempt: 1, result: { station: 'L4-07' } } });
named(legSchema, 'ProvisioningLeg', {
  example: { name: 'provision', factory_service_id: E.otherId, state: 'SUCCEEDED', attempts: 1, due: null, started_at: E.at, finished_at: E.at, error: null, result: { station: 'L4-07' }, history: [{ attempt: 1, dispatched_at: E.at, ended_at: E.at, outcome: 'SUCCEEDED', error: null }] },
});
named(runSchema, 'ProvisioningRun', { description: 'A PROVISION saga run and its legs', example: { id: E.otherId, thing_id: E.thingId, model_id: E.modelId, state: 'RUNNING', started_at: E.at, started_by: 'operator@acme', finished_at: null, error: null, legs: [] } });
named(runPageSchema, 'ProvisioningRunPage');

/** What the gateway POSTs to `<endpoint_url>/provisioning-legs` (webhooks: provisioningLeg; src/factory/provisioning.ts). */
export const legCallSchema = named(z.object({
  run_id: z.uuid(), thing_id: z.uuid(), leg: legName, attempt: z.number().int().min(1).describe('report it back: a report of an older attempt is refused'),
  model_id: z.uuid().nullable(), model: z.string().nullable(), manufacturer: z.string().nullable(), serial: z.string().nullable(),
  result_url: z.url().describe('POST the leg\'s outcome here (signed): /api/v1/things/{thingId}/provisioning-result'),
}), 'ProvisioningLegCall', {
  description: 'A saga leg the factory backend carries out',
  example: { run_id: E.otherId, thing_id: E.thingId, leg: 'provision', attempt: 1, model_id: E.modelId, model: 'FFF1:8001', manufacturer: 'Acme', serial: 'SN-000123', result_url: `https://gateway.example.net/api/v1/things/${E.thingId}/provisioning-result` },
});
