import type { Db } from '../db/client.js';
import type { FeedQuery, NotificationItem, Preferences, Severity, StreamData } from './schemas.js';
import type { TemplateRecord } from './templates.js';

/** Who reads: the user's subject and, when they belong to it, the account of X-Account-Id. */
export interface Reader {
  sub: string;
  accountId: string | null;
}

interface NotificationRow {
  seq: number;
  id: string;
  scope: 'user' | 'tenant';
  subscriber_id: string;
  template_id: string;
  category_id: string;
  severity: Severity;
  title: string;
  body: string;
  data: Record<string, unknown>;
  action_url: string | null;
  created_at: Date;
  is_read?: boolean;
  is_dismissed?: boolean;
}

export interface NewNotification {
  scope: 'user' | 'tenant';
  subscriberId: string;
  templateId: string;
  categoryId: string;
  severity: Severity;
  title: string;
  body: string;
  data: Record<string, unknown>;
  actionUrl: string | null;
  channels: string[];
  publisher: string | null;
  sourceEventId?: string;
}

export function toItem(r: NotificationRow): NotificationItem {
  return {
    id: r.id,
    scope: r.scope,
    accountId: r.scope === 'tenant' ? r.subscriber_id : null,
    template: r.template_id,
    categoryId: r.category_id,
    severity: r.severity,
    title: r.title,
    body: r.body,
    data: r.data ?? {},
    actionUrl: r.action_url,
    createdAt: new Date(r.created_at).toISOString(),
    read: Boolean(r.is_read),
    dismissed: Boolean(r.is_dismissed),
  };
}

/** SQL of the notifications domain; callers pass the pool or a transaction. */
export const repo = {
  async seed(db: Db, categories: { id: string; names: Record<string, string> }[], templates: TemplateRecord[]): Promise<void> {
    for (const c of categories) {
      await db`insert into notification_categories (id, names, created_by) values (${c.id}, ${db.json(c.names)}, 'seed') on conflict (id) do nothing`;
    }
    for (const t of templates) {
      await db`insert into notification_templates (id, category_id, subject, title, body_text, body_html, created_by)
        values (${t.id}, ${t.categoryId}, ${t.subject}, ${t.title}, ${t.bodyText}, ${t.bodyHtml}, 'seed') on conflict (id) do nothing`;
    }
  },

  async template(db: Db, id: string): Promise<(TemplateRecord & { updatedAt: string }) | undefined> {
    const [r] = await db<{ id: string; category_id: string; subject: string; title: string; body_text: string; body_html: string; updated_at: Date }[]>`
      select id, category_id, subject, title, body_text, body_html, updated_at from notification_templates where id = ${id}`;
    return r && { id: r.id, categoryId: r.category_id, subject: r.subject, title: r.title, bodyText: r.body_text, bodyHtml: r.body_html, updatedAt: r.updated_at.toISOString() };
  },

  async templates(db: Db): Promise<(TemplateRecord & { updatedAt: string })[]> {
    const rows = await db<{ id: string; category_id: string; subject: string; title: string; body_text: string; body_html: string; updated_at: Date }[]>`
      select id, category_id, subject, title, body_text, body_html, updated_at from notification_templates order by id`;
    return rows.map((r) => ({ id: r.id, categoryId: r.category_id, subject: r.subject, title: r.title, bodyText: r.body_text, bodyHtml: r.body_html, updatedAt: r.updated_at.toISOString() }));
  },

  async upsertTemplate(db: Db, t: TemplateRecord, by: string): Promise<{ created: boolean; updatedAt: string }> {
    const [r] = await db<{ created: boolean; updated_at: Date }[]>`
      insert into notification_templates (id, category_id, subject, title, body_text, body_html, created_by)
      values (${t.id}, ${t.categoryId}, ${t.subject}, ${t.title}, ${t.bodyText}, ${t.bodyHtml}, ${by})
      on conflict (id) do update set category_id = excluded.category_id, subject = excluded.subject, title = excluded.title,
        body_text = excluded.body_text, body_html = excluded.body_html, updated_at = now()
      returning (xmax = 0) as created, updated_at`;
    return { created: r.created, updatedAt: r.updated_at.toISOString() };
  },

  async categories(db: Db): Promise<{ id: string; names: Record<string, string> }[]> {
    return db<{ id: string; names: Record<string, string> }[]>`select id, names from notification_categories order by id`;
  },

  async categoryExists(db: Db, id: string): Promise<boolean> {
    const [r] = await db`select 1 from notification_categories where id = ${id}`;
    return Boolean(r);
  },

  async upsertCategory(db: Db, id: string, names: Record<string, string>, by: string): Promise<boolean> {
    const [r] = await db<{ created: boolean }[]>`
      insert into notification_categories (id, names, created_by) values (${id}, ${db.json(names)}, ${by})
      on conflict (id) do update set names = excluded.names, updated_at = now()
      returning (xmax = 0) as created`;
    return r.created;
  },

  async preferences(db: Db, sub: string): Promise<(Preferences & { updatedAt: string | null })> {
    const [r] = await db<{ global_mute: boolean; disabled_categories: string[]; quiet_hours: Preferences['quietHours']; updated_at: Date }[]>`
      select global_mute, disabled_categories, quiet_hours, updated_at from notification_preferences where user_sub = ${sub}`;
    if (!r) return { globalMute: false, disabledCategories: [], quietHours: null, updatedAt: null };
    return { globalMute: r.global_mute, disabledCategories: r.disabled_categories, quietHours: r.quiet_hours ?? null, updatedAt: r.updated_at.toISOString() };
  },

  async putPreferences(db: Db, sub: string, p: Preferences): Promise<string> {
    const [r] = await db<{ updated_at: Date }[]>`
      insert into notification_preferences (user_sub, global_mute, disabled_categories, quiet_hours)
      values (${sub}, ${p.globalMute}, ${p.disabledCategories}, ${p.quietHours ? db.json(p.quietHours) : null})
      on conflict (user_sub) do update set global_mute = excluded.global_mute, disabled_categories = excluded.disabled_categories,
        quiet_hours = excluded.quiet_hours, updated_at = now()
      returning updated_at`;
    return r.updated_at.toISOString();
  },

  /** Inserts a notification; undefined when its source event was already turned into one. */
  async insertNotification(db: Db, n: NewNotification): Promise<NotificationItem | undefined> {
    const [r] = await db<NotificationRow[]>`
      insert into notifications (scope, subscriber_id, template_id, category_id, severity, title, body, data, action_url, channels, publisher, source_event_id)
      values (${n.scope}, ${n.subscriberId}, ${n.templateId}, ${n.categoryId}, ${n.severity}, ${n.title}, ${n.body}, ${db.json(n.data as never)},
        ${n.actionUrl}, ${n.channels}, ${n.publisher}, ${n.sourceEventId ?? null})
      on conflict (source_event_id) do nothing
      returning seq, id, scope, subscriber_id, template_id, category_id, severity, title, body, data, action_url, created_at`;
    return r && toItem(r);
  },

  async insertStreamEvent(db: Db, targetKind: 'user' | 'tenant', target: string, data: StreamData): Promise<number> {
    const [r] = await db<{ seq: number }[]>`
      insert into notification_stream_events (target_kind, target, data) values (${targetKind}, ${target}, ${db.json(data as never)}) returning seq`;
    return r.seq;
  },

  async streamEventsSince(db: Db, reader: Reader, since: number, limit = 1000): Promise<{ seq: number; data: StreamData }[]> {
    return db<{ seq: number; data: StreamData }[]>`
      select seq, data from notification_stream_events
      where seq > ${since} and ((target_kind = 'user' and target = ${reader.sub})
        ${reader.accountId ? db`or (target_kind = 'tenant' and target = ${reader.accountId})` : db``})
      order by seq limit ${limit}`;
  },

  async lastStreamSeq(db: Db): Promise<number> {
    const [r] = await db<{ seq: number | null }[]>`select max(seq) as seq from notification_stream_events`;
    return r.seq ?? 0;
  },

  async feed(db: Db, reader: Reader, q: FeedQuery): Promise<NotificationItem[]> {
    const filter: BranchFilter = { read: q.read, includeDismissed: q.dismissed === 'true', severity: q.severity };
    const take = q.offset + q.limit + 1;
    const rows = await db<NotificationRow[]>`
      ${marksCte(db, reader)}
      select v.* from marks m, lateral (
        (${branch(db, reader.sub, 'user', reader.sub, filter)} order by n.seq desc limit ${take})
        ${reader.accountId ? db`union all (${branch(db, reader.sub, 'tenant', reader.accountId, filter)} order by n.seq desc limit ${take})` : db``}
      ) v
      order by v.seq desc
      limit ${q.limit + 1} offset ${q.offset}`;
    return rows.map(toItem);
  },

  async unseenCount(db: Db, reader: Reader): Promise<number> {
    const filter: BranchFilter = { read: 'false', includeDismissed: false };
    const [r] = await db<{ count: number }[]>`
      ${marksCte(db, reader)}
      select count(*)::int as count from marks m, lateral (
        ${branch(db, reader.sub, 'user', reader.sub, filter)}
        ${reader.accountId ? db`union all ${branch(db, reader.sub, 'tenant', reader.accountId, filter)}` : db``}
      ) v`;
    return r.count;
  },

  /** The notification if the reader may see it (own user-scope, or tenant-scope of their account). */
  async visible(db: Db, reader: Reader, id: string): Promise<{ seq: number; scope: 'user' | 'tenant'; subscriber_id: string } | undefined> {
    const [r] = await db<{ seq: number; scope: 'user' | 'tenant'; subscriber_id: string }[]>`
      select seq, scope, subscriber_id from notifications
      where id = ${id} and ((scope = 'user' and subscriber_id = ${reader.sub})
        ${reader.accountId ? db`or (scope = 'tenant' and subscriber_id = ${reader.accountId})` : db``})`;
    return r;
  },

  async markRead(db: Db, sub: string, seq: number): Promise<void> {
    await db`insert into notification_receipts (user_sub, notification_seq, read_at) values (${sub}, ${seq}, now())
      on conflict (user_sub, notification_seq) do update set read_at = coalesce(notification_receipts.read_at, now())`;
  },

  /** true when it was not dismissed before */
  async dismiss(db: Db, sub: string, seq: number): Promise<void> {
    await db`insert into notification_receipts (user_sub, notification_seq, dismissed_at) values (${sub}, ${seq}, now())
      on conflict (user_sub, notification_seq) do update set dismissed_at = coalesce(notification_receipts.dismissed_at, now())`;
  },

  /**
   * read-all / dismiss-all: one statement that moves the reader's watermark(s) to the newest
   * notification; cost independent of how many notifications there are. Returns the watermark.
   */
  async markAll(db: Db, reader: Reader, column: 'read_through' | 'dismissed_through'): Promise<number> {
    const keys = reader.accountId ? ['', reader.accountId] : [''];
    const col = db(column);
    const [r] = await db<{ through: number }[]>`
      insert into notification_marks (user_sub, scope_key, ${col})
      select ${reader.sub}, k, (select coalesce(max(seq), 0) from notifications) from unnest(${keys}::text[]) as k
      on conflict (user_sub, scope_key) do update set ${col} = greatest(notification_marks.${col}, excluded.${col})
      returning ${col} as through`;
    return r?.through ?? 0;
  },

  async createStreamSession(db: Db, tokenHash: Buffer, reader: Reader, ttlSeconds: number): Promise<void> {
    await db`delete from notification_stream_sessions where expires_at < now() - interval '1 hour'`;
    await db`insert into notification_stream_sessions (token_hash, user_sub, account_id, expires_at)
      values (${tokenHash}, ${reader.sub}, ${reader.accountId}, now() + make_interval(secs => ${ttlSeconds}))`;
  },

  async streamSession(db: Db, tokenHash: Buffer): Promise<{ token_hash: Buffer; user_sub: string; account_id: string | null } | undefined> {
    const [r] = await db<{ token_hash: Buffer; user_sub: string; account_id: string | null }[]>`
      select token_hash, user_sub, account_id from notification_stream_sessions where token_hash = ${tokenHash} and expires_at > now()`;
    return r;
  },

  async sweep(db: Db): Promise<void> {
    await db`delete from notification_stream_events where created_at < now() - interval '1 day'`;
    await db`delete from notification_stream_sessions where expires_at < now() - interval '1 hour'`;
  },
};

interface BranchFilter {
  read: 'true' | 'false' | 'all';
  includeDismissed: boolean;
  severity?: Severity[];
}

/** `with marks as (...)`: the reader's read-all / dismiss-all watermarks (one row, zeros when none). */
function marksCte(db: Db, reader: Reader) {
  const acc = reader.accountId ?? '';
  return db`
    with marks as (
      select
        coalesce(max(read_through) filter (where scope_key = ''), 0) as ru,
        coalesce(max(dismissed_through) filter (where scope_key = ''), 0) as du,
        coalesce(max(read_through) filter (where scope_key = ${acc} and scope_key <> ''), 0) as rt,
        coalesce(max(dismissed_through) filter (where scope_key = ${acc} and scope_key <> ''), 0) as dt
      from notification_marks where user_sub = ${reader.sub}
    )`;
}

/**
 * One scope's notifications of the reader with their per-user state: read / dismissed when a
 * receipt says so or when at or below the scope's watermark (`m` = the marks row). Unread and
 * not-dismissed filters bound the index range by the watermark, so after read-all or dismiss-all
 * only newer rows are visited.
 */
function branch(db: Db, sub: string, scope: 'user' | 'tenant', subscriber: string, f: BranchFilter) {
  const rw = scope === 'user' ? db`m.ru` : db`m.rt`;
  const dw = scope === 'user' ? db`m.du` : db`m.dt`;
  return db`
    select n.seq, n.id, n.scope, n.subscriber_id, n.template_id, n.category_id, n.severity, n.title, n.body, n.data, n.action_url, n.created_at,
      (r.read_at is not null or n.seq <= ${rw}) as is_read,
      (r.dismissed_at is not null or n.seq <= ${dw}) as is_dismissed
    from notifications n
    left join notification_receipts r on r.user_sub = ${sub} and r.notification_seq = n.seq
    where n.scope = ${scope} and n.subscriber_id = ${subscriber}
      ${f.includeDismissed ? db`` : db`and n.seq > ${dw} and r.dismissed_at is null`}
      ${f.read === 'false' ? db`and n.seq > ${rw} and r.read_at is null` : f.read === 'true' ? db`and (n.seq <= ${rw} or r.read_at is not null)` : db``}
      ${f.severity ? db`and n.severity = any(${f.severity})` : db``}`;
}
