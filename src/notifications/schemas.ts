import { z } from 'zod';
import { EXAMPLE, named } from '../http/components.js';

export const SEVERITIES = ['info', 'warning', 'error', 'critical'] as const;
export type Severity = (typeof SEVERITIES)[number];
export const CHANNELS = ['email', 'in_app'] as const;
export type Channel = (typeof CHANNELS)[number];

export const TEMPLATE_ID = /^[a-z0-9][a-z0-9-]{0,62}\/[a-z0-9][a-z0-9-]{0,62}$/;
export const CATEGORY_ID = /^[a-z0-9][a-z0-9-]{0,62}$/;

/** The spec's publish request, exactly (unknown fields refused). */
export const publishBody = z
  .strictObject({
    channel: z.array(z.enum(CHANNELS)).min(1).max(2).refine((a) => new Set(a).size === a.length, 'channel lists a value twice'),
    to: z.strictObject({
      subscriberId: z.string().trim().min(1).max(255).describe('scope user: the human\'s subject (sub); scope tenant: the account id'),
      email: z.email().max(320).optional(),
    }),
    scope: z.enum(['user', 'tenant']).default('user'),
    severity: z.enum(SEVERITIES).default('info'),
    template: z.string().regex(TEMPLATE_ID, 'template must be <namespace>/<name> (lower-case letters, digits, -)'),
    data: z.record(z.string(), z.unknown()).default({}),
    actionUrl: z
      .string()
      .max(2000)
      .regex(/^\/(?!\/)[^\s]*$/, 'actionUrl must be a console-relative path starting with a single /')
      .optional(),
  })
  .superRefine((b, ctx) => {
    if (b.channel.includes('email') && !b.to.email) ctx.addIssue({ code: 'custom', path: ['to', 'email'], message: 'to.email is required when channel includes email' });
  });
export type PublishRequest = z.infer<typeof publishBody>;

export const publishResponse = z.union([
  z.object({ status: z.literal('sent'), id: z.uuid().nullable(), channel: z.array(z.enum(CHANNELS)) }),
  z.object({ status: z.literal('dropped'), reason: z.enum(['globalMute', 'category-disabled', 'quiet-hours']), categoryId: z.string().optional() }),
]);

const hhmm = z.string().regex(/^([01]\d|2[0-3]):[0-5]\d$/, 'time must be HH:MM (24 h)');

export const preferencesBody = z.strictObject({
  globalMute: z.boolean(),
  disabledCategories: z.array(z.string().regex(CATEGORY_ID)).max(100),
  quietHours: z
    .strictObject({ start: hhmm, end: hhmm, timeZone: z.string().min(1).max(64).describe('IANA time zone, e.g. Europe/Berlin') })
    .refine((q) => q.start !== q.end, 'quietHours.start and quietHours.end must differ')
    .nullable(),
});
export type Preferences = z.infer<typeof preferencesBody>;
export const preferencesResponse = preferencesBody.extend({ updatedAt: z.string().nullable() });

export const notificationItem = z.object({
  id: z.uuid(),
  scope: z.enum(['user', 'tenant']),
  accountId: z.string().nullable().describe('the account of a tenant-scope notification'),
  template: z.string(),
  categoryId: z.string(),
  severity: z.enum(SEVERITIES),
  title: z.string(),
  body: z.string(),
  data: z.record(z.string(), z.unknown()),
  actionUrl: z.string().nullable(),
  createdAt: z.string(),
  read: z.boolean(),
  dismissed: z.boolean(),
});
export type NotificationItem = z.infer<typeof notificationItem>;

const boolParam = z.enum(['true', 'false']);

export const feedQuery = z.object({
  limit: z.coerce.number().int().min(1).max(100).default(20),
  offset: z.coerce.number().int().min(0).max(1_000_000).default(0),
  read: z.enum(['true', 'false', 'all']).default('all'),
  severity: z
    .string()
    .optional()
    .transform((v, ctx) => {
      if (v === undefined || v === '' || v === 'all') return undefined;
      const parts = v.split(',').map((s) => s.trim());
      const bad = parts.filter((p) => !(SEVERITIES as readonly string[]).includes(p));
      if (bad.length) {
        ctx.addIssue({ code: 'custom', message: `unknown severity ${bad.map((b) => JSON.stringify(b)).join(', ')}; use a comma-separated subset of ${SEVERITIES.join(',')}` });
        return z.NEVER;
      }
      return [...new Set(parts)] as Severity[];
    }),
  dismissed: boolParam.default('false').describe('true: include dismissed notifications (hidden by default)'),
});
export type FeedQuery = z.infer<typeof feedQuery>;

export const feedResponse = z.object({
  items: z.array(notificationItem),
  limit: z.number(),
  offset: z.number(),
  hasMore: z.boolean(),
});

export const idParams = z.object({ id: z.uuid() });

export const categoryItem = z.object({ id: z.string(), name: z.string(), names: z.record(z.string(), z.string()) });

export const categoryBody = z.strictObject({
  names: z
    .record(z.string().regex(/^[a-z]{2}(-[A-Z]{2})?$/, 'locale keys like en, de, pt-BR'), z.string().trim().min(1).max(200))
    .refine((n) => typeof n.en === 'string', 'names.en is required'),
});

export const templateBody = z.strictObject({
  categoryId: z.string().regex(CATEGORY_ID),
  subject: z.string().min(1).max(500),
  title: z.string().min(1).max(500),
  bodyText: z.string().min(1).max(20_000),
  bodyHtml: z.string().min(1).max(50_000),
});
export const templateItem = templateBody.extend({ id: z.string(), updatedAt: z.string() });

/** Frame data of `event: notification` (SSE) and of WebSocket messages. */
export type StreamData =
  | { type: 'created'; notification: NotificationItem }
  | { type: 'dismissed'; id: string }
  | { type: 'dismissed-all'; accountId: string | null; through: number };

/** The request the gateway sends to the authorization service (NOTIFY_AUTHZ_URL, or its own /internal/notifications/authorize). */
export const authzRequestSchema = z.object({
  action: z.literal('notifications:Send'),
  publisher: z.object({ sub: z.string(), realm: z.string(), realmKind: z.string(), accountId: z.string().nullable(), roles: z.array(z.string()) }),
  scope: z.enum(['user', 'tenant']),
  subscriberId: z.string(),
  template: z.string(),
  categoryId: z.string(),
  severity: z.enum(SEVERITIES),
  channel: z.array(z.string()),
});
export const authzDecisionSchema = z.object({ allow: z.boolean(), reason: z.string().optional().describe('why a send is denied') });

// --- OpenAPI components (issue 39): the resources above by name, with examples
const E = EXAMPLE;
named(publishBody, 'NotificationPublish', { example: { channel: ['in_app'], to: { subscriberId: 'user-42' }, scope: 'user', severity: 'warning', template: 'device/revoked', data: { thingId: E.thingId }, actionUrl: `/things/${E.thingId}` } });
named(publishResponse, 'NotificationPublishResult', { example: { status: 'sent', id: E.otherId, channel: ['in_app'] } });
named(preferencesBody, 'NotificationPreferencesUpdate', { example: { globalMute: false, disabledCategories: ['marketing'], quietHours: { start: '22:00', end: '07:00', timeZone: 'Europe/Berlin' } } });
named(preferencesResponse, 'NotificationPreferences', { example: { globalMute: false, disabledCategories: ['marketing'], quietHours: { start: '22:00', end: '07:00', timeZone: 'Europe/Berlin' }, updatedAt: E.at } });
const notification = { id: E.otherId, scope: 'user', accountId: null, template: 'device/revoked', categoryId: 'device', severity: 'warning', title: 'Device revoked', body: 'Device SN-000123 was revoked.', data: { thingId: E.thingId }, actionUrl: `/things/${E.thingId}`, createdAt: E.at, read: false, dismissed: false } as const;
named(notificationItem, 'Notification', { example: notification });
named(feedResponse, 'NotificationPage', { example: { items: [notification], limit: 20, offset: 0, hasMore: false } });
named(categoryItem, 'NotificationCategory', { example: { id: 'device', name: 'Devices', names: { en: 'Devices', de: 'Geräte' } } });
named(categoryBody, 'NotificationCategoryUpdate', { example: { names: { en: 'Devices', de: 'Geräte' } } });
named(templateBody, 'NotificationTemplateUpdate', { example: { categoryId: 'device', subject: 'Device {{serial}} revoked', title: 'Device revoked', bodyText: 'Device {{serial}} was revoked.', bodyHtml: '<p>Device {{serial}} was revoked.</p>' } });
named(templateItem, 'NotificationTemplate', { example: { id: 'device/revoked', categoryId: 'device', subject: 'Device {{serial}} revoked', title: 'Device revoked', bodyText: 'Device {{serial}} was revoked.', bodyHtml: '<p>Device {{serial}} was revoked.</p>', updatedAt: E.at } });
named(authzRequestSchema, 'NotificationAuthorizationRequest', { example: { action: 'notifications:Send', publisher: { sub: 'svc-alerts', realm: `acc-${E.accountId}`, realmKind: 'acc', accountId: E.accountId, roles: ['operator'] }, scope: 'user', subscriberId: 'user-42', template: 'device/revoked', categoryId: 'device', severity: 'warning', channel: ['in_app'] } });
named(authzDecisionSchema, 'NotificationAuthorizationDecision', { example: { allow: true } });
