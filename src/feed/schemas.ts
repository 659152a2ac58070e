import { z } from 'zod';
import { EXAMPLE, named } from '../http/components.js';
import { FEED_PAGE, THINGS_PAGE } from './feed.js';

/** Thing states a change can lead to (machines/thing.ts; REGISTERED is not a spec state). */
export const THING_STATES = ['ROLLEDOFF', 'PROVISIONED', 'IN_FACTORY', 'HANDOVER_PENDING', 'ACTIVATED', 'DEACTIVATED', 'ANNIHILATED'] as const;
const thingState = z.enum(THING_STATES);

// --- feed

export const feedQuery = z.strictObject({
  since: z.string().max(512).optional().describe('the next_cursor of the previous page; omit to start from the beginning of the log (THM-50110 when malformed, THM-50120 (410) when older than 72 hours)'),
  limit: z.coerce.number().int().min(1).max(FEED_PAGE.max).default(FEED_PAGE.default).describe(`changes per page (1 to ${FEED_PAGE.max})`),
  registrar_id: z.string().max(512).optional().describe('must not be sent: the registrar comes from the signed identity (THM-50100)'),
});

export const changeItemSchema = z.object({
  sequence: z.number().int().describe("the change's number in the log: unique, and increasing along each thing's changes (the page order is commit order, see docs)"),
  thing_id: z.uuid(),
  model_id: z.uuid().nullable(),
  model: z.string().nullable().describe('the model as the device named it at enrollment'),
  manufacturer: z.string().nullable(),
  serial: z.string().nullable(),
  old_state: z.string().nullable().describe('null for a birth (enrollment into ROLLEDOFF)'),
  new_state: z.string(),
  event: z.string().describe('ENROLL, PROVISION, FACTORY_DONE, FACTORY_HANDOVER, ACTIVATE, DEACTIVATE or ANNIHILATE'),
  changed_at: z.string(),
});

export const feedPageSchema = z.object({
  items: z.array(changeItemSchema),
  next_cursor: z.string().describe('always set: pass it as since on the next poll, also after an empty page'),
  has_more: z.boolean().describe('more changes are ready now: poll again at once'),
});

export const thingsQuery = z.strictObject({
  limit: z.coerce.number().int().min(1).max(THINGS_PAGE.max).default(THINGS_PAGE.default),
  after: z.string().max(2048).optional().describe('next_cursor of the previous page'),
});

export const thingsPageSchema = z.object({
  items: z.array(z.object({
    thing_id: z.uuid(), model_id: z.uuid().nullable(), model: z.string(), manufacturer: z.string(), serial: z.string(), state: z.string(), updated_at: z.string(),
  })),
  next_cursor: z.string().nullable(),
  feed_cursor: z.string().nullable().describe('first page only: resume the state-change feed from this cursor once the sync is done (changes made during the sync are in the feed after it)'),
});

// --- subscriptions

const targetUrl = z
  .url({ protocol: /^https$/, error: 'must be an https:// URL' })
  .max(2048)
  .refine((u) => {
    const url = URL.parse(u);
    return url !== null && !url.username && !url.password;
  }, 'must be a URL without credentials (user:password@)')
  .describe('where deliveries are POSTed; https:// only (THM-60120); loopback, link-local and private targets are refused');

const eventFilter = z
  .strictObject({
    new_states: z.array(thingState).max(THING_STATES.length).optional().describe('only changes into these states'),
    thing_ids: z.array(z.uuid()).max(1000).optional().describe('only changes of these things'),
  })
  .nullable()
  .describe('optional; only new_states and thing_ids (THM-60140); both given: a change must match both; none: every change');

export const createBody = z.strictObject({
  target_url: targetUrl,
  acknowledge_polling_still_mandatory: z.literal(true).describe('must be true (THM-60110): deliveries are best-effort, the feed stays the source of truth'),
  event_filter: eventFilter.optional(),
});

export const patchBody = z
  .strictObject({
    target_url: targetUrl.optional(),
    event_filter: eventFilter.optional(),
    status: z.enum(['ACTIVE', 'SUSPENDED']).optional().describe('a SUSPENDED subscription accepts only {"status":"ACTIVE"} (THM-60150)'),
  })
  .refine((b) => Object.keys(b).length > 0, 'send at least one of target_url, event_filter, status');

export const idParams = z.object({ id: z.string().max(64).describe('subscription id (THM-60100 when unknown)') });

export const listQuery = z.strictObject({
  limit: z.coerce.number().int().min(1).max(100).default(20),
  after: z.uuid().optional().describe('next_cursor of the previous page'),
});

export const subscriptionSchema = z.object({
  id: z.uuid(),
  account_id: z.uuid(),
  registrar_id: z.uuid().nullable().describe('set when a registrar-bound factory service created it: it then gets the changes of that registrar\'s models only'),
  target_url: z.string(),
  acknowledge_polling_still_mandatory: z.literal(true),
  event_filter: z.object({ new_states: z.array(z.string()).optional(), thing_ids: z.array(z.string()).optional() }).nullable(),
  status: z.enum(['ACTIVE', 'SUSPENDED']),
  consecutive_failures: z.number().int().describe('deliveries dropped in a row (WEBHOOK_SUSPEND_AFTER of them suspend it)'),
  suspended_at: z.string().nullable(),
  suspended_reason: z.enum(['receiver-gone', 'delivery-failures', 'owner']).nullable(),
  created_at: z.string(),
  updated_at: z.string(),
});

export const createdSchema = subscriptionSchema.extend({
  secret: z.string().describe('shown once: the Standard Webhooks signing secret (whsec_...) of its deliveries; not the access secret'),
});

export const subscriptionPageSchema = z.object({ items: z.array(subscriptionSchema), next_cursor: z.string().nullable() });

// --- OpenAPI components (issue 39): the resources above by name, with examples
const E = EXAMPLE;
const change = { sequence: 1042, thing_id: E.thingId, model_id: E.modelId, model: 'FFF1:8001', manufacturer: 'Acme', serial: 'SN-000123', old_state: 'IN_FACTORY', new_state: 'HANDOVER_PENDING', event: 'FACTORY_HANDOVER', changed_at: E.at };
named(changeItemSchema, 'StateChange', { description: 'One change of a thing\'s lifecycle state in the feed', example: change });
named(feedPageSchema, 'StateChangePage', { description: 'A page of the state-change feed', example: { items: [change], next_cursor: 'c1.MTA0Mg.1795341600.k3x9', has_more: false } });
named(thingsPageSchema.shape.items.element, 'ThingSyncItem', { description: 'A thing as the full sync lists it', example: { thing_id: E.thingId, model_id: E.modelId, model: 'FFF1:8001', manufacturer: 'Acme', serial: 'SN-000123', state: 'ACTIVATED', updated_at: E.at } });
named(thingsPageSchema, 'ThingSyncPage', { description: 'A page of the full sync (GET /provisioning/v1/things)' });
named(createBody, 'SubscriptionCreate', { example: { target_url: 'https://factory.example.net/hooks/state-changes', acknowledge_polling_still_mandatory: true, event_filter: { new_states: ['ACTIVATED'] } } });
named(patchBody, 'SubscriptionPatch', { example: { status: 'ACTIVE' } });
const subscription = { id: E.otherId, account_id: E.accountId, registrar_id: null, target_url: 'https://factory.example.net/hooks/state-changes', acknowledge_polling_still_mandatory: true, event_filter: { new_states: ['ACTIVATED'] }, status: 'ACTIVE', consecutive_failures: 0, suspended_at: null, suspended_reason: null, created_at: E.at, updated_at: E.at } as const;
named(subscriptionSchema, 'Subscription', { description: 'A state-change webhook subscription', example: subscription });
named(createdSchema, 'SubscriptionCreated', { description: 'A created subscription; secret (whsec_…) is shown once', example: { ...subscription, secret: 'whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw' } });
named(subscriptionPageSchema, 'SubscriptionPage');

/** The body of a state-change delivery (webhooks: thingStateChanged), as src/feed/dispatcher.ts builds it. */
export const deliverySchema = named(z.object({
  type: z.literal('thing.state_changed'),
  timestamp: z.string().describe('the change\'s changed_at'),
  data: changeItemSchema,
}), 'StateChangeDelivery', { description: 'Standard Webhooks payload: { type, timestamp, data } with the feed\'s item', example: { type: 'thing.state_changed', timestamp: E.at, data: change } });
