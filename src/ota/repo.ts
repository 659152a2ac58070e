import type { Db } from '../db/client.js';
import type { ThingQuery } from '../gateway.js';

import {
  ACTION_STATUSES, CANCEL, FINAL_STATUSES, OPEN_STATUSES, RELEASE, SKIP, type ActionStatus, type ReportedStatus,
} from '../../machines/otaAction.js';

export { ACTION_STATUSES, type ActionStatus, type ReportedStatus };

// The statuses below come from machines/otaAction.ts, the actions' lifecycle rules: these bulk
// statements apply them, they decide nothing of their own.
const open = OPEN_STATUSES as readonly string[] as string[];
const cancelFrom = CANCEL.from as readonly string[] as string[];
const skipFrom = SKIP.from as readonly string[] as string[];
const final = FINAL_STATUSES as readonly string[] as string[];
const order = ACTION_STATUSES as readonly string[] as string[];

export interface FilterRow { id: string; account_id: string; name: string; query: ThingQuery; created_at: Date; updated_at: Date }

export interface RolloutRow {
  id: string; account_id: string; name: string; filter_id: string | null; query: ThingQuery; version: string; artifact_url: string;
  sha256: string; size: string; success_threshold: number; error_threshold: number; total_targets: number; group_count: number;
  created_at: Date; state: string; current_group: number; started_at: Date | null; ended_at: Date | null;
}

export interface GroupRow {
  id: string; rollout_id: string; index: number; total: number; state: string; succeeded: number; failed: number; skipped: number;
  started_at: Date | null; ended_at: Date | null;
}

export interface ActionRow {
  id: string; rollout_id: string; group_id: string; thing_id: string; status: ActionStatus; progress: number | null;
  reason: string | null; sent_at: Date | null; updated_at: Date;
}

/** What a device is sent: the action and its rollout's software. */
export interface Delivery { id: string; thing_id: string; rollout_id: string; version: string; artifact_url: string; sha256: string; size: string }

export interface Report { actionId: string; thingId: string; status: ReportedStatus; progress: number | null; reason: string | null }

/**
 * Every bulk update of ota_actions locks its rows in id order (a `for update` subquery), so the
 * report writes, the sent times and the group releases of several nodes never deadlock.
 */
export const otaRepo = {
  async filter(db: Db, accountId: string, id: string): Promise<FilterRow | undefined> {
    const [row] = await db<FilterRow[]>`select * from ota_target_filters where id = ${id} and account_id = ${accountId}`;
    return row;
  },

  async rollout(db: Db, accountId: string, id: string, lock = false): Promise<RolloutRow | undefined> {
    const [row] = await db<RolloutRow[]>`
      select * from ota_rollouts where id = ${id} and account_id = ${accountId} ${lock ? db`for update` : db``}`;
    return row;
  },

  async groups(db: Db, rolloutId: string): Promise<GroupRow[]> {
    return db<GroupRow[]>`select * from ota_rollout_groups where rollout_id = ${rolloutId} order by index`;
  },

  /** scheduled -> pending for a group whose machine accepted START; returns how many */
  async releaseGroup(db: Db, groupId: string, at: Date): Promise<number> {
    const r = await db`
      update ota_actions set status = ${RELEASE.to}, updated_at = ${at}
      where id in (select id from ota_actions where group_id = ${groupId} and status = ${RELEASE.from} order by id for update)`;
    return r.count;
  },

  /** the actions no device took up, of a rollout whose machine ended STOPPED or CANCELLED */
  async cancelOpen(db: Db, rolloutId: string, at: Date): Promise<number> {
    const r = await db`
      update ota_actions set status = ${CANCEL.to}, updated_at = ${at}
      where id in (select id from ota_actions where rollout_id = ${rolloutId} and status = any(${cancelFrom}::text[]) order by id for update)`;
    return r.count;
  },

  /**
   * Skips the actions not ended whose thing is revoked (`revoked_at`, the thing actor's projection,
   * read through trust's read model thing_directory, migration 1700), of one group, rollout or
   * thing; returns the groups that had any.
   */
  async skipRevoked(db: Db, of: { groupId: string } | { rolloutId: string } | { thingId: string }, at: Date): Promise<string[]> {
    const scope = 'groupId' in of ? db`a.group_id = ${of.groupId}` : 'rolloutId' in of ? db`a.rollout_id = ${of.rolloutId}` : db`a.thing_id = ${of.thingId}`;
    const rows = await db<{ group_id: string }[]>`
      update ota_actions set status = ${SKIP.to}, reason = ${SKIP.reason}, updated_at = ${at}
      where id in (
        select a.id from ota_actions a join thing_directory t on t.id = a.thing_id
        where ${scope} and a.status = any(${skipFrom}::text[]) and t.revoked_at is not null
        order by a.id for update of a)
      returning group_id`;
    return [...new Set(rows.map((r) => r.group_id))];
  },

  async hasSkipped(db: Db, groupId: string): Promise<boolean> {
    const [row] = await db<{ found: boolean }[]>`select exists (select 1 from ota_actions where group_id = ${groupId} and status = ${SKIP.to}) as found`;
    return row.found;
  },

  /** The counts a group's TALLY carries. */
  async tally(db: Db, groupId: string): Promise<{ succeeded: number; failed: number; skipped: number; finished: number }> {
    const [row] = await db<{ succeeded: number; failed: number; skipped: number; finished: number }[]>`
      select count(*) filter (where status = 'succeeded')::int as succeeded, count(*) filter (where status = 'failed')::int as failed,
        count(*) filter (where status = ${SKIP.to})::int as skipped, count(*) filter (where status = any(${final}::text[]))::int as finished
      from ota_actions where group_id = ${groupId}`;
    return row;
  },

  /** Pending actions of a group with their software (the fan-out when a group starts or the rollout resumes). */
  async pendingOfGroup(db: Db, groupId: string): Promise<Delivery[]> {
    return db<Delivery[]>`
      select a.id, a.thing_id, a.rollout_id, r.version, r.artifact_url, r.sha256, r.size::text as size
      from ota_actions a join ota_rollouts r on r.id = a.rollout_id
      where a.group_id = ${groupId} and a.status = 'pending' order by a.id`;
  },

  /** A device's open actions of rollouts that deliver (RUNNING, or FINISHED with devices still to update). */
  async openForThing(db: Db, thingId: string): Promise<Delivery[]> {
    return db<Delivery[]>`
      select a.id, a.thing_id, a.rollout_id, r.version, r.artifact_url, r.sha256, r.size::text as size
      from ota_actions a join ota_rollouts r on r.id = a.rollout_id
      where a.thing_id = ${thingId} and a.status = any(${open}::text[])
        and r.state in ('RUNNING', 'FINISHED')
      order by r.created_at, a.id`;
  },

  /**
   * Open actions neither sent nor changed since `before`, of rollouts that deliver: the resend
   * sweep (a publish lost with a crash, a device that missed it, a report lost on the way; the
   * device answers a known action from where it stands).
   */
  async unsent(db: Db, before: { pending: Date; started: Date }, limit: number): Promise<Delivery[]> {
    return db<Delivery[]>`
      select a.id, a.thing_id, a.rollout_id, r.version, r.artifact_url, r.sha256, r.size::text as size
      from ota_actions a join ota_rollouts r on r.id = a.rollout_id
      where (
          (a.status = 'pending' and (a.sent_at is null or a.sent_at < ${before.pending}) and a.updated_at < ${before.pending})
          or (a.status in ('delivered', 'downloading', 'installing') and (a.sent_at is null or a.sent_at < ${before.started}) and a.updated_at < ${before.started})
        ) and r.state in ('RUNNING', 'FINISHED')
      order by a.sent_at nulls first limit ${limit}`;
  },

  /** Rows locked in id order, as `applyReports` locks them (no deadlock between the two). */
  async markSent(db: Db, ids: string[], at: Date): Promise<void> {
    if (ids.length === 0) return;
    await db`
      update ota_actions set sent_at = ${at}
      where id in (select id from ota_actions where id = any(${ids}::uuid[]) order by id for update)`;
  },

  /**
   * Applies device reports in one statement: each only to its own thing's action and only where
   * `reportApplies` (machines/otaAction.ts) allows: an open action, moved forward (a late
   * `downloading` never undoes `installing`; a final status is never changed).
   * Returns the groups whose tally may have changed.
   */
  async applyReports(db: Db, reports: Report[], at: Date): Promise<{ groupId: string; rolloutId: string; ended: boolean }[]> {
    if (reports.length === 0) return [];
    return db<{ groupId: string; rolloutId: string; ended: boolean }[]>`
      with v as (
        select * from unnest(${reports.map((r) => r.actionId)}::uuid[], ${reports.map((r) => r.thingId)}::uuid[], ${reports.map((r) => r.status)}::text[],
          ${reports.map((r) => r.progress) as number[]}::int[], ${reports.map((r) => r.reason) as string[]}::text[]) as v(id, thing_id, status, progress, reason)
      ), locked as (select a.id from ota_actions a join v on v.id = a.id order by a.id for update of a)
      update ota_actions a set status = v.status, progress = coalesce(v.progress, a.progress), reason = coalesce(v.reason, a.reason), updated_at = ${at}
      from v
      where a.id = v.id and a.id in (select id from locked) and a.thing_id = v.thing_id and a.status = any(${open}::text[])
        and array_position(${order}::text[], a.status) <= array_position(${order}::text[], v.status)
      returning a.group_id as "groupId", a.rollout_id as "rolloutId", v.status in ('succeeded', 'failed') as ended`;
  },
};
