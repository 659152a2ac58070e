import type { Db, Sql, Tx } from '../db/client.js';
import type { Position, Scope } from './cursor.js';

/**
 * SQL of the feed domain. The log is `domain_events` (thing.enrolled and thing.stateChanged rows,
 * the view thing_state_changes of migration 0601). Things and factory services are other modules':
 * read through the views they publish (trust's thing_directory, migration 1700; the factory's
 * factory_service_directory, migration 1703): the model and serial of a change, the models a
 * registrar serves.
 */

export interface ChangeRow {
  seq: string;
  xid: string;
  thing_id: string;
  account_id: string;
  /** the change as the thing machine emitted it (payload members from, to, event, at) */
  from_state: string;
  to_state: string;
  event: string;
  at: string;
  model_id: string | null;
  model: string | null;
  manufacturer: string | null;
  serial: string | null;
}

/** The things of the models a registrar serves: those of its account's factory services bound to it. */
const inScope = (db: Db, scope: Scope) => scope.registrarId === null
  ? db``
  : db`and t.model_id in (select f.model_id from factory_service_directory f where f.account_id = ${scope.accountId} and f.registrar_id = ${scope.registrarId})`;

/** the log's rows (the condition of the partial indexes of migration 0900) */
const thingChange = (db: Db) => db`e.actor_type = 'thing' and e.type in ('thing.stateChanged', 'thing.enrolled')`;

/**
 * One page of a scope's changes after `from`, in log order, and the horizon: the oldest
 * transaction still running when the page was read. Only changes of transactions below it are
 * served, so nothing can later commit behind a cursor (migration 0900). `limit + 1` rows tell
 * whether more follow.
 */
export async function changesPage(db: Db, scope: Scope, from: Position, limit: number): Promise<{ horizon: bigint; rows: ChangeRow[] }> {
  const rows = await db<(ChangeRow & { horizon: string })[]>`
    with h as materialized (select pg_snapshot_xmin(pg_current_snapshot()) as xmin)
    select h.xmin::text as horizon, c.* from h left join lateral (
      select e.seq::text as seq, e.xid::text as xid, e.actor_id as thing_id, e.account_id,
        e.payload ->> 'from' as from_state, e.payload ->> 'to' as to_state, e.payload ->> 'event' as event, e.payload ->> 'at' as at,
        t.model_id, t.model, t.manufacturer, t.serial
      from domain_events e left join thing_directory t on t.id = e.actor_id::uuid
      where e.account_id = ${scope.accountId} and ${thingChange(db)}
        and (e.xid, e.seq) > (${from.xid.toString()}::xid8, ${from.seq.toString()}::bigint)
        and e.xid < h.xmin
        ${inScope(db, scope)}
      order by e.xid, e.seq
      limit ${limit + 1}
    ) c on true`;
  return { horizon: BigInt(rows[0].horizon), rows: rows[0].seq === null ? [] : rows };
}

/** The current horizon alone (the feed position a full sync resumes from). */
export async function horizon(db: Db): Promise<bigint> {
  const [row] = await db<{ xmin: string }[]>`select pg_snapshot_xmin(pg_current_snapshot())::text as xmin`;
  return BigInt(row.xmin);
}

export interface ThingRow {
  id: string;
  model_id: string | null;
  model: string;
  manufacturer: string;
  serial: string;
  state: string;
  updated_at: Date;
}

/** Full-sync keyset: a thing's identity in the account (unique: index things_identity). */
export interface ThingKey { manufacturer: string; model: string; serial: string }

/** Full sync: the scope's things (born, i.e. not merely REGISTERED), keyset by identity (index things_identity). */
export async function thingsPage(db: Db, scope: Scope, after: ThingKey | undefined, limit: number): Promise<ThingRow[]> {
  return db<ThingRow[]>`
    select t.id, t.model_id, t.model, t.manufacturer, t.serial, t.lifecycle_state as state, coalesce(t.lifecycle_updated_at, t.created_at) as updated_at
    from thing_directory t
    where t.account_id = ${scope.accountId} and t.lifecycle_state <> 'REGISTERED'
      ${after ? db`and (t.manufacturer, t.model, t.serial) > (${after.manufacturer}, ${after.model}, ${after.serial})` : db``}
      ${inScope(db, scope)}
    order by t.manufacturer, t.model, t.serial limit ${limit}`;
}

// --- subscriptions

export interface SubscriptionRow {
  id: string;
  account_id: string;
  registrar_id: string | null;
  target_url: string;
  event_filter: { new_states?: string[]; thing_ids?: string[] } | null;
  secret_sealed: Buffer;
  status: 'ACTIVE' | 'SUSPENDED' | 'DELETED';
  consecutive_failures: number;
  suspended_at: Date | null;
  suspended_reason: string | null;
  created_by: string;
  created_at: Date;
  updated_at: Date;
}

export interface NewSubscription {
  id: string;
  account_id: string;
  registrar_id: string | null;
  target_url: string;
  event_filter: SubscriptionRow['event_filter'];
  secret_sealed: Buffer;
  created_by: string;
  created_at: Date;
}

const filterColumns = (f: SubscriptionRow['event_filter']) => ({
  event_filter: f,
  new_states: f?.new_states ?? null,
  thing_ids: f?.thing_ids ?? null,
});

export async function insertSubscription(db: Tx, s: NewSubscription): Promise<void> {
  const { event_filter, new_states, thing_ids } = filterColumns(s.event_filter);
  await db`
    insert into state_change_subscriptions (id, account_id, registrar_id, target_url, event_filter, new_states, thing_ids, secret_sealed, created_by, created_at, updated_at)
    values (${s.id}, ${s.account_id}, ${s.registrar_id}, ${s.target_url}, ${event_filter === null ? null : db.json(event_filter as never)},
      ${new_states}, ${thing_ids}, ${s.secret_sealed}, ${s.created_by}, ${s.created_at}, ${s.created_at})`;
}

export async function findSubscription(db: Db, accountId: string, id: string): Promise<SubscriptionRow | undefined> {
  const [row] = await db<SubscriptionRow[]>`select * from state_change_subscriptions where id = ${id} and account_id = ${accountId} and status <> 'DELETED'`;
  return row;
}

export async function listSubscriptions(db: Db, accountId: string, afterId: string | undefined, limit: number): Promise<SubscriptionRow[]> {
  return db<SubscriptionRow[]>`
    select * from state_change_subscriptions where account_id = ${accountId} and status <> 'DELETED'
      ${afterId ? db`and id > ${afterId}` : db``}
    order by id limit ${limit}`;
}

/** An edit: the target and/or the filter (each kept as it is when not given); never a column of the subscription's machine. */
export async function updateSubscription(db: Tx, id: string, changes: { target_url?: string; event_filter?: SubscriptionRow['event_filter'] }, at: Date): Promise<void> {
  const filter = changes.event_filter === undefined ? undefined : filterColumns(changes.event_filter);
  const json = filter?.event_filter ? db.json(filter.event_filter as never) : null;
  await db`
    update state_change_subscriptions set updated_at = ${at},
      target_url = coalesce(${changes.target_url ?? null}, target_url),
      event_filter = case when ${filter !== undefined} then ${json}::jsonb else event_filter end,
      new_states = case when ${filter !== undefined} then ${filter?.new_states ?? null}::text[] else new_states end,
      thing_ids = case when ${filter !== undefined} then ${filter?.thing_ids ?? null}::uuid[] else thing_ids end
    where id = ${id}`;
}

/** A deleted subscription's row goes with its pending deliveries (cascade); its actor goes through the store. */
export async function purgeSubscription(db: Tx, id: string): Promise<void> {
  await db`delete from state_change_subscriptions where id = ${id}`;
}

// --- dispatch: the log turned into deliveries, account by account

export interface DispatchCandidate {
  id: string;
  account_id: string;
  registrar_id: string | null;
  new_states: string[] | null;
  thing_ids: string[] | null;
  /** the models its registrar serves (registrar-bound subscriptions only) */
  registrar_models: string[] | null;
}

/**
 * The account's dispatch cursor moves to the end of the log (the horizon) unless another of its
 * subscriptions is ACTIVE: called in the transaction that makes a subscription ACTIVE.
 */
export async function startDispatchIfIdle(tx: Tx, accountId: string, subscriptionId: string): Promise<void> {
  await tx`
    insert into feed_dispatch_cursors (account_id, xid, seq)
    select ${accountId}, (pg_snapshot_xmin(pg_current_snapshot())::text::numeric - 1)::text::xid8, 9223372036854775807
    where not exists (select 1 from state_change_subscriptions where account_id = ${accountId} and status = 'ACTIVE' and id <> ${subscriptionId})
    on conflict (account_id) do update set xid = excluded.xid, seq = excluded.seq, updated_at = now()`;
}

/** Accounts with an ACTIVE subscription and a change after their cursor below the horizon (no lock). */
export async function accountsToDispatch(db: Db, limit: number): Promise<string[]> {
  const rows = await db<{ account_id: string }[]>`select c.account_id ${cursorsWithChanges(db, 'below')} limit ${limit}`;
  return rows.map((r) => r.account_id);
}

/**
 * Are changes waiting past an account's dispatch cursor but not yet below the horizon (held back by
 * a transaction still running, in any database of the server)? The dispatcher then keeps looking
 * often: nothing else wakes it when the horizon moves on.
 */
export async function changesHeldBack(db: Db): Promise<boolean> {
  const [row] = await db<{ held: boolean }[]>`select exists (select 1 ${cursorsWithChanges(db, 'held back')}) as held`;
  return row.held;
}

/** The dispatch cursors (`c`) of accounts with an ACTIVE subscription and thing changes past the cursor, below the horizon or held back. */
const cursorsWithChanges = (db: Db, horizon: 'below' | 'held back') => db`
  from feed_dispatch_cursors c
  where exists (select 1 from state_change_subscriptions s where s.account_id = c.account_id and s.status = 'ACTIVE')
    and exists (
      select 1 from domain_events e
      where e.account_id = c.account_id and ${thingChange(db)} and (e.xid, e.seq) > (c.xid, c.seq)
        and ${horizon === 'below' ? db`e.xid < pg_snapshot_xmin(pg_current_snapshot())` : db`e.xid >= pg_snapshot_xmin(pg_current_snapshot())`})`;

/** Locks an account's dispatch cursor, or undefined when another node holds it. */
export async function lockDispatchCursor(tx: Tx, accountId: string): Promise<Position | undefined> {
  const [row] = await tx<{ xid: string; seq: string }[]>`
    select xid::text, seq::text from feed_dispatch_cursors where account_id = ${accountId} for update skip locked`;
  return row ? { xid: BigInt(row.xid), seq: BigInt(row.seq) } : undefined;
}

export async function moveDispatchCursor(tx: Tx, accountId: string, p: Position): Promise<void> {
  await tx`update feed_dispatch_cursors set xid = ${p.xid.toString()}::xid8, seq = ${p.seq.toString()}::bigint, updated_at = now() where account_id = ${accountId}`;
}

export async function activeSubscriptionsOf(tx: Tx, accountId: string): Promise<DispatchCandidate[]> {
  return tx<DispatchCandidate[]>`
    select s.id, s.account_id, s.registrar_id, s.new_states, s.thing_ids,
      case when s.registrar_id is null then null else array(
        select f.model_id from factory_service_directory f where f.account_id = s.account_id and f.registrar_id = s.registrar_id) end as registrar_models
    from state_change_subscriptions s
    where s.status = 'ACTIVE' and s.account_id = ${accountId}`;
}

/** New deliveries, due at once (`next_attempt_at` and `created_at`: the gateway clock's now). */
export async function insertDeliveries(tx: Tx, rows: { id: string; subscription_id: string; event_seq: string; body: string; next_attempt_at: Date; created_at: Date }[]): Promise<number> {
  if (rows.length === 0) return 0;
  const r = await tx`insert into webhook_deliveries ${tx(rows)} on conflict (subscription_id, event_seq) do nothing`;
  return r.count;
}

// --- delivery

/**
 * A subscription works on its oldest pending deliveries only, this many: its retries come before
 * the first attempts of newer changes (so a dead receiver's deliveries run out of attempts on
 * their schedule, whatever its backlog), and what a claim reads of one subscription is bounded.
 */
export const PENDING_WINDOW = 1000;

/** A delivery the claim may take at `now`: due, its lease not held (none, or lapsed: a crashed node's), not in flight here. */
const claimable = (db: Db, now: Date, inFlight: string[]) =>
  db`x.next_attempt_at <= ${now} and (x.lease_until is null or x.lease_until < ${now}) and x.id <> all(${inFlight}::uuid[])`;

/** The oldest PENDING_WINDOW deliveries of the subscription in `column` (of the outer query), in change order. */
const windowOf = (db: Db, column: string) => db`(
  select d.id, d.event_seq, d.next_attempt_at, d.lease_until from webhook_deliveries d
  where d.subscription_id = ${db(column)} order by d.event_seq limit ${PENDING_WINDOW}) x`;

export interface DueDemand {
  account_id: string;
  subscription_id: string;
  /** claimable deliveries in its window, counted up to `upTo` */
  due: number;
}

/**
 * The ACTIVE subscriptions with claimable deliveries, and how many (up to `upTo`): what the
 * fair shares are computed from (src/feed/shares.ts). One index probe per ACTIVE subscription
 * (unique (subscription_id, event_seq)), reading at most its window.
 */
export async function dueDemand(db: Db, o: { now: Date; inFlight: string[]; upTo: number }): Promise<DueDemand[]> {
  return db<DueDemand[]>`
    select s.account_id, s.id as subscription_id, w.due from state_change_subscriptions s
    cross join lateral (
      select count(*)::int as due from (select 1 from ${windowOf(db, 's.id')} where ${claimable(db, o.now, o.inFlight)} limit ${o.upTo}) y
    ) w
    where s.status = 'ACTIVE' and w.due > 0`;
}

export interface ClaimedDelivery {
  id: string;
  subscription_id: string;
  account_id: string;
  body: string;
  /** this attempt's number (1 = first) */
  attempts: number;
  target_url: string;
  secret_sealed: Buffer;
  consecutive_failures: number;
}

/**
 * Leases `n` claimable deliveries of each picked subscription, the oldest of its window first,
 * until `leaseUntil`. The update re-checks the lease of each row, so two nodes never claim the
 * same delivery (one may get fewer than it asked for).
 */
export async function claimDeliveries(sql: Sql, o: { picks: Map<string, number>; now: Date; leaseUntil: Date; inFlight: string[] }): Promise<ClaimedDelivery[]> {
  if (o.picks.size === 0) return [];
  return sql<ClaimedDelivery[]>`
    with want as (select * from unnest(${[...o.picks.keys()]}::uuid[], ${[...o.picks.values()]}::int[]) as w(subscription_id, n)),
    pick as (
      select p.id from want w cross join lateral (
        select x.id from ${windowOf(sql, 'w.subscription_id')} where ${claimable(sql, o.now, o.inFlight)} order by x.event_seq limit w.n
      ) p
    )
    update webhook_deliveries d set lease_until = ${o.leaseUntil}, attempts = d.attempts + 1
    from state_change_subscriptions s
    where d.id in (select id from pick) and s.id = d.subscription_id and s.status = 'ACTIVE'
      and (d.lease_until is null or d.lease_until < ${o.now})
    returning d.id, d.subscription_id, s.account_id, d.body, d.attempts, s.target_url, s.secret_sealed, s.consecutive_failures`;
}

export async function deleteDelivery(db: Db, id: string): Promise<void> {
  await db`delete from webhook_deliveries where id = ${id}`;
}

export async function deliveriesDone(db: Db, ids: string[]): Promise<void> {
  if (ids.length) await db`delete from webhook_deliveries where id = any(${ids}::uuid[])`;
}

export async function retryLater(db: Db, id: string, at: Date, lastStatus: number | null, lastError: string): Promise<void> {
  await db`
    update webhook_deliveries set lease_until = null, next_attempt_at = ${at}, last_status = ${lastStatus}, last_error = ${lastError.slice(0, 500)}
    where id = ${id}`;
}

/** An attempt cut short by a stopping node goes back to the queue as it was: not counted. */
export async function releaseDelivery(db: Db, id: string): Promise<void> {
  await db`update webhook_deliveries set lease_until = null, attempts = greatest(0, attempts - 1) where id = ${id}`;
}

/** A suspended subscription's pending deliveries are dropped (best effort: polling stays mandatory). */
export async function dropPending(db: Db, subscriptionId: string): Promise<number> {
  const r = await db`delete from webhook_deliveries where subscription_id = ${subscriptionId}`;
  return r.count;
}

/**
 * When the next delivery the claim could take is due (ms from `now`, the gateway clock's, else the
 * database's; 0 when one is due now), or
 * undefined when none is pending: rows of ACTIVE subscriptions whose lease is not held (none, or
 * lapsed: a crashed node's) and not in flight here, as the claim takes them; a row leased by a
 * live attempt comes back through that attempt, or through the poll once its lease lapses.
 * `greatest(0, null)` is 0 in PostgreSQL, so the empty case is kept apart: an empty table once
 * read as "due now" and the worker claimed every 5 ms while idle.
 */
export async function nextDueInMs(db: Db, now?: Date, inFlight: string[] = []): Promise<number | undefined> {
  const at = now ? db`${now}::timestamptz` : db`now()`;
  const [row] = await db<{ ms: number | null }[]>`
    select (extract(epoch from (
      select x.next_attempt_at from webhook_deliveries x
      join state_change_subscriptions s on s.id = x.subscription_id and s.status = 'ACTIVE'
      where (x.lease_until is null or x.lease_until < ${at}) and x.id <> all(${inFlight}::uuid[])
      order by x.next_attempt_at limit 1
    ) - ${at}) * 1000)::float8 as ms`;
  return row.ms === null ? undefined : Math.max(0, row.ms);
}
