import { z } from 'zod';
import type { FastifyRequest } from 'fastify';
import type { Gateway, ZodApp } from '../gateway.js';
import { accountOf, modelScopeOf } from '../http/auth/plugin.js';
import { EXAMPLE, named } from '../http/components.js';
import type { ThingScope } from './lifecycle.js';
import { EXACT_TOTAL_LIMIT, MAX_TAGS_PER_THING, RegistryService, SORTS } from './registry.js';
import { claimGroupSchema, thingStateSchema } from './schemas.js';

const READ = ['admin', 'operator', 'viewer'] as const;
const WRITE = ['admin', 'operator'] as const;
const tags = ['things'];

/** The caller's things: its account's; a factory service's, those of its model only. */
const scopeOf = (request: FastifyRequest): ThingScope => ({ accountId: accountOf(request), modelId: modelScopeOf(request) });

const bool = z.enum(['true', 'false']).transform((v) => v === 'true');
const states = thingStateSchema.shape.state;
const listQuery = z.strictObject({
  q: z.string().trim().max(128).optional().describe('search: things whose serial (any case) or id starts with this text'),
  limit: z.coerce.number().int().min(1).max(500).default(50),
  cursor: z.string().max(512).optional().describe('next_cursor of the previous page (opaque; valid with the same sort)'),
  sort: z.enum(SORTS).default('created_at').describe('created_at or last_seen, ascending; a leading - for descending (never-seen things sort first ascending)'),
  state: z.string().max(200).optional().describe('lifecycle states, comma-separated (ACTIVATED,DEACTIVATED)')
    .transform((v, ctx) => {
      if (v === undefined) return undefined;
      const list = v.split(',').map((s) => s.trim());
      const bad = list.find((s) => !states.options.includes(s as never));
      if (bad !== undefined) {
        ctx.addIssue({ code: 'custom', message: `unknown state ${JSON.stringify(bad)}: one of ${states.options.join(', ')}` });
        return z.NEVER;
      }
      return list as z.infer<typeof states>[];
    }),
  model: z.string().min(1).max(100).optional().describe('model id or vid:pid descriptor'),
  claim_group: z.uuid().optional(),
  connected: bool.optional(),
  revoked: bool.optional(),
  last_seen_before: z.iso.datetime({ offset: true }).optional(),
  last_seen_after: z.iso.datetime({ offset: true }).optional(),
  tags: z.string().max(1000).optional().describe('comma-separated: things carrying every one of them')
    .transform((v) => (v === undefined ? undefined : [...new Set(v.split(',').map((s) => s.trim()))])),
});

const certificateSchema = z.object({ serial: z.string(), not_after: z.string(), revoked: z.boolean() }).nullable().describe("the thing's newest certificate");
const thingItemSchema = z.object({
  id: z.uuid(), model_id: z.uuid().nullable(), model: z.string(), manufacturer: z.string(), serial: z.string(),
  state: states, state_updated_at: z.string().nullable(), claim_group_id: z.uuid().nullable(),
  enrolled_by: z.string().nullable(), enrolled_at: z.string().nullable(), revoked: z.boolean(), revoked_at: z.string().nullable(),
  created_at: z.string(), tags: z.array(z.string()), connected: z.boolean(), last_seen: z.string().nullable(), certificate: certificateSchema,
});
const thingDetailSchema = thingItemSchema.extend({
  metadata: z.record(z.string(), z.unknown()),
  connectivity: z.object({
    connected: z.boolean(), connected_at: z.string().nullable(), disconnected_at: z.string().nullable(), last_seen: z.string().nullable(), protocol_version: z.number().int().nullable(),
    node: z.string().nullable().describe('the gateway node holding its MQTT session while connected (NODE_ID), else null'),
  }).nullable().describe('null when the thing never connected'),
  twin: z.object({ reported_version: z.number().int(), reported_at: z.string().nullable(), desired_version: z.number().int(), desired_at: z.string().nullable() }).nullable(),
  telemetry: z.object({ values: z.record(z.string(), z.unknown()), updated_at: z.string().nullable() }).nullable().describe('latest value of every telemetry key'),
});
const thingParams = z.object({ thingId: z.uuid() });
const tagParams = z.object({ thingId: z.uuid(), tag: z.string().min(1).max(64) });
const tagsSchema = z.object({ thing_id: z.uuid(), tags: z.array(z.string()) });

/** The fleet registry routes (issue 18, item 1): list, read, tags, claim groups listed. */
export async function registryRoutes(app: ZodApp, gw: Gateway): Promise<void> {
  const registry = new RegistryService(gw.sql, gw.actors, gw.clock);

  app.get('/api/v1/things', {
    config: { auth: { action: 'factory:Thing:List', roles: READ } },
    schema: {
      tags, summary: "The account's things: filters, sort by created_at or last_seen, keyset pages (no gap or repeat while things are added)",
      querystring: listQuery,
      response: {
        200: z.object({
          items: z.array(thingItemSchema), next_cursor: z.string().nullable(),
          total: z.number().int().nullable().describe(`every match of the filters (all pages), counted exactly up to ${EXACT_TOTAL_LIMIT}; null above, with total_estimate`),
          total_estimate: z.number().int().optional().describe(`when more than ${EXACT_TOTAL_LIMIT} match: the planner's estimate`),
        }),
      },
    },
  }, async (request) => registry.list(scopeOf(request), request.query));

  app.get('/api/v1/things/claim-groups', {
    config: { auth: { action: 'factory:ClaimGroup:List', roles: READ } },
    schema: {
      tags: ['claim-groups'], summary: "The account's claim groups (keyset pagination by id)",
      querystring: z.strictObject({ limit: z.coerce.number().int().min(1).max(200).default(50), after: z.uuid().optional() }),
      response: { 200: z.object({ items: z.array(claimGroupSchema.extend({ expiresAt: z.string().nullable() })), next_cursor: z.uuid().nullable() }) },
    },
  }, async (request) => registry.claimGroups(accountOf(request), request.query));

  app.get('/api/v1/things/:thingId', {
    config: { auth: { action: 'factory:Thing:Read', roles: READ } },
    schema: {
      tags, summary: 'One thing: identity, model, state, certificate, connectivity, twin versions, latest telemetry',
      params: thingParams, response: { 200: thingDetailSchema },
    },
  }, async (request) => registry.get(scopeOf(request), request.params.thingId));

  app.put('/api/v1/things/:thingId/tags/:tag', {
    config: { auth: { action: 'factory:Thing:Tag', roles: WRITE } },
    schema: {
      tags, summary: `Tag a thing (idempotent; at most ${MAX_TAGS_PER_THING} tags, 409 beyond)`,
      params: tagParams, response: { 200: tagsSchema },
    },
  }, async (request) => registry.tag(scopeOf(request), request.params.thingId, request.params.tag));

  app.delete('/api/v1/things/:thingId/tags/:tag', {
    config: { auth: { action: 'factory:Thing:Tag', roles: WRITE } },
    schema: { tags, summary: 'Remove a tag from a thing (idempotent)', params: tagParams, response: { 200: tagsSchema } },
  }, async (request) => registry.untag(scopeOf(request), request.params.thingId, request.params.tag));
}

// --- OpenAPI components (issue 39): the fleet registry's things by name
named(thingItemSchema, 'ThingListItem', { description: 'A thing as the fleet registry lists it' });
named(thingDetailSchema, 'Thing', {
  description: 'A thing (device) of the account: identity, lifecycle state, certificate, tags, connectivity, twin versions and latest telemetry',
  example: {
    id: EXAMPLE.thingId, model_id: EXAMPLE.modelId, model: 'FFF1:8001', manufacturer: 'Acme', serial: 'SN-000123', state: 'ACTIVATED', state_updated_at: EXAMPLE.at,
    claim_group_id: null, enrolled_by: 'device', enrolled_at: EXAMPLE.at, revoked: false, revoked_at: null, created_at: EXAMPLE.at, tags: ['line-4'], connected: true,
    last_seen: EXAMPLE.at, certificate: { serial: '5A3C9E01', not_after: EXAMPLE.later, revoked: false }, metadata: { color: 'white' },
    connectivity: { connected: true, connected_at: EXAMPLE.at, disconnected_at: null, last_seen: EXAMPLE.at, protocol_version: 5, node: 'gateway-a' },
    twin: { reported_version: 7, reported_at: EXAMPLE.at, desired_version: 3, desired_at: EXAMPLE.at }, telemetry: { values: { temperature: 21.5 }, updated_at: EXAMPLE.at },
  },
});
