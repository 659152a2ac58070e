import crypto from 'node:crypto';
import type { Counter } from 'prom-client';
import type { Gateway, Services, ThingSearch } from '../gateway.js';
import type { StoredEvent } from '../actors/store.js';
import { isUuid, type Principal } from '../http/auth/principal.js';
import { internal, invalid, notFound, refused, upstreamFailed } from '../lib/errors.js';
import { repo, type NewNotification, type Reader } from './repo.js';
import type { Mailer } from './mailer.js';
import type { StreamHub } from './streams.js';
import type { FeedQuery, NotificationItem, Preferences, PublishRequest, Severity, StreamData } from './schemas.js';
import { localize, MissingVariables, render, SEED_CATEGORIES, SEED_TEMPLATES, type TemplateRecord } from './templates.js';

export type PublishResult =
  | { status: 'sent'; id: string | null; channel: PublishRequest['channel'] }
  | { status: 'dropped'; reason: 'globalMute' | 'category-disabled' | 'quiet-hours'; categoryId?: string };

export const STREAM_COOKIE = 'gw_notify_stream';
export const STREAM_TTL_SECONDS = 3600;
const AUTHZ_TIMEOUT_MS = 3000;

/** The request the gateway sends to the authorization service (NOTIFY_AUTHZ_URL). */
export interface AuthzRequest {
  action: 'notifications:Send';
  publisher: { sub: string; realm: string; realmKind: string; accountId: string | null; roles: string[] };
  scope: 'user' | 'tenant';
  subscriberId: string;
  template: string;
  categoryId: string;
  severity: Severity;
  channel: string[];
}

/** Domain events of the gateway turned into tenant-scope notifications of the event's account. */
const EVENT_TEMPLATES: Record<string, (p: Record<string, any>) => { template: string; severity: Severity; actionUrl: string }> = {
  'thing.revoked': (p) => ({ template: 'device/revoked', severity: 'warning', actionUrl: `/things/${encodeURIComponent(String(p.thingId ?? ''))}` }),
  'thing.certificateExpiring': (p) => ({ template: 'device/certificate-expiring', severity: 'warning', actionUrl: `/things/${encodeURIComponent(String(p.thingId ?? ''))}` }),
  'license.requested': (p) => ({ template: 'license/requested', severity: 'info', actionUrl: `/licenses/${encodeURIComponent(String(p.licenseId ?? ''))}` }),
  'claimGroup.capped': (p) => ({ template: 'claim-group/capped', severity: 'warning', actionUrl: `/claim-groups/${encodeURIComponent(String(p.claimGroupId ?? ''))}` }),
  'quotaRequest.decided': (p) => ({ template: 'quota/request-decided', severity: p.decision === 'denied' ? 'warning' : 'info', actionUrl: `/quotas/requests/${encodeURIComponent(String(p.requestId ?? ''))}` }),
  'organization.leaveBlocked': (p) => ({ template: 'organization/leave-blocked', severity: 'error', actionUrl: `/organizations/${encodeURIComponent(String(p.organizationId ?? ''))}` }),
  'subscription.suspended': (p) => ({ template: 'webhook/subscription-suspended', severity: p.reason === 'owner' ? 'info' : 'warning', actionUrl: `/state-change-subscriptions/${encodeURIComponent(String(p.subscriptionId ?? ''))}` }),
  'rule.failing': (p) => ({ template: 'bridge/rule-failing', severity: 'warning', actionUrl: `/rules/${encodeURIComponent(String(p.ruleId ?? ''))}` }),
};
export const NOTIFYING_EVENTS = Object.keys(EVENT_TEMPLATES);

/** Is `now` inside the window [start, end) in `timeZone`? Windows across midnight (22:00-07:00) work. */
export function inQuietHours(q: { start: string; end: string; timeZone: string }, now: Date): boolean {
  const parts = new Intl.DateTimeFormat('en-GB', { timeZone: q.timeZone, hour: '2-digit', minute: '2-digit', hourCycle: 'h23' }).formatToParts(now);
  const h = Number(parts.find((p) => p.type === 'hour')?.value);
  const m = Number(parts.find((p) => p.type === 'minute')?.value);
  const t = h * 60 + m;
  const [sh, sm] = q.start.split(':').map(Number);
  const [eh, em] = q.end.split(':').map(Number);
  const s = sh * 60 + sm;
  const e = eh * 60 + em;
  return s < e ? t >= s && t < e : t >= s || t < e;
}

export function isTimeZone(tz: string): boolean {
  try {
    new Intl.DateTimeFormat('en', { timeZone: tz });
    return true;
  } catch {
    return false;
  }
}

export const hashToken = (token: string) => crypto.createHash('sha256').update(token, 'utf8').digest();

export class NotificationsService {
  /** `published` counts publish outcomes (the gateway's metrics registry) */
  constructor(
    private readonly gw: Gateway, private readonly mailer: Mailer, readonly hub: StreamHub, private readonly accounts: Pick<Services['accounts'], 'get'>,
    private readonly published: Counter<'status' | 'reason'>,
    /** trust's declared service: names the device of a device event (serial and model) */
    private readonly things: Pick<ThingSearch, 'describe'>,
  ) {}

  private get sql() {
    return this.gw.sql;
  }

  async seed(): Promise<void> {
    await this.sql.begin((tx) => repo.seed(tx, SEED_CATEGORIES, SEED_TEMPLATES));
  }

  // ---------------------------------------------------------------- publish

  async publish(publisher: Principal, req: PublishRequest, now = new Date()): Promise<PublishResult> {
    const result = await this.publishOnce(publisher, req, now);
    this.published.inc({ status: result.status, reason: result.status === 'dropped' ? result.reason : '' });
    return result;
  }

  private async publishOnce(publisher: Principal, req: PublishRequest, now: Date): Promise<PublishResult> {
    const template = await repo.template(this.sql, req.template);
    if (!template) throw invalid(`template ${req.template} is not in the catalogue (GET /api/notifications/templates lists it)`);
    if (req.scope === 'tenant') {
      if (!isUuid(req.to.subscriberId)) throw invalid('to.subscriberId must be an account id (UUID) when scope is tenant');
      if (!(await this.accounts.get(req.to.subscriberId.toLowerCase()))) throw invalid(`account ${req.to.subscriberId} does not exist`);
    }
    const subscriberId = req.scope === 'tenant' ? req.to.subscriberId.toLowerCase() : req.to.subscriberId;
    const rendered = this.renderStrict(template, req.data, req.actionUrl);

    await this.authorize({
      action: 'notifications:Send',
      publisher: { sub: publisher.sub, realm: publisher.realm, realmKind: publisher.realmKind, accountId: publisher.accountId ?? null, roles: publisher.roles },
      scope: req.scope,
      subscriberId,
      template: template.id,
      categoryId: template.categoryId,
      severity: req.severity,
      channel: req.channel,
    });

    if (req.scope === 'user') {
      const prefs = await repo.preferences(this.sql, subscriberId);
      if (prefs.globalMute) return { status: 'dropped', reason: 'globalMute' };
      if (prefs.disabledCategories.includes(template.categoryId)) return { status: 'dropped', reason: 'category-disabled', categoryId: template.categoryId };
      if (prefs.quietHours && isTimeZone(prefs.quietHours.timeZone) && inQuietHours(prefs.quietHours, now)) return { status: 'dropped', reason: 'quiet-hours' };
    }

    // One transaction: the feed row and its stream event commit only if the email went out.
    let created: { item: NotificationItem; ev: { seq: number; targetKind: 'user' | 'tenant'; target: string; data: StreamData } } | undefined;
    await this.sql.begin(async (tx) => {
      if (req.channel.includes('in_app')) {
        const item = (await repo.insertNotification(tx, {
          scope: req.scope,
          subscriberId,
          templateId: template.id,
          categoryId: template.categoryId,
          severity: req.severity,
          title: rendered.title,
          body: rendered.text,
          data: req.data,
          actionUrl: req.actionUrl ?? null,
          channels: req.channel,
          publisher: `${publisher.realm}/${publisher.sub}`,
        }))!;
        const data: StreamData = { type: 'created', notification: item };
        const seq = await repo.insertStreamEvent(tx, req.scope, subscriberId, data);
        created = { item, ev: { seq, targetKind: req.scope, target: subscriberId, data } };
      }
      if (req.channel.includes('email')) {
        try {
          await this.mailer.send({ to: req.to.email!, subject: rendered.subject, text: rendered.text, html: rendered.html });
        } catch (err) {
          this.gw.log.error({ err, template: template.id }, 'notification email could not be sent');
          throw internal(`the notification could not be dispatched by email: ${(err as Error).message}; nothing was stored, retry later`);
        }
      }
    });
    if (created) await this.hub.publish(created.ev);
    return { status: 'sent', id: created?.item.id ?? null, channel: req.channel };
  }

  private renderStrict(template: TemplateRecord, data: Record<string, unknown>, actionUrl: string | undefined) {
    try {
      return render(template, data, { strict: true, vars: { actionUrl: this.absolute(actionUrl) } });
    } catch (err) {
      if (err instanceof MissingVariables) throw invalid(`template ${template.id} needs data.${err.names.join(', data.')}`);
      throw internal(`template ${template.id} could not be rendered`);
    }
  }

  private absolute(actionUrl: string | undefined): string {
    return `${this.gw.config.CONSOLE_BASE_URL}${actionUrl ?? '/'}`;
  }

  /** The authorization decision over HTTP; unreachable or unusable -> 502, denied -> 403 (fail closed). */
  private async authorize(body: AuthzRequest): Promise<void> {
    const external = this.gw.config.NOTIFY_AUTHZ_URL;
    const url = external ?? `${this.gw.httpUrl}/internal/notifications/authorize`;
    // our own endpoint wants the internal secret; an external service never sees it
    const headers: Record<string, string> = { 'content-type': 'application/json', ...(external ? {} : { 'x-internal-secret': this.gw.auth.internalSecret }) };
    let res: Response;
    try {
      res = await fetch(url, { method: 'POST', headers, body: JSON.stringify(body), signal: AbortSignal.timeout(AUTHZ_TIMEOUT_MS) });
    } catch (err) {
      this.gw.log.warn({ err: (err as Error).message }, 'notification authorization service unreachable');
      throw upstreamFailed('the authorization service could not be reached; the send is denied (fail closed)');
    }
    let decision: { allow?: unknown; reason?: unknown } | undefined;
    try {
      decision = res.ok ? ((await res.json()) as { allow?: unknown; reason?: unknown }) : undefined;
    } catch {
      decision = undefined;
    }
    if (!decision || typeof decision.allow !== 'boolean') {
      throw upstreamFailed(`the authorization service answered ${res.status} without a decision; the send is denied (fail closed)`);
    }
    if (!decision.allow) {
      throw refused(`the authorization service denied the send${typeof decision.reason === 'string' ? `: ${decision.reason}` : ''}`, { type: 'send-denied' });
    }
  }

  /** The default authorization policy served at /internal/notifications/authorize. */
  defaultDecision(req: AuthzRequest): { allow: boolean; reason?: string } {
    if (!req.publisher.roles.includes('notification-publisher')) return { allow: false, reason: 'publisher lacks the notification-publisher role' };
    // A publisher bound to an account (service account of a tenant) may only address its own account's feed.
    if (req.publisher.accountId && req.publisher.realmKind !== 'platform') {
      if (req.scope === 'tenant' && req.subscriberId !== req.publisher.accountId) return { allow: false, reason: 'an account publisher may only address its own account' };
    }
    return { allow: true };
  }

  // ---------------------------------------------------------------- domain events

  /** Turns a domain event into one tenant-scope notification cluster-wide (unique on the event id). */
  async fromDomainEvent(ev: StoredEvent): Promise<NotificationItem | undefined> {
    const map = EVENT_TEMPLATES[ev.type];
    // the event's account; some events also carry it in the payload (quota decisions, leave gating)
    const payloadAccount = typeof ev.payload.accountId === 'string' && isUuid(ev.payload.accountId) ? ev.payload.accountId.toLowerCase() : undefined;
    const accountId = ev.accountId ?? payloadAccount;
    if (!map || !accountId) return undefined;
    const { template: templateId, severity, actionUrl } = map(ev.payload);
    const template = await repo.template(this.sql, templateId);
    if (!template) return undefined;
    const data = { ...ev.payload } as Record<string, unknown>;
    let stored: Record<string, unknown> = ev.payload;
    if (ev.type === 'thing.revoked') {
      // the device by its serial and model (trust's thingSearch), not its certificate's serial
      const thing = typeof data.thingId === 'string' && isUuid(data.thingId) ? await this.things.describe(accountId, data.thingId).catch(() => undefined) : undefined;
      data.certificateSerial = data.serial ?? 'none';
      data.serial = thing?.serial ?? data.serial ?? data.thingId; // an unknown thing: what the event says
      data.model = thing?.model ?? 'unknown';
      if (thing) stored = { ...ev.payload, deviceSerial: thing.serial, model: thing.model };
    }
    if (Array.isArray(data.deniedRequestIds)) data.deniedRequestIds = (data.deniedRequestIds as unknown[]).join(', ');
    const rendered = render(template, data, { strict: false, vars: { actionUrl: this.absolute(actionUrl) } });
    const n: NewNotification = {
      scope: 'tenant',
      subscriberId: accountId,
      templateId,
      categoryId: template.categoryId,
      severity,
      title: rendered.title,
      body: rendered.text,
      data: stored,
      actionUrl,
      channels: ['in_app'],
      publisher: `event/${ev.type}`,
      sourceEventId: ev.id,
    };
    let out: { item: NotificationItem; seq: number; data: StreamData } | undefined;
    await this.sql.begin(async (tx) => {
      const item = await repo.insertNotification(tx, n);
      if (!item) return; // another node (or an earlier delivery) already made it
      const data: StreamData = { type: 'created', notification: item };
      out = { item, seq: await repo.insertStreamEvent(tx, 'tenant', accountId, data), data };
    });
    if (!out) return undefined;
    await this.hub.publish({ seq: out.seq, targetKind: 'tenant', target: accountId, data: out.data });
    return out.item;
  }

  /**
   * Catch-up for events whose bus delivery was missed (every node down between commit and
   * handling): events of the last day without their notification. Runs at start and hourly.
   */
  async catchUp(): Promise<number> {
    const rows = await this.sql<{ seq: number; id: string; actor_type: string; actor_id: string; type: string; account_id: string | null; payload: Record<string, unknown>; created_at: Date }[]>`
      select e.seq, e.id, e.actor_type, e.actor_id, e.type, e.account_id, e.payload, e.created_at from domain_events e
      where e.created_at > now() - interval '1 day' and e.type in ${this.sql(NOTIFYING_EVENTS)}
        and (e.account_id is not null or e.payload->>'accountId' ~* '^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$')
        and not exists (select 1 from notifications n where n.source_event_id = e.id)
      order by e.seq limit 1000`;
    let made = 0;
    for (const r of rows) {
      const item = await this.fromDomainEvent({ seq: r.seq, id: r.id, actorType: r.actor_type, actorId: r.actor_id, type: r.type, accountId: r.account_id ?? null, payload: r.payload, createdAt: r.created_at.toISOString() });
      if (item) made++;
    }
    return made;
  }

  // ---------------------------------------------------------------- feed

  feed(reader: Reader, q: FeedQuery) {
    return repo.feed(this.sql, reader, q).then((items) => ({ items: items.slice(0, q.limit), limit: q.limit, offset: q.offset, hasMore: items.length > q.limit }));
  }

  unseenCount(reader: Reader) {
    return repo.unseenCount(this.sql, reader);
  }

  async markRead(reader: Reader, id: string): Promise<void> {
    const n = await repo.visible(this.sql, reader, id);
    if (!n) throw notFound(`notification ${id} not found`);
    await repo.markRead(this.sql, reader.sub, n.seq);
  }

  async dismiss(reader: Reader, id: string): Promise<void> {
    const n = await repo.visible(this.sql, reader, id);
    if (!n) throw notFound(`notification ${id} not found`);
    const data: StreamData = { type: 'dismissed', id };
    const seq = await this.sql.begin(async (tx) => {
      await repo.dismiss(tx, reader.sub, n.seq);
      return repo.insertStreamEvent(tx, 'user', reader.sub, data);
    });
    await this.hub.publish({ seq, targetKind: 'user', target: reader.sub, data });
  }

  async readAll(reader: Reader): Promise<void> {
    await repo.markAll(this.sql, reader, 'read_through');
  }

  async dismissAll(reader: Reader): Promise<void> {
    const { seq, data } = await this.sql.begin(async (tx) => {
      const through = await repo.markAll(tx, reader, 'dismissed_through');
      const data: StreamData = { type: 'dismissed-all', accountId: reader.accountId, through };
      return { seq: await repo.insertStreamEvent(tx, 'user', reader.sub, data), data };
    });
    await this.hub.publish({ seq, targetKind: 'user', target: reader.sub, data });
  }

  async categories(acceptLanguage: string | undefined) {
    const rows = await repo.categories(this.sql);
    return { items: rows.map((c) => ({ id: c.id, name: localize(c.names, acceptLanguage), names: c.names })) };
  }

  // ---------------------------------------------------------------- catalogue administration

  templates() {
    return repo.templates(this.sql);
  }

  async putTemplate(t: TemplateRecord, by: string) {
    if (!(await repo.categoryExists(this.sql, t.categoryId))) throw invalid(`category ${t.categoryId} does not exist; create it first (PUT /api/notifications/categories/${t.categoryId})`);
    const r = await repo.upsertTemplate(this.sql, t, by);
    return { created: r.created, template: { ...t, updatedAt: r.updatedAt } };
  }

  async putCategory(id: string, names: Record<string, string>, by: string) {
    const created = await repo.upsertCategory(this.sql, id, names, by);
    return { created, category: { id, name: names.en, names } };
  }

  // ---------------------------------------------------------------- preferences

  preferences(sub: string) {
    return repo.preferences(this.sql, sub);
  }

  async putPreferences(sub: string, p: Preferences) {
    if (p.quietHours && !isTimeZone(p.quietHours.timeZone)) throw invalid(`quietHours.timeZone ${JSON.stringify(p.quietHours.timeZone)} is not an IANA time zone (e.g. Europe/Berlin)`);
    const updatedAt = await repo.putPreferences(this.sql, sub, { ...p, disabledCategories: [...new Set(p.disabledCategories)] });
    return { ...p, disabledCategories: [...new Set(p.disabledCategories)], updatedAt };
  }

  // ---------------------------------------------------------------- streams

  /** A new stream cookie value; only its SHA-256 is stored. */
  async createStreamSession(reader: Reader): Promise<string> {
    const token = crypto.randomBytes(32).toString('base64url');
    await repo.createStreamSession(this.sql, hashToken(token), reader, STREAM_TTL_SECONDS);
    return token;
  }

  async resolveStreamSession(token: string | undefined): Promise<Reader | undefined> {
    if (!token || token.length > 100) return undefined;
    const hash = hashToken(token);
    const row = await repo.streamSession(this.sql, hash);
    if (!row || !crypto.timingSafeEqual(row.token_hash, hash)) return undefined;
    return { sub: row.user_sub, accountId: row.account_id };
  }

  lastStreamSeq() {
    return repo.lastStreamSeq(this.sql);
  }

  streamEventsSince(reader: Reader, since: number) {
    return repo.streamEventsSince(this.sql, reader, since);
  }

  sweep() {
    return repo.sweep(this.sql);
  }
}
