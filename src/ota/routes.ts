import { z } from 'zod';
import type { ZodApp } from '../gateway.js';
import { accountOf } from '../http/auth/plugin.js';
import type { TargetFilters } from './filters.js';
import type { Rollouts } from './rollouts.js';
import { actionSchema, actionStatus, filterBody, filterSchema, groupSchema, previewSchema, rolloutBody, rolloutSchema } from './schemas.js';
import { ROLLOUT_STATES } from '../../machines/rollout.js';

const READ = ['admin', 'operator', 'viewer'] as const;
const MANAGE = { roles: ['admin', 'operator'] as const, capability: 'manage_ota_rollouts' };
const filterTags = ['ota-target-filters'];
const rolloutTags = ['ota-rollouts'];
const filterParams = z.object({ filterId: z.uuid() });
const rolloutParams = z.object({ rolloutId: z.uuid() });
const page = z.strictObject({ limit: z.coerce.number().int().min(1).max(500).default(50), after: z.uuid().optional().describe('next_cursor of the previous page') });

/**
 * OTA routes (issue 20): creating, editing and deleting target filters, previewing them, and
 * creating and controlling rollouts need `manage_ota_rollouts` (admin or operator); reading
 * filters and rollouts (status, groups, per-device actions) needs no capability.
 */
export async function otaRoutes(app: ZodApp, filters: TargetFilters, rollouts: Rollouts): Promise<void> {
  app.post('/api/v1/ota/target-filters', {
    config: { auth: { action: 'ota:TargetFilter:Create', ...MANAGE } },
    schema: { tags: filterTags, summary: 'Create a target filter (a named query over the account\'s things)', body: filterBody, response: { 201: filterSchema } },
  }, async (request, reply) => reply.code(201).send(await filters.create(accountOf(request), request.body)));

  app.get('/api/v1/ota/target-filters', {
    config: { auth: { action: 'ota:TargetFilter:List', roles: READ } },
    schema: { tags: filterTags, summary: "The account's target filters (keyset pages by id)", querystring: page, response: { 200: z.object({ items: z.array(filterSchema), next_cursor: z.uuid().nullable() }) } },
  }, async (request) => filters.list(accountOf(request), request.query));

  app.get('/api/v1/ota/target-filters/:filterId', {
    config: { auth: { action: 'ota:TargetFilter:Read', roles: READ } },
    schema: { tags: filterTags, summary: 'One target filter', params: filterParams, response: { 200: filterSchema } },
  }, async (request) => filters.get(accountOf(request), request.params.filterId));

  app.put('/api/v1/ota/target-filters/:filterId', {
    config: { auth: { action: 'ota:TargetFilter:Update', ...MANAGE } },
    schema: { tags: filterTags, summary: 'Edit a target filter (rollouts created from it keep the query they were created with)', params: filterParams, body: filterBody, response: { 200: filterSchema } },
  }, async (request) => filters.update(accountOf(request), request.params.filterId, request.body));

  app.delete('/api/v1/ota/target-filters/:filterId', {
    config: { auth: { action: 'ota:TargetFilter:Delete', ...MANAGE } },
    schema: { tags: filterTags, summary: 'Delete a target filter', params: filterParams, response: { 204: z.null().describe('deleted') } },
  }, async (request, reply) => {
    await filters.remove(accountOf(request), request.params.filterId);
    return reply.code(204).send(null);
  });

  app.get('/api/v1/ota/target-filters/:filterId/preview', {
    config: { auth: { action: 'ota:TargetFilter:Preview', ...MANAGE } },
    schema: {
      tags: filterTags, summary: 'The things the filter matches now: their count and one page (oldest first)', params: filterParams,
      querystring: z.strictObject({ limit: z.coerce.number().int().min(1).max(500).default(50), cursor: z.string().max(512).optional().describe('next_cursor of the previous page') }),
      response: { 200: previewSchema },
    },
  }, async (request) => filters.preview(accountOf(request), request.params.filterId, request.query));

  app.post('/api/v1/ota/rollouts', {
    config: { auth: { action: 'ota:Rollout:Create', ...MANAGE } },
    schema: {
      tags: rolloutTags, summary: "Create a rollout (READY) from a target filter: its matched things now, split into groups", body: rolloutBody,
      response: { 201: rolloutSchema },
    },
  }, async (request, reply) => reply.code(201).send(await rollouts.create(accountOf(request), request.body)));

  app.get('/api/v1/ota/rollouts', {
    config: { auth: { action: 'ota:Rollout:List', roles: READ } },
    schema: {
      tags: rolloutTags, summary: "The account's rollouts, newest first",
      querystring: z.strictObject({ limit: z.coerce.number().int().min(1).max(200).default(50), state: z.enum(ROLLOUT_STATES).optional() }),
      response: { 200: z.object({ items: z.array(rolloutSchema) }) },
    },
  }, async (request) => rollouts.list(accountOf(request), request.query));

  app.get('/api/v1/ota/rollouts/:rolloutId', {
    config: { auth: { action: 'ota:Rollout:Read', roles: READ } },
    schema: { tags: rolloutTags, summary: 'A rollout: state, group in progress, actions by status', params: rolloutParams, response: { 200: rolloutSchema } },
  }, async (request) => rollouts.get(accountOf(request), request.params.rolloutId));

  app.get('/api/v1/ota/rollouts/:rolloutId/groups', {
    config: { auth: { action: 'ota:Rollout:Read', roles: READ } },
    schema: { tags: rolloutTags, summary: "A rollout's groups in order", params: rolloutParams, response: { 200: z.object({ items: z.array(groupSchema) }) } },
  }, async (request) => rollouts.groups(accountOf(request), request.params.rolloutId));

  app.get('/api/v1/ota/rollouts/:rolloutId/actions', {
    config: { auth: { action: 'ota:Rollout:Read', roles: READ } },
    schema: {
      tags: rolloutTags, summary: "A rollout's per-device actions (keyset pages by id)", params: rolloutParams,
      querystring: page.extend({ status: actionStatus.optional(), group: z.coerce.number().int().min(0).max(99).optional(), thing_id: z.uuid().optional() }),
      response: { 200: z.object({ items: z.array(actionSchema), next_cursor: z.uuid().nullable() }) },
    },
  }, async (request) => rollouts.actions(accountOf(request), request.params.rolloutId, request.query));

  for (const [verb, event, summary] of [
    ['start', 'START', 'Start a READY rollout: its first group gets the update'],
    ['pause', 'PAUSE', 'Pause a RUNNING rollout: no next group starts and pending actions are held'],
    ['resume', 'RESUME', 'Resume a PAUSED rollout'],
    ['cancel', 'CANCEL', 'Cancel a rollout: actions not yet taken up by a device are cancelled'],
  ] as const) {
    app.post(`/api/v1/ota/rollouts/:rolloutId/${verb}`, {
      config: { auth: { action: `ota:Rollout:${event[0]}${event.slice(1).toLowerCase()}`, ...MANAGE } },
      schema: { tags: rolloutTags, summary: `${summary} (409 when its state refuses it)`, params: rolloutParams, response: { 200: rolloutSchema } },
    }, async (request) => rollouts.control(accountOf(request), request.params.rolloutId, event));
  }
}
