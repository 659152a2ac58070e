import type { Db, Sql } from '../db/client.js';
import { conflict, DomainError, invalid, notFound } from '../lib/errors.js';
import { iso } from '../lib/encoding.js';
import { isUuid } from '../http/auth/principal.js';
import type { ThingQuery, ThingSearch, ThingSummary } from '../gateway.js';
import type { ActorStore } from '../actors/store.js';
import { isoNow, type Clock } from '../lib/clock.js';
import { claimGroupKind, type ClaimGroupStatus } from './kinds.js';
import type { ThingScope } from './lifecycle.js';
import type { ThingState } from '../../machines/thing.js';

/**
 * The fleet registry read model (issue 18, item 1): things of an account listed with filters and
 * keyset pages, one thing's full view, tags, and claim groups listed. It reads trust's tables and,
 * for connectivity, twin versions and latest telemetry, the read models the broker publishes
 * (views device_status, device_twin_versions, device_latest_telemetry, migration 1701), never the
 * broker's tables; it does not import the broker domain.
 */

export const SORTS = ['created_at', '-created_at', 'last_seen', '-last_seen'] as const;
export type Sort = (typeof SORTS)[number];
export const TAG_PATTERN = /^[A-Za-z0-9][A-Za-z0-9_.:-]{0,63}$/;
export const MAX_TAGS_PER_THING = 50;
/**
 * A list answer counts its matches exactly up to this many (a count stopped at the threshold: an
 * index range scan of at most this many rows per page); above it the answer carries
 * `total_estimate`, the planner's row estimate, and `total: null`.
 */
export const EXACT_TOTAL_LIMIT = 10_000;

/** Which things of the scope a query matches (the list's filters; OTA target filters use them too). */
export interface ThingFilter {
  /** a prefix of the serial (any case) or of the thing id */
  q?: string;
  state?: ThingState[];
  /** model id (uuid) or vid:pid descriptor */
  model?: string;
  claim_group?: string;
  connected?: boolean;
  revoked?: boolean;
  last_seen_before?: string;
  last_seen_after?: string;
  tags?: string[];
}

export interface ThingListQuery extends ThingFilter {
  limit: number;
  cursor?: string;
  sort: Sort;
}

/**
 * The opaque cursor: the sort it belongs to, the last item's sort key as Postgres prints it (text
 * keeps the microseconds a JS Date would lose) and its id. The next page starts strictly after
 * (key, id), so an insert during paging never shifts the items not yet seen.
 */
interface Cursor { s: Sort; k: string; i: string }
const PG_TIMESTAMP = /^(-infinity|\d{4}-\d\d-\d\d \d\d:\d\d:\d\d(\.\d{1,6})?[+-]\d\d(:\d\d){0,2})$/;

export function encodeCursor(c: Cursor): string {
  return Buffer.from(JSON.stringify(c)).toString('base64url');
}

export function decodeCursor(raw: string, sort: Sort): Cursor {
  let c: Partial<Cursor>;
  try { c = JSON.parse(Buffer.from(raw, 'base64url').toString('utf8')); } catch { throw invalid('cursor is not a cursor this API returned'); }
  if (!c || typeof c !== 'object' || typeof c.k !== 'string' || !PG_TIMESTAMP.test(c.k) || typeof c.i !== 'string' || !isUuid(c.i) || !SORTS.includes(c.s as Sort)) {
    throw invalid('cursor is not a cursor this API returned');
  }
  if (c.s !== sort) throw invalid(`cursor belongs to sort=${c.s}, not sort=${sort}: send the same sort with its cursor`);
  return c as Cursor;
}

interface ThingRow {
  id: string; model_id: string | null; model: string; manufacturer: string; serial: string; metadata: Record<string, unknown>;
  state: ThingState; state_updated_at: Date | null; claim_group_id: string | null; enrolled_by: string | null; enrolled_at: Date | null;
  revoked_at: Date | null; created_at: Date; sort_key: string; tags: string[];
  cert_serial: string | null; cert_not_after: Date | null; cert_revoked: boolean | null;
  connected: boolean | null; connected_at: Date | null; disconnected_at: Date | null; last_seen: Date | null; protocol_version: number | null; node_id: string | null;
}

interface ThingDetailRow extends ThingRow {
  reported_version: number | null; reported_at: Date | null; desired_version: number | null; desired_at: Date | null;
  telemetry: Record<string, unknown> | null; telemetry_at: Date | null;
}

export class RegistryService {
  /** `actors` and `clock`: the claimGroup machines decide expiry in the claim group list */
  constructor(private readonly sql: Sql, private readonly actors: ActorStore, private readonly clock: Clock) {}

  async list(scope: ThingScope, q: ThingListQuery) {
    const after = q.cursor === undefined ? undefined : decodeCursor(q.cursor, q.sort);
    const [rows, counted] = await Promise.all([
      registryRepo.list(this.sql, scope, q, after),
      registryRepo.count(this.sql, scope, q, EXACT_TOTAL_LIMIT + 1),
    ]).catch(badDate);
    const page = rows.slice(0, q.limit);
    const last = page[page.length - 1];
    const exact = counted <= EXACT_TOTAL_LIMIT;
    return {
      items: page.map(present),
      next_cursor: rows.length > q.limit ? encodeCursor({ s: q.sort, k: last.sort_key, i: last.id }) : null,
      total: exact ? counted : null,
      ...(exact ? {} : { total_estimate: Math.max(counted, await registryRepo.estimate(this.sql, scope, q)) }),
    };
  }

  /** How many things of the scope match. */
  async count(scope: ThingScope, q: ThingFilter): Promise<number> {
    return registryRepo.count(this.sql, scope, q).catch(badDate);
  }

  /** The ids of the matched things, oldest first (at most `max`). */
  async ids(scope: ThingScope, q: ThingFilter, max: number): Promise<string[]> {
    return registryRepo.ids(this.sql, scope, q, max).catch(badDate);
  }

  async get(scope: ThingScope, id: string) {
    const row = isUuid(id) ? await registryRepo.get(this.sql, scope, id) : undefined;
    if (!row) throw notFound(`thing ${id} not found`);
    return {
      ...present(row),
      metadata: row.metadata,
      connectivity: row.connected === null ? null : {
        connected: row.connected, connected_at: iso(row.connected_at), disconnected_at: iso(row.disconnected_at),
        last_seen: iso(row.last_seen), protocol_version: row.protocol_version, node: row.node_id,
      },
      twin: row.reported_version === null ? null : {
        reported_version: row.reported_version, reported_at: iso(row.reported_at), desired_version: row.desired_version!, desired_at: iso(row.desired_at),
      },
      telemetry: row.telemetry === null ? null : { values: row.telemetry, updated_at: iso(row.telemetry_at) },
    };
  }

  /** Adds a tag (idempotent); 409 beyond MAX_TAGS_PER_THING. The thing's row lock serialises the count. */
  async tag(scope: ThingScope, id: string, tag: string) {
    checkTag(tag);
    return this.sql.begin(async (tx) => {
      await lockThing(tx, scope, id);
      const [{ n }] = await tx<{ n: number }[]>`select count(*)::int as n from thing_tags where thing_id = ${id} and tag <> ${tag}`;
      if (n >= MAX_TAGS_PER_THING) throw conflict(`thing ${id} has ${MAX_TAGS_PER_THING} tags, the most it may have: remove one first`);
      await tx`insert into thing_tags (thing_id, tag) values (${id}, ${tag}) on conflict do nothing`;
      return { thing_id: id, tags: await tagsOf(tx, id) };
    });
  }

  /** Removes a tag (idempotent: an absent tag is no error). */
  async untag(scope: ThingScope, id: string, tag: string) {
    checkTag(tag);
    return this.sql.begin(async (tx) => {
      await lockThing(tx, scope, id);
      await tx`delete from thing_tags where thing_id = ${id} and tag = ${tag}`;
      return { thing_id: id, tags: await tagsOf(tx, id) };
    });
  }

  /**
   * The account's claim groups, keyset pages by id (their rows: the claimGroup actors' projection).
   * The status is the machine's state, or `expired` where the machine would accept EXPIRE now (the
   * injected clock): a TTL that passed since the group's last event, not yet recorded by the sweep.
   */
  async claimGroups(accountId: string, q: { limit: number; after?: string }) {
    const rows = await this.sql<{ id: string; name: string; max_devices: number; ttl_days: number; created_at: Date; expires_at: Date | null; consumed: number; state: ClaimGroupStatus }[]>`
      select id, name, max_devices, ttl_days, created_at, expires_at, consumed, state from claim_groups
      where account_id = ${accountId} ${q.after === undefined ? this.sql`` : this.sql`and id > ${q.after}`}
      order by id limit ${q.limit + 1}`;
    const page = rows.slice(0, q.limit);
    const status = await this.claimGroupStatus(page);
    const items = page.map((r, i) => ({
      id: r.id, name: r.name, maxDevices: r.max_devices, ttlDays: r.ttl_days, createdAt: iso(r.created_at), expiresAt: iso(r.expires_at),
      consumed: r.consumed, status: status[i], revoked: status[i] === 'revoked',
    }));
    return { items, next_cursor: rows.length > q.limit ? items[items.length - 1].id : null };
  }

  /** Each group's status now: its machine asked, for the groups whose projected expiry has passed (the others keep their state). */
  private async claimGroupStatus(rows: { id: string; expires_at: Date | null; state: ClaimGroupStatus }[]): Promise<ClaimGroupStatus[]> {
    const at = isoNow(this.clock);
    return Promise.all(rows.map(async (r) => {
      const due = (r.state === 'active' || r.state === 'capped') && r.expires_at !== null && r.expires_at.getTime() <= Date.parse(at);
      if (!due) return r.state;
      const group = await this.actors.get(claimGroupKind, r.id);
      return group?.snapshot.can({ type: 'EXPIRE', at }) ? 'expired' : (group?.state as ClaimGroupStatus | undefined) ?? r.state;
    }));
  }
}

/**
 * A timestamp the patterns let through but Postgres refuses (2026-02-30, a forged cursor's key) is
 * a 400; timestamps go as text and are cast in SQL, so a cursor keeps Postgres' microseconds.
 */
function badDate(err: { code?: string }): never {
  if (err?.code === '22007' || err?.code === '22008') throw invalid('a timestamp in last_seen_before, last_seen_after or the cursor is not a valid date');
  throw err;
}

/** The registry's filters as the declared `thingSearch` service (OTA target filters). */
export function thingSearch(registry: RegistryService): ThingSearch {
  const filter = (q: ThingQuery): ThingFilter => ({ ...q, state: q.state as ThingState[] | undefined });
  const summary = (t: ReturnType<typeof present>): ThingSummary => ({
    id: t.id, model: t.model, serial: t.serial, state: t.state, tags: t.tags, connected: t.connected, last_seen: t.last_seen,
  });
  return {
    page: async (accountId, q, page) => {
      const { items, next_cursor } = await registry.list({ accountId }, { ...filter(q), ...page, sort: 'created_at' });
      return { items: items.map(summary), next_cursor };
    },
    count: (accountId, q) => registry.count({ accountId }, filter(q)),
    ids: (accountId, q, max) => registry.ids({ accountId }, filter(q), max),
    describe: async (accountId, thingId) => {
      const t = await registry.get({ accountId }, thingId).catch((err: unknown) => {
        if (err instanceof DomainError && err.kind === 'not_found') return undefined;
        throw err;
      });
      return t && summary(t);
    },
  };
}

function checkTag(tag: string): void {
  if (!TAG_PATTERN.test(tag)) throw invalid(`tag ${JSON.stringify(tag.slice(0, 80))} must be 1-64 characters of A-Z a-z 0-9 _ . : - starting with a letter or digit`);
}

async function lockThing(tx: Db, scope: ThingScope, id: string): Promise<void> {
  const [row] = isUuid(id) ? await tx`
    select id from things where id = ${id} and account_id = ${scope.accountId}
      ${scope.modelId === undefined ? tx`` : tx`and model_id = ${scope.modelId}`}
    for update` : [];
  if (!row) throw notFound(`thing ${id} not found`);
}

async function tagsOf(db: Db, id: string): Promise<string[]> {
  return (await db<{ tag: string }[]>`select tag from thing_tags where thing_id = ${id} order by tag`).map((r) => r.tag);
}

function present(r: ThingRow) {
  return {
    id: r.id, model_id: r.model_id, model: r.model, manufacturer: r.manufacturer, serial: r.serial,
    state: r.state, state_updated_at: iso(r.state_updated_at), claim_group_id: r.claim_group_id,
    enrolled_by: r.enrolled_by, enrolled_at: iso(r.enrolled_at), revoked: r.revoked_at !== null, revoked_at: iso(r.revoked_at),
    created_at: iso(r.created_at), tags: r.tags,
    connected: r.connected ?? false, last_seen: iso(r.last_seen),
    certificate: r.cert_serial === null ? null : { serial: r.cert_serial, not_after: iso(r.cert_not_after)!, revoked: r.cert_revoked! },
  };
}

/** The sort key of a sort, as an expression over things t and device_status c (never null, so keyset comparison is total). */
const sortKey = (db: Db, sort: Sort) => sort.endsWith('last_seen') ? db`coalesce(c.last_seen, '-infinity'::timestamptz)` : db`t.created_at`;

const columns = (db: Db, sort: Sort) => db`
  t.id, t.model_id, t.model, t.manufacturer, t.serial, t.metadata, t.lifecycle_state as state, t.lifecycle_updated_at as state_updated_at,
  t.claim_group_id, t.enrolled_by, t.enrolled_at, t.revoked_at, t.created_at, (${sortKey(db, sort)})::text as sort_key,
  coalesce((select array_agg(g.tag order by g.tag) from thing_tags g where g.thing_id = t.id), '{}') as tags,
  cert.serial as cert_serial, cert.not_after as cert_not_after, cert.revoked as cert_revoked,
  c.connected, c.connected_at, c.disconnected_at, c.last_seen, c.protocol_version, c.node_id`;
/**
 * the thing's newest certificate; its connectivity (the broker's read model device_status, migration
 * 1701, keyed by the thing id as text)
 */
const joins = (db: Db) => db`
  left join lateral (select serial, not_after, revoked from device_certificates where thing_id = t.id order by created_at desc limit 1) cert on true
  left join device_status c on c.thing_id = t.id::text`;

/** The filters of a list query, as a where clause over things t and device_status c. */
function matches(db: Db, scope: ThingScope, q: ThingFilter) {
  const text = q.q === undefined || q.q === '' ? undefined : q.q;
  const like = text === undefined ? '' : `${text.replace(/[\\%_]/g, (c) => `\\${c}`)}%`;
  /**
   * `starts with`: a range in text_pattern_ops order (~>=~, ~<~), which a prepared statement's
   * generic plan can still scan on the index (a LIKE with a parameter it cannot), the LIKE for
   * exactness. U+10FFFF sorts after any character a serial holds.
   */
  const startsWith = (column: ReturnType<Db>) => db`(${column} ~>=~ lower(${text!}) and ${column} ~<~ (lower(${text!}) || ${'\u{10FFFF}'}) and ${column} like lower(${like}))`;
  // the id's prefix only where the text could start a uuid (indexes of migration 1850)
  const search = text === undefined ? db`` : /^[0-9a-f-]+$/i.test(text)
    ? db`and (${startsWith(db`lower(t.serial)`)} or ${startsWith(db`t.id::text`)})`
    : db`and ${startsWith(db`lower(t.serial)`)}`;
  const byModel = q.model === undefined ? db`` : isUuid(q.model) ? db`and t.model_id = ${q.model}` : db`and t.model = ${q.model}`;
  return db`t.account_id = ${scope.accountId}
    ${scope.modelId === undefined ? db`` : db`and t.model_id = ${scope.modelId}`}
    ${search}
    ${q.state === undefined ? db`` : db`and t.lifecycle_state = any(${q.state})`}
    ${byModel}
    ${q.claim_group === undefined ? db`` : db`and t.claim_group_id = ${q.claim_group}`}
    ${q.connected === undefined ? db`` : q.connected ? db`and c.connected` : db`and coalesce(c.connected, false) = false`}
    ${q.revoked === undefined ? db`` : q.revoked ? db`and t.revoked_at is not null` : db`and t.revoked_at is null`}
    ${q.last_seen_before === undefined ? db`` : db`and c.last_seen < ${q.last_seen_before}::text::timestamptz`}
    ${q.last_seen_after === undefined ? db`` : db`and c.last_seen >= ${q.last_seen_after}::text::timestamptz`}
    ${q.tags === undefined ? db`` : db`and t.id in (
      select g.thing_id from thing_tags g where g.tag = any(${q.tags}) group by g.thing_id having count(*) = ${q.tags.length})`}`;
}

const registryRepo = {
  async list(db: Db, scope: ThingScope, q: ThingListQuery, after: Cursor | undefined): Promise<ThingRow[]> {
    const desc = q.sort.startsWith('-');
    const key = sortKey(db, q.sort);
    return db<ThingRow[]>`
      select ${columns(db, q.sort)} from things t ${joins(db)}
      where ${matches(db, scope, q)}
        ${after === undefined ? db`` : desc
          ? db`and (${key}, t.id) < (${after.k}::text::timestamptz, ${after.i}::uuid)`
          : db`and (${key}, t.id) > (${after.k}::text::timestamptz, ${after.i}::uuid)`}
      order by ${key} ${desc ? db`desc` : db`asc`}, t.id ${desc ? db`desc` : db`asc`}
      limit ${q.limit + 1}`;
  },
  /** the matches counted, stopping at `max` when given */
  async count(db: Db, scope: ThingScope, q: ThingFilter, max?: number): Promise<number> {
    const [{ n }] = max === undefined
      ? await db<{ n: number }[]>`
        select count(*)::int as n from things t left join device_status c on c.thing_id = t.id::text where ${matches(db, scope, q)}`
      : await db<{ n: number }[]>`
        select count(*)::int as n from (select 1 from things t left join device_status c on c.thing_id = t.id::text where ${matches(db, scope, q)} limit ${max}) m`;
    return n;
  },
  /** the planner's estimate of the matches (no scan) */
  async estimate(db: Db, scope: ThingScope, q: ThingFilter): Promise<number> {
    const [row] = await db<{ 'QUERY PLAN': [{ Plan: { 'Plan Rows': number } }] }[]>`
      explain (format json) select 1 from things t left join device_status c on c.thing_id = t.id::text where ${matches(db, scope, q)}`;
    return Math.round(row['QUERY PLAN'][0].Plan['Plan Rows']);
  },
  async ids(db: Db, scope: ThingScope, q: ThingFilter, max: number): Promise<string[]> {
    const rows = await db<{ id: string }[]>`
      select t.id from things t left join device_status c on c.thing_id = t.id::text
      where ${matches(db, scope, q)} order by t.created_at, t.id limit ${max}`;
    return rows.map((r) => r.id);
  },
  async get(db: Db, scope: ThingScope, id: string): Promise<ThingDetailRow | undefined> {
    const [row] = await db<ThingDetailRow[]>`
      select ${columns(db, 'created_at')}, w.reported_version, w.reported_at, w.desired_version, w.desired_at,
        l.telemetry, l.updated_at as telemetry_at
      from things t ${joins(db)}
        left join device_twin_versions w on w.thing_id = t.id::text
        left join device_latest_telemetry l on l.thing_id = t.id::text
      where t.id = ${id} and t.account_id = ${scope.accountId}
        ${scope.modelId === undefined ? db`` : db`and t.model_id = ${scope.modelId}`}`;
    return row;
  },
};
