import crypto from 'node:crypto';
import type { UnitOfWork, ActorResult } from '../actors/store.js';
import type { Sql } from '../db/client.js';
import type { Gateway, ThingSearch } from '../gateway.js';
import { iso } from '../lib/encoding.js';
import { notFound, unprocessable } from '../lib/errors.js';
import type { rolloutMachine, RolloutState } from '../../machines/rollout.js';
import type { RolloutGroupState } from '../../machines/rolloutGroup.js';
import type { TargetFilters } from './filters.js';
import type { OtaSender } from './delivery.js';
import { rolloutGroupKind, rolloutKind } from './kinds.js';
import { ACTION_STATUSES, otaRepo, type ActionRow, type ActionStatus, type GroupRow, type RolloutRow } from './repo.js';

/** most targets one rollout takes (its actions are inserted in one transaction) */
export const MAX_TARGETS = 100_000;

export interface RolloutInput {
  name: string;
  filter_id: string;
  software: { version: string; url: string; sha256: string; size: number };
  /** a number of equal groups, or each group's share in percent (summing to 100) */
  groups: number | number[];
  success_threshold: number;
  error_threshold: number;
}

type Control = 'START' | 'PAUSE' | 'RESUME' | 'CANCEL';
/** what a committed decision leaves to do: groups whose pending actions to publish, groups to evaluate then */
interface Settled { fanout: string[]; evaluate: string[] }

/** The group sizes for `total` targets: equal (the first groups take the remainder) or by percent (the last takes the rounding). */
export function groupSizes(total: number, groups: number | number[]): number[] {
  if (typeof groups === 'number') return Array.from({ length: groups }, (_, i) => Math.floor(total / groups) + (i < total % groups ? 1 : 0));
  const sizes = groups.map((p) => Math.floor((total * p) / 100));
  sizes[sizes.length - 1] += total - sizes.reduce((a, b) => a + b, 0);
  return sizes;
}

const rolloutView = (r: RolloutRow, counts: Record<ActionStatus, number>) => ({
  id: r.id, name: r.name, filter_id: r.filter_id, query: r.query,
  software: { version: r.version, url: r.artifact_url, sha256: r.sha256, size: Number(r.size) },
  groups: r.group_count, success_threshold: r.success_threshold, error_threshold: r.error_threshold,
  total_targets: r.total_targets, state: r.state as RolloutState, current_group: r.current_group < 0 ? null : r.current_group,
  created_at: iso(r.created_at), started_at: iso(r.started_at), ended_at: iso(r.ended_at), actions: counts,
});
const groupView = (g: GroupRow) => ({
  id: g.id, index: g.index, total: g.total, state: g.state as RolloutGroupState, succeeded: g.succeeded, failed: g.failed, skipped: g.skipped, started_at: iso(g.started_at), ended_at: iso(g.ended_at),
});
const actionView = (a: ActionRow & { index: number }) => ({
  id: a.id, thing_id: a.thing_id, group: a.index, status: a.status, progress: a.progress, reason: a.reason, updated_at: iso(a.updated_at),
});

/**
 * Rollouts: created from a target filter (its matched things taken at creation and split into
 * groups), then driven by their machines: controls from tenants, TALLYs from the devices' reports.
 * Every decision runs in one transaction that locks the rollout's actor first (controls,
 * evaluations, on any node), so they serialise per rollout and cannot deadlock. What is to be
 * sent to devices is published after the commit (`fanout`), never before.
 */
export class Rollouts {
  /** `sender` publishes the pending actions of groups (delivery.ts) */
  constructor(private readonly gw: Gateway, private readonly filters: TargetFilters, private readonly things: ThingSearch, private readonly sender: Pick<OtaSender, 'fanout'>) {}

  async create(accountId: string, input: RolloutInput) {
    const filter = await this.filters.row(accountId, input.filter_id);
    const ids = await this.things.ids(accountId, filter.query, MAX_TARGETS + 1);
    if (ids.length === 0) throw unprocessable(`target filter ${filter.id} matches no things: nothing to roll out`);
    if (ids.length > MAX_TARGETS) throw unprocessable(`target filter ${filter.id} matches more than ${MAX_TARGETS} things, the most one rollout takes: narrow it`);
    if (Array.isArray(input.groups) && input.groups.reduce((a, b) => a + b, 0) !== 100) throw unprocessable('group percentages must add up to 100');
    const sizes = groupSizes(ids.length, input.groups);
    if (sizes.some((n) => n === 0)) throw unprocessable(`${ids.length} matched things cannot fill ${sizes.length} groups: use fewer groups or larger shares`);
    const id = crypto.randomUUID();
    const at = this.gw.clock.now();
    await this.gw.actors.run(async (uow) => {
      // the filter may be deleted meanwhile: held until commit, or 404 (never a foreign-key 500)
      const [held] = await uow.sql`select id from ota_target_filters where id = ${filter.id} for share`;
      if (!held) throw notFound(`target filter ${filter.id} not found`);
      const { software: s } = input;
      await uow.sql`
        insert into ota_rollouts (id, account_id, name, filter_id, query, version, artifact_url, sha256, size, success_threshold, error_threshold, total_targets, group_count, created_at)
        values (${id}, ${accountId}, ${input.name}, ${filter.id}, ${uow.sql.json(filter.query as never)}, ${s.version}, ${s.url}, ${s.sha256.toLowerCase()}, ${s.size},
          ${input.success_threshold}, ${input.error_threshold}, ${ids.length}, ${sizes.length}, ${at})`;
      await uow.create(rolloutKind, id, { id, accountId, groups: sizes.length, createdAt: at.toISOString() });
      let offset = 0;
      for (const [index, total] of sizes.entries()) {
        const groupId = crypto.randomUUID();
        await uow.sql`insert into ota_rollout_groups (id, rollout_id, index, total) values (${groupId}, ${id}, ${index}, ${total})`;
        await uow.create(rolloutGroupKind, groupId, {
          id: groupId, rolloutId: id, accountId, index, total, successThreshold: input.success_threshold, errorThreshold: input.error_threshold,
        });
        const members = ids.slice(offset, offset + total);
        offset += total;
        await uow.sql`
          insert into ota_actions (id, rollout_id, group_id, thing_id, updated_at)
          select gen_random_uuid(), ${id}, ${groupId}, t, ${at} from unnest(${members}::uuid[]) as t`;
      }
      // targets revoked since the filter matched them (a filter without revoked:false takes revoked things too)
      await otaRepo.skipRevoked(uow.sql, { rolloutId: id }, at);
    });
    return this.get(accountId, id);
  }

  async get(accountId: string, id: string) {
    const [row] = await this.views(accountId, this.gw.sql`and r.id = ${id}`, 1);
    if (!row) throw notFound(`rollout ${id} not found`);
    return row;
  }

  /** The account's rollouts, newest first. */
  async list(accountId: string, q: { limit: number; state?: string }) {
    return { items: await this.views(accountId, q.state === undefined ? this.gw.sql`` : this.gw.sql`and r.state = ${q.state}`, q.limit) };
  }

  /** Rollouts with their actions counted by status, in one statement. */
  private async views(accountId: string, where: ReturnType<Sql>, limit: number) {
    const rows = await this.gw.sql<(RolloutRow & { counts: Partial<Record<ActionStatus, number>> })[]>`
      select r.*, coalesce((select jsonb_object_agg(c.status, c.n) from (
        select status, count(*)::int as n from ota_actions where rollout_id = r.id group by status) c), '{}') as counts
      from ota_rollouts r where r.account_id = ${accountId} ${where}
      order by r.created_at desc, r.id desc limit ${limit}`;
    return rows.map((r) => rolloutView(r, Object.fromEntries(ACTION_STATUSES.map((s) => [s, r.counts[s] ?? 0])) as Record<ActionStatus, number>));
  }

  async groups(accountId: string, id: string) {
    await this.require(accountId, id);
    return { items: (await otaRepo.groups(this.gw.sql, id)).map(groupView) };
  }

  /** Per-device actions, by id (keyset), optionally of one status or group. */
  async actions(accountId: string, id: string, q: { limit: number; after?: string; status?: ActionStatus; group?: number; thing_id?: string }) {
    await this.require(accountId, id);
    const sql = this.gw.sql;
    const rows = await sql<(ActionRow & { index: number })[]>`
      select a.*, g.index from ota_actions a join ota_rollout_groups g on g.id = a.group_id
      where a.rollout_id = ${id}
        ${q.status === undefined ? sql`` : sql`and a.status = ${q.status}`}
        ${q.group === undefined ? sql`` : sql`and g.index = ${q.group}`}
        ${q.thing_id === undefined ? sql`` : sql`and a.thing_id = ${q.thing_id}`}
        ${q.after === undefined ? sql`` : sql`and a.id > ${q.after}`}
      order by a.id limit ${q.limit + 1}`;
    const items = rows.slice(0, q.limit).map(actionView);
    return { items, next_cursor: rows.length > q.limit ? items[items.length - 1].id : null };
  }

  /** START, PAUSE, RESUME or CANCEL from a tenant; 409 when the rollout's state refuses it. */
  async control(accountId: string, id: string, type: Control) {
    const toSend = await this.gw.actors.run(async (uow) => {
      if (!(await otaRepo.rollout(uow.sql, accountId, id))) throw notFound(`rollout ${id} not found`);
      return this.settle(uow, await uow.send(rolloutKind, id, { type, at: this.gw.clock.now().toISOString() }));
    });
    await this.started(toSend);
    return this.get(accountId, id);
  }

  /**
   * A thing was revoked (on any node: idempotent): its actions not ended are skipped and their
   * groups evaluated, since a group may now reach its threshold over the targets that can answer.
   */
  async revoked(thingId: string): Promise<void> {
    const groupIds = await otaRepo.skipRevoked(this.gw.sql, { thingId }, this.gw.clock.now());
    for (const groupId of groupIds) await this.evaluate(groupId);
  }

  /**
   * Counts a group's actions and lets its machine decide (TALLY); a group that ends tells the
   * rollout, which may start the next group, finish, or stop. Actions of targets revoked meanwhile
   * are skipped first (a revocation whose event was lost is caught here, by the sweep).
   * Idempotent: the same counts change nothing. Called after device reports, revocations, a
   * group's start and by the sweep.
   */
  async evaluate(groupId: string): Promise<void> {
    const toSend = await this.gw.actors.run(async (uow) => {
      const [group] = await uow.sql<{ rollout_id: string; index: number }[]>`select rollout_id, index from ota_rollout_groups where id = ${groupId}`;
      if (!group) return { fanout: [], evaluate: [] };
      // the rollout's lock first, as in `control`
      await uow.load(rolloutKind, group.rollout_id);
      const now = this.gw.clock.now();
      await otaRepo.skipRevoked(uow.sql, { groupId }, now);
      const counts = await otaRepo.tally(uow.sql, groupId);
      const at = now.toISOString();
      const tallied = await uow.trySend(rolloutGroupKind, groupId, { type: 'TALLY', at, ...counts });
      if ('refused' in tallied || !tallied.events.some((e) => e.type === 'ota.group.ended')) return { fanout: [], evaluate: [] };
      const type = tallied.state === 'FINISHED' ? 'GROUP_SUCCEEDED' : 'GROUP_FAILED';
      const rollout = await uow.trySend(rolloutKind, group.rollout_id, { type, at, index: group.index });
      return 'refused' in rollout ? { fanout: [], evaluate: [] } : this.settle(uow, rollout);
    });
    await this.started(toSend);
  }

  /**
   * After the commit that started (or resumed) groups: publishes their pending actions, then
   * evaluates the started groups that hold skipped targets, so a group that can already end (all
   * its targets revoked) does not wait for a report that will not come (each group ends once:
   * this recursion is bounded by the groups).
   */
  private async started(settled: Settled): Promise<void> {
    await this.sender.fanout(settled.fanout);
    for (const groupId of settled.evaluate) await this.evaluate(groupId);
  }

  /** The running groups (of rollouts not over): the sweep tallies them in case a report's evaluation was lost. */
  async runningGroups(): Promise<string[]> {
    const rows = await this.gw.sql<{ id: string }[]>`
      select g.id from ota_rollout_groups g join ota_rollouts r on r.id = g.rollout_id
      where g.state = 'RUNNING' and r.state in ('RUNNING', 'PAUSED')`;
    return rows.map((r) => r.id);
  }

  private async require(accountId: string, id: string): Promise<void> {
    if (!(await otaRepo.rollout(this.gw.sql, accountId, id))) throw notFound(`rollout ${id} not found`);
  }

  /**
   * What the rollout's new state means for its groups and actions (same transaction): RUNNING
   * starts its current group (a no-op when it runs) and returns it for the fan-out; STOPPED and
   * CANCELLED cancel the groups and the actions not yet taken up by a device.
   */
  private async settle(uow: UnitOfWork, rollout: ActorResult<typeof rolloutMachine>): Promise<Settled> {
    const { id, current } = rollout.snapshot.context;
    const at = this.gw.clock.now();
    const groups = await otaRepo.groups(uow.sql, id);
    if (rollout.state === 'RUNNING') {
      const group = groups[current];
      const started = await uow.trySend(rolloutGroupKind, group.id, { type: 'START', at: at.toISOString() });
      if ('refused' in started) return { fanout: [group.id], evaluate: [] };
      await otaRepo.releaseGroup(uow.sql, group.id, at);
      // targets revoked before the group started were skipped then: it may end without any report
      return { fanout: [group.id], evaluate: (await otaRepo.hasSkipped(uow.sql, group.id)) ? [group.id] : [] };
    }
    if (rollout.state === 'STOPPED' || rollout.state === 'CANCELLED') {
      for (const g of groups) await uow.trySend(rolloutGroupKind, g.id, { type: 'CANCEL', at: at.toISOString() });
      await otaRepo.cancelOpen(uow.sql, id, at);
    }
    return { fanout: [], evaluate: [] };
  }
}
