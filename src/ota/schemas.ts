import { z } from 'zod';
import { EXAMPLE, named } from '../http/components.js';
import { ROLLOUT_STATES } from '../../machines/rollout.js';
import { ROLLOUT_GROUP_STATES } from '../../machines/rolloutGroup.js';
import { ACTION_STATUSES } from './repo.js';

const THING_STATES = ['REGISTERED', 'ROLLEDOFF', 'PROVISIONED', 'IN_FACTORY', 'HANDOVER_PENDING', 'ACTIVATED', 'DEACTIVATED', 'ANNIHILATED'] as const;
const TAG = /^[A-Za-z0-9][A-Za-z0-9_.:-]{0,63}$/;

/** The fleet registry's filters, as a stored query (every member optional: an empty query matches every thing of the account). */
export const thingQuery = z.strictObject({
  model: z.string().min(1).max(100).optional().describe('model id or the vid:pid name things carry'),
  state: z.array(z.enum(THING_STATES)).min(1).max(THING_STATES.length).optional().describe('lifecycle states (any of them)'),
  tags: z.array(z.string().regex(TAG, 'a tag is 1-64 characters of A-Z a-z 0-9 _ . : - starting with a letter or digit')).min(1).max(50).optional()
    .describe('things carrying every one of them'),
  last_seen_before: z.iso.datetime({ offset: true }).optional(),
  last_seen_after: z.iso.datetime({ offset: true }).optional(),
  revoked: z.boolean().optional().describe('false: only things not revoked; true: only revoked ones (a rollout skips revoked targets anyway)'),
  connected: z.boolean().optional().describe('true: only things with an MQTT session now; false: only things without one'),
});

/** a query as stored and answered */
const storedQuery = thingQuery.extend({ state: z.array(z.string()).optional() });

export const filterBody = z.strictObject({
  name: z.string().trim().min(1).max(100),
  query: thingQuery,
});

export const filterSchema = z.object({ id: z.uuid(), name: z.string(), query: storedQuery, created_at: z.string(), updated_at: z.string() });

export const thingSummary = z.object({
  id: z.uuid(), model: z.string(), serial: z.string(), state: z.string(), tags: z.array(z.string()), connected: z.boolean(), last_seen: z.string().nullable(),
});

export const previewSchema = z.object({
  count: z.number().int().describe('every thing the filter matches now'),
  items: z.array(thingSummary), next_cursor: z.string().nullable(),
});

export const software = z.strictObject({
  version: z.string().trim().min(1).max(64),
  url: z.url({ protocol: /^https?$/ }).max(2000).describe('where the device downloads the artifact'),
  sha256: z.string().regex(/^[0-9a-fA-F]{64}$/, 'sha256 is 64 hex digits'),
  size: z.number().int().min(1).max(Number.MAX_SAFE_INTEGER).describe('bytes'),
});

export const rolloutBody = z.strictObject({
  name: z.string().trim().min(1).max(100),
  filter_id: z.uuid().describe('the target filter; its matched things are taken now, at creation'),
  software,
  groups: z.union([
    z.number().int().min(1).max(100).describe('equal groups'),
    z.array(z.number().int().min(1).max(100)).min(1).max(100).describe("each group's share of the targets in percent, adding up to 100"),
  ]),
  success_threshold: z.number().int().min(1).max(100).describe('percent of a group that must succeed before the next group starts'),
  error_threshold: z.number().int().min(0).max(100).describe('the rollout stops when more than this percent of a group failed'),
});

const actionCounts = z.object(Object.fromEntries(ACTION_STATUSES.map((s) => [s, z.number().int()])) as Record<(typeof ACTION_STATUSES)[number], z.ZodNumber>);

export const rolloutSchema = z.object({
  id: z.uuid(), name: z.string(), filter_id: z.uuid().nullable(), query: storedQuery, software: z.object({ version: z.string(), url: z.string(), sha256: z.string(), size: z.number() }),
  groups: z.number().int(), success_threshold: z.number().int(), error_threshold: z.number().int(), total_targets: z.number().int(),
  state: z.enum(ROLLOUT_STATES), current_group: z.number().int().nullable().describe('0-based index of the group in progress; null before start'),
  created_at: z.string(), started_at: z.string().nullable(), ended_at: z.string().nullable(),
  actions: actionCounts.describe('per-device actions by status'),
});

export const groupSchema = z.object({
  id: z.uuid(), index: z.number().int(), total: z.number().int(), state: z.enum(ROLLOUT_GROUP_STATES),
  succeeded: z.number().int(), failed: z.number().int(),
  skipped: z.number().int().describe('targets revoked during the rollout: the thresholds are percentages of total - skipped'), started_at: z.string().nullable(), ended_at: z.string().nullable(),
});

export const actionStatus = z.enum(ACTION_STATUSES);
export const actionSchema = z.object({
  id: z.uuid(), thing_id: z.uuid(), group: z.number().int(), status: actionStatus, progress: z.number().int().nullable(),
  reason: z.string().nullable(), updated_at: z.string(),
});

// --- OpenAPI components (issue 39): the resources above by name, with examples
const E = EXAMPLE;
named(thingQuery, 'ThingFilterQuery', { description: 'Fleet registry filters; every member optional', example: { model: 'FFF1:8001', state: ['ACTIVATED'], tags: ['line-4'], connected: true } });
named(filterBody, 'TargetFilterCreate', { example: { name: 'line 4 plugs', query: { model: 'FFF1:8001', tags: ['line-4'] } } });
named(filterSchema, 'TargetFilter', { example: { id: E.otherId, name: 'line 4 plugs', query: { model: 'FFF1:8001', tags: ['line-4'] }, created_at: E.at, updated_at: E.at } });
named(thingSummary, 'ThingSummary', { example: { id: E.thingId, model: 'FFF1:8001', serial: 'SN-000123', state: 'ACTIVATED', tags: ['line-4'], connected: true, last_seen: E.at } });
named(software, 'SoftwareArtifact', { example: { version: '2.4.1', url: 'https://firmware.example.net/plug-2.4.1.bin', sha256: 'a'.repeat(64), size: 524288 } });
named(rolloutBody, 'RolloutCreate', { example: { name: 'plug 2.4.1', filter_id: E.otherId, software: { version: '2.4.1', url: 'https://firmware.example.net/plug-2.4.1.bin', sha256: 'a'.repeat(64), size: 524288 }, groups: [10, 90], success_threshold: 95, error_threshold: 2 } });
named(rolloutSchema, 'Rollout');
named(groupSchema, 'RolloutGroup');
named(actionSchema, 'RolloutAction');
