import { z } from 'zod';

const SUBJECT_TOKEN = /^[A-Za-z0-9_-]+(\.[A-Za-z0-9_-]+)*$/;

export const idParams = z.strictObject({ id: z.uuid() });

export const bridgeCreate = z.strictObject({
  name: z.string().trim().min(1).max(100),
  type: z.enum(['nats', 'amqp']).describe('nats: NATS JetStream (acknowledged publishes); amqp: RabbitMQ (publisher confirms)'),
  url: z.string().min(1).max(2048).describe('nats://[user:pass@|token@]host:port or amqp(s)://[user:pass@]host:port/vhost; credentials in it are sealed and never returned'),
  subject_prefix: z.string().min(1).max(200).regex(SUBJECT_TOKEN, 'subject_prefix: dot-separated tokens of letters, digits, _ and - (no wildcards, no spaces)')
    .describe('messages go to `<subject_prefix>.<thingId>.<kind>` (NATS subject, AMQP routing key)'),
  exchange: z.string().min(1).max(255).optional().describe('amqp: the exchange published to (default amq.topic)'),
  username: z.string().max(256).optional().describe('sealed, never returned'),
  password: z.string().max(1024).optional().describe('sealed, never returned'),
  token: z.string().max(4096).optional().describe('nats: an auth token; sealed, never returned'),
});
export type BridgeCreate = z.infer<typeof bridgeCreate>;

export const bridgePatch = bridgeCreate.omit({ type: true }).partial();
export type BridgePatch = z.infer<typeof bridgePatch>;

export const bridgeSchema = z.object({
  id: z.uuid(),
  name: z.string(),
  type: z.enum(['nats', 'amqp']),
  url: z.string().describe('without its credentials'),
  subject_prefix: z.string(),
  exchange: z.string().nullable(),
  has_credentials: z.boolean(),
  created_at: z.string(),
  updated_at: z.string(),
});
export const bridgeListSchema = z.object({ items: z.array(bridgeSchema) });

const fieldTest = z.union([
  z.string(), z.number(), z.boolean(), z.null(),
  z.strictObject({
    eq: z.unknown().optional(), ne: z.unknown().optional(), in: z.array(z.unknown()).max(100).optional(), exists: z.boolean().optional(),
    gt: z.number().optional(), gte: z.number().optional(), lt: z.number().optional(), lte: z.number().optional(),
  }),
]);
export const whereSchema = z.strictObject({
  payload: z.record(z.string().min(1).max(256), fieldTest).optional().describe('tests on top-level payload fields, all must hold; a bare value means eq'),
  thing: z.strictObject({
    model: z.string().min(1).max(100).optional().describe('model id or VID:PID'),
    tags: z.array(z.string().min(1).max(100)).max(20).optional().describe('things carrying all of them'),
    state: z.array(z.string().min(1).max(40)).max(10).optional().describe('lifecycle states, any of them'),
  }).optional(),
}).describe('filters; a message must pass all of them');

/** how a rule's events go to its sink (docs/decisions.md, "A rule's `format`") */
const ruleFormat = z.enum(['event', 'batch']);

export const ruleCreate = z.strictObject({
  name: z.string().trim().min(1).max(100),
  from: z.string().min(1).max(300).describe('what the rule reads, one source: an MQTT topic filter matching exactly one of devices/{thingId}/telemetry, devices/{thingId}/twin/reported (twin reports) and devices/{thingId}/commands/response (command replies), with + or a thing id as the second level (e.g. devices/+/telemetry, devices/{id}/twin/reported, devices/+/commands/#); or an event kind, $events/connectivity or $events/state. Heartbeats are not a source (use $events/connectivity); a filter over several topics (devices/#) is refused: one rule per topic. 400 naming `from` otherwise'),
  bridge_id: z.uuid(),
  where: whereSchema.optional(),
  select: z.array(z.string().min(1).max(256)).min(1).max(64).optional().describe('top-level payload fields delivered (default: the payload as sent; a payload that is not a JSON object has no fields)'),
  format: ruleFormat.describe('event (default): one CloudEvent per sink message (application/cloudevents+json); batch: one thing\'s events of a delivery in as few messages as the limits allow, each a JSON array of CloudEvents (application/cloudevents-batch+json, CloudEvents\' batched format), in order, at most 1,000 events and 256 KiB, its id (Nats-Msg-Id, AMQP message-id) `<rule id>:<first event id>:batch:<number of events>`').default('event'),
  enabled: z.boolean().default(true),
});
export type RuleCreate = z.infer<typeof ruleCreate>;

export const rulePatch = z.strictObject({
  name: z.string().trim().min(1).max(100).optional(),
  where: whereSchema.nullable().optional(),
  select: z.array(z.string().min(1).max(256)).min(1).max(64).nullable().optional(),
  format: ruleFormat.optional(),
  enabled: z.boolean().optional(),
});
export type RulePatch = z.infer<typeof rulePatch>;

export const ruleSchema = z.object({
  id: z.uuid(),
  name: z.string(),
  from: z.string(),
  source: z.enum(['telemetry', 'connectivity', 'state', 'twin', 'commandReply']).describe('what `from` reads: telemetry (the history), twin reports and command replies (the device message log), connectivity or state-change events'),
  bridge_id: z.uuid(),
  where: whereSchema.nullable(),
  select: z.array(z.string()).nullable(),
  format: ruleFormat.describe('how events go to the sink: one per message, or batches (see the create body)'),
  status: z.enum(['ENABLED', 'DISABLED', 'FAILING']),
  failing_since: z.string().nullable().describe('start of the current run of refused deliveries'),
  last_error: z.string().nullable(),
  last_error_at: z.string().nullable(),
  delivered: z.number().int().describe('messages the sink acknowledged (at least once: a redelivery counts again)'),
  failed: z.number().int().describe('delivery attempts the sink refused (a batch counts each of its messages)'),
  last_delivered_at: z.string().nullable(),
  lag: z.object({
    messages: z.number().int().describe('messages written and not yet acknowledged by the sink (counted over at most 2,000 history rows, one per thing and ingest batch: a lower bound beyond; `seconds` then tells more)'),
    seconds: z.number().describe('age of the oldest message not yet acknowledged (0 when none)'),
  }),
  created_at: z.string(),
  updated_at: z.string(),
});
export const ruleListSchema = z.object({ items: z.array(ruleSchema) });
