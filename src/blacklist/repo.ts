import type { Db, Sql, Tx } from '../db/client.js';

/** SQL of the identity blacklist. Every function takes the pool or a transaction: the service decides. */

/** Writers of the change log take this transaction lock first (seq order = commit order). */
const WRITER_LOCK = 7_211_080;

export interface EntryRow {
  model: string;
  sn: string;
  reason: string;
  added_by: string;
  added_at: Date;
  owner_account_id: string | null;
}

export interface ChangeRow {
  seq: number;
  op: 'add' | 'remove';
  model: string;
  sn: string;
  reason: string | null;
  by: string;
  at: Date;
}

export interface SnapshotRow { seq: number; kid: string; entries: number; jws: string; built_at: Date }

/** Serializes writers until commit: a seq is drawn only by the one transaction holding the lock. */
export async function lockWriters(tx: Tx): Promise<void> {
  await tx`select pg_advisory_xact_lock(${WRITER_LOCK})`;
}

/**
 * The model a device or caller names, as things carry it: a registered model's `VID:PID` for a
 * descriptor or a model id, else the name as given. Reads trust's read model model_directory
 * (migration 1700): the blacklist comes before trust in src/domains.ts, so it cannot require
 * trust's model service.
 */
export async function registeredModel(db: Db, ref: { vid: string; pid: string } | { id: string }): Promise<{ descriptor: string; account_id: string } | undefined> {
  const where = 'id' in ref ? db`id = ${ref.id}` : db`vid = ${ref.vid} and pid = ${ref.pid}`;
  const [row] = await db<{ descriptor: string; account_id: string }[]>`select vid || ':' || pid as descriptor, account_id from model_directory where ${where}`;
  return row;
}

export async function entry(db: Db, model: string, sn: string): Promise<EntryRow | undefined> {
  const [row] = await db<EntryRow[]>`select * from blacklist_entries where model = ${model} and sn = ${sn}`;
  return row;
}

/** The first entry of a serial (by model) when no model is given. */
export async function entryBySerial(db: Db, sn: string): Promise<EntryRow | undefined> {
  const [row] = await db<EntryRow[]>`select * from blacklist_entries where sn = ${sn} order by model limit 1`;
  return row;
}

export async function listed(db: Db, model: string, sn: string): Promise<boolean> {
  const rows = await db`select 1 from blacklist_entries where model = ${model} and sn = ${sn}`;
  return rows.length > 0;
}

/** Inserts an entry and its change; false when (model, sn) is already listed (nothing written). */
export async function insertEntry(tx: Tx, e: Omit<EntryRow, 'added_at'> & { at: string }): Promise<boolean> {
  const inserted = await tx`
    insert into blacklist_entries (model, sn, reason, added_by, added_at, owner_account_id)
    values (${e.model}, ${e.sn}, ${e.reason}, ${e.added_by}, ${e.at}, ${e.owner_account_id})
    on conflict do nothing`;
  if (inserted.count === 0) return false;
  await tx`
    insert into blacklist_changes (op, model, sn, reason, by, at, settled)
    values ('add', ${e.model}, ${e.sn}, ${e.reason}, ${e.added_by}, ${e.at}, false)`;
  return true;
}

/** Deletes an entry and records the removal; undefined when it was not listed. */
export async function deleteEntry(tx: Tx, model: string, sn: string, by: string, at: string): Promise<EntryRow | undefined> {
  const [gone] = await tx<EntryRow[]>`delete from blacklist_entries where model = ${model} and sn = ${sn} returning *`;
  if (!gone) return undefined;
  await tx`insert into blacklist_changes (op, model, sn, by, at) values ('remove', ${model}, ${sn}, ${by}, ${at})`;
  return gone;
}

/** One keyset page of active entries, sorted by model, sn. */
export async function page(db: Db, after: { model: string; sn: string } | undefined, limit: number, model?: string): Promise<EntryRow[]> {
  return db<EntryRow[]>`
    select * from blacklist_entries
    where true
      ${after ? db`and (model, sn) > (${after.model}, ${after.sn})` : db``}
      ${model !== undefined ? db`and model = ${model}` : db``}
    order by model, sn
    limit ${limit}`;
}

/** Everything a deltas answer needs, read in one snapshot of the database. */
export async function deltas(sql: Sql, after: number, limit: number): Promise<{ changes: ChangeRow[]; latest: number; prunedThrough: number; firstAt: Date | null }> {
  return sql.begin('isolation level repeatable read read only', async (tx) => {
    const [state] = await tx<{ pruned_through: number; latest: number | null; first_at: Date | null }[]>`
      select l.pruned_through,
        (select max(seq) from blacklist_changes) as latest,
        (select at from blacklist_changes where seq > ${after} order by seq limit 1) as first_at
      from blacklist_log l`;
    const changes = await tx<ChangeRow[]>`
      select seq, op, model, sn, reason, by, at from blacklist_changes where seq > ${after} order by seq limit ${limit}`;
    return { changes, latest: Math.max(state.latest ?? 0, state.pruned_through), prunedThrough: state.pruned_through, firstAt: state.first_at };
  }) as Promise<{ changes: ChangeRow[]; latest: number; prunedThrough: number; firstAt: Date | null }>;
}

/** The whole active list and the change it reflects, from one snapshot of the database. */
export async function everything(sql: Sql): Promise<{ seq: number; entries: EntryRow[] }> {
  return sql.begin('isolation level repeatable read read only', async (tx) => {
    const [{ seq }] = await tx<{ seq: number }[]>`
      select greatest(coalesce((select max(seq) from blacklist_changes), 0), (select pruned_through from blacklist_log)) as seq`;
    const entries = await tx<EntryRow[]>`select * from blacklist_entries order by model, sn`;
    return { seq, entries };
  }) as Promise<{ seq: number; entries: EntryRow[] }>;
}

export async function latestSeq(db: Db): Promise<number> {
  const [{ seq }] = await db<{ seq: number }[]>`
    select greatest(coalesce((select max(seq) from blacklist_changes), 0), (select pruned_through from blacklist_log)) as seq`;
  return seq;
}

/** Stores a snapshot unless a newer one is stored already; true when stored. */
export async function storeSnapshot(db: Db, s: Omit<SnapshotRow, 'built_at'> & { built_at: string }): Promise<boolean> {
  const stored = await db`
    insert into blacklist_snapshot (id, seq, kid, entries, jws, built_at)
    values (true, ${s.seq}, ${s.kid}, ${s.entries}, ${s.jws}, ${s.built_at})
    on conflict (id) do update set seq = excluded.seq, kid = excluded.kid, entries = excluded.entries, jws = excluded.jws, built_at = excluded.built_at
    where blacklist_snapshot.seq <= excluded.seq`;
  return stored.count === 1;
}

export async function snapshot(db: Db): Promise<SnapshotRow | undefined> {
  const [row] = await db<SnapshotRow[]>`select seq, kid, entries, jws, built_at from blacklist_snapshot`;
  return row;
}

export async function snapshotState(db: Db): Promise<{ seq: number; kid: string } | undefined> {
  const [row] = await db<{ seq: number; kid: string }[]>`select seq, kid from blacklist_snapshot`;
  return row;
}

/** Adds whose enforcement is not settled yet, oldest first. */
export async function unsettled(db: Db, limit: number): Promise<ChangeRow[]> {
  return db<ChangeRow[]>`
    select seq, op, model, sn, reason, by, at from blacklist_changes where not settled order by seq limit ${limit}`;
}

export async function settle(db: Db, seq: number): Promise<void> {
  await db`update blacklist_changes set settled = true where seq = ${seq}`;
}

/** Deletes changes made before `cut` (settled ones) and moves the pruning horizon; the number deleted. */
export async function prune(db: Db, cut: string): Promise<number> {
  const [row] = await db<{ n: number }[]>`
    with gone as (delete from blacklist_changes where at < ${cut} and settled returning seq),
    moved as (update blacklist_log set pruned_through = greatest(pruned_through, (select max(seq) from gone)) where exists (select 1 from gone))
    select count(*)::int as n from gone`;
  return row.n;
}
