import type { ActorStore } from '../actors/store.js';
import type { Sql } from '../db/client.js';
import type { BlacklistedIdentity, IdentityBlacklist } from '../gateway.js';
import type { Logger } from '../log.js';
import type { Clock } from '../lib/clock.js';
import { iso } from '../lib/encoding.js';
import { conflict, gone, invalid, notFound, refused } from '../lib/errors.js';
import { isUuid } from '../http/auth/principal.js';
import { deltaCursor, pageCursor, readDeltaCursor, readPageCursor } from './cursor.js';
import type { SnapshotStore } from './snapshot.js';
import type { ListIndex } from './listIndex.js';
import * as repo from './repo.js';

/** Deltas are kept this long; a cursor whose next change is older gets 410 (spec, Limits). */
export const DELTA_LIFETIME_MS = 72 * 3600_000;
/** How often a node brings its copy of the list up to date without a notification. */
export const TICK_MS = 60_000;
/**
 * An add is enforced again by the sweep until this long after it: it catches enrollments that
 * checked before the add (or on a node whose copy was up to TICK_MS behind) and committed later.
 */
export const SETTLE_AFTER_MS = 2 * TICK_MS + 30_000;
export const SWEEP_JOB = 'blacklist.sweep';

/** Who acts: a platform operator, or a user (or factory service) of an account. */
export interface Caller {
  sub: string;
  accountId?: string;
  platform: boolean;
}

export interface EntryView { model: string; sn: string; reason: string; added_by: string; added_at: string }

export interface ChangeView { op: 'add' | 'remove'; model: string; sn: string; reason: string | null; by: string; at: string }

const view = (e: Omit<repo.EntryRow, 'owner_account_id'>): EntryView => ({ model: e.model, sn: e.sn, reason: e.reason, added_by: e.added_by, added_at: iso(e.added_at) });

/** `vid:pid`, 4 hex digits each (what firmware sends; models are unique by it). */
function descriptor(ref: string): { vid: string; pid: string } | undefined {
  const m = /^([0-9a-f]{4}):([0-9a-f]{4})$/i.exec(ref.trim());
  return m ? { vid: m[1].toUpperCase(), pid: m[2].toUpperCase() } : undefined;
}

/**
 * The identity blacklist: entries keyed by (model, sn), a change log in commit order for deltas,
 * a signed snapshot of the whole list, and enforcement (enrollment asks `isListed`; an add
 * revokes the identity's enrolled things through the listeners later domains register).
 */
export class BlacklistService implements IdentityBlacklist {
  private readonly listeners: ((identity: BlacklistedIdentity) => Promise<number>)[] = [];

  constructor(private readonly d: { sql: Sql; actors: ActorStore; clock: Clock; log: Logger; snapshots: SnapshotStore; index: ListIndex }) {}

  // --- the service other domains use

  onAdded(listener: (identity: BlacklistedIdentity) => Promise<number>): void {
    this.listeners.push(listener);
  }

  /**
   * Enrollment's question, answered from this node's copy of the list (Postgres until it is
   * loaded), so it costs an enrollment no round trip. A node that has not heard of an add yet
   * (milliseconds; at most TICK_MS when notifications are lost) lets the identity through; the
   * add's enforcement then revokes it: at once, and by the sweep until SETTLE_AFTER_MS.
   */
  async isListed(model: string, serial: string): Promise<boolean> {
    const canonical = await this.canonical(model);
    const known = this.d.index.lookup(serial, canonical);
    return known === undefined ? repo.listed(this.d.sql, canonical, serial) : known !== null;
  }

  async refuseListed(model: string, serial: string): Promise<void> {
    if (await this.isListed(model, serial)) {
      throw refused(`serial ${serial} of model ${await this.canonical(model)} is on the identity blacklist: enrollment refused`, { type: 'identity-blacklisted' });
    }
  }

  /**
   * The model as things carry it (trust stores the same): a descriptor in upper case, a model
   * id as its registered model's descriptor, anything else as given. Only an id costs a query.
   */
  private async canonical(ref: string): Promise<string> {
    const d = descriptor(ref);
    if (d) return `${d.vid}:${d.pid}`;
    if (isUuid(ref)) return (await repo.registeredModel(this.d.sql, { id: ref.toLowerCase() }))?.descriptor ?? ref;
    return ref;
  }

  /** The canonical model and the account owning it (none for a model that is not registered). */
  private async owned(ref: string): Promise<{ model: string; owner?: string }> {
    const d = descriptor(ref);
    const registered = d ? await repo.registeredModel(this.d.sql, d) : isUuid(ref) ? await repo.registeredModel(this.d.sql, { id: ref.toLowerCase() }) : undefined;
    if (registered) return { model: registered.descriptor, owner: registered.account_id };
    return { model: d ? `${d.vid}:${d.pid}` : ref };
  }

  /** Platform operators manage every entry; an account only those of the models it owns. */
  private mayManage(caller: Caller, model: string, owner: string | undefined): void {
    if (caller.platform) return;
    if (owner && caller.accountId === owner) return;
    throw refused(owner
      ? `only the account that owns model ${model} or a platform operator may change its blacklist entries`
      : `model ${model} is not a registered model; only a platform operator may change its blacklist entries`);
  }

  // --- management

  async add(caller: Caller, input: { model: string; sn: string; reason: string }): Promise<EntryView & { revoked_things: number }> {
    const { model, owner } = await this.owned(input.model);
    this.mayManage(caller, model, owner);
    const entry = await this.d.actors.run(async (uow) => {
      await repo.lockWriters(uow.sql);
      // taken under the lock: change times follow seq order
      const at = this.d.clock.now().toISOString();
      const row = { model, sn: input.sn, reason: input.reason, added_by: caller.sub, owner_account_id: owner ?? null };
      if (!(await repo.insertEntry(uow.sql, { ...row, at }))) throw conflict(`serial ${input.sn} of model ${model} is already on the identity blacklist`);
      await uow.emit('identityBlacklist', `${model}/${input.sn}`, { type: 'blacklist.added', model, sn: input.sn, by: caller.sub }, owner ?? null);
      return { ...row, added_at: new Date(at) };
    });
    this.d.log.info({ model, sn: input.sn, by: caller.sub }, 'identity blacklisted');
    // this node's enrollments refuse it from here on; then what enrolled before is revoked
    await this.catchUp();
    const revoked = await this.enforce({ model, sn: input.sn, by: caller.sub }).catch((err: unknown) => {
      // committed: the sweep enforces it again within a minute
      this.d.log.error({ err, model, sn: input.sn }, 'blacklist enforcement failed; the sweep retries');
      return 0;
    });
    await this.rebuildSnapshot();
    return { ...view(entry), revoked_things: revoked };
  }

  async remove(caller: Caller, modelRef: string, sn: string): Promise<void> {
    const { model, owner } = await this.owned(modelRef);
    this.mayManage(caller, model, owner);
    await this.d.actors.run(async (uow) => {
      await repo.lockWriters(uow.sql);
      const removed = await repo.deleteEntry(uow.sql, model, sn, caller.sub, this.d.clock.now().toISOString());
      if (!removed) throw notFound(`serial ${sn} of model ${model} is not on the identity blacklist`);
      await uow.emit('identityBlacklist', `${model}/${sn}`, { type: 'blacklist.removed', model, sn, by: caller.sub }, owner ?? null);
    });
    this.d.log.info({ model, sn, by: caller.sub }, 'identity removed from the blacklist');
    await this.catchUp();
    await this.rebuildSnapshot();
  }

  // --- reads

  async list(query: { limit: number; after?: string; model?: string }): Promise<{ items: EntryView[]; next_cursor: string | null }> {
    const after = query.after === undefined ? undefined : readPageCursor(query.after);
    if (query.after !== undefined && !after) throw invalid('after is not a next_cursor of this list');
    const model = query.model === undefined ? undefined : await this.canonical(query.model);
    const rows = await repo.page(this.d.sql, after, query.limit + 1, model);
    const items = rows.slice(0, query.limit);
    return { items: items.map(view), next_cursor: rows.length > query.limit ? pageCursor(items[items.length - 1]) : null };
  }

  /**
   * A serial on the global blacklist; with a model, that (model, sn) entry only. Answered from
   * this node's copy of the list (Postgres until it is loaded).
   */
  async check(sn: string, model?: string): Promise<EntryView> {
    const canonical = model === undefined ? undefined : await this.canonical(model);
    let row = this.d.index.lookup(sn, canonical);
    if (row === undefined) row = (canonical === undefined ? await repo.entryBySerial(this.d.sql, sn) : await repo.entry(this.d.sql, canonical, sn)) ?? null;
    if (!row) throw notFound(`serial ${sn}${model === undefined ? '' : ` of model ${model}`} is not on the identity blacklist`);
    return view(row);
  }

  async deltas(cursor: string, limit: number): Promise<{ items: ChangeView[]; next_cursor: string; has_more: boolean }> {
    const after = readDeltaCursor(cursor);
    if (after === undefined) throw invalid('cursor is malformed: resume from a previous next_cursor or from the cursor of snapshot.signed');
    const r = await repo.deltas(this.d.sql, after, limit + 1);
    if (after > r.latest) throw invalid('cursor is not one this gateway issued: resume from the cursor of snapshot.signed');
    const horizon = this.d.clock.now().getTime() - DELTA_LIFETIME_MS;
    if (after < r.prunedThrough || (r.firstAt && r.firstAt.getTime() < horizon)) {
      throw gone('cursor is older than 72 hours: fetch snapshot.signed and resume from its cursor');
    }
    const changes = r.changes.slice(0, limit);
    return {
      items: changes.map((c) => ({ op: c.op, model: c.model, sn: c.sn, reason: c.reason, by: c.by, at: iso(c.at) })),
      next_cursor: deltaCursor(changes.length ? changes[changes.length - 1].seq : after),
      has_more: r.changes.length > limit,
    };
  }

  // --- enforcement and upkeep

  private async enforce(identity: BlacklistedIdentity): Promise<number> {
    let changed = 0;
    for (const listener of this.listeners) changed += await listener(identity);
    return changed;
  }

  /** After a change committed: this node's copy of the list (checks, enrollment) follows it before the write answers. */
  private async catchUp(): Promise<void> {
    await this.d.index.catchUp().catch((err: unknown) => this.d.log.error({ err }, 'blacklist index could not catch up; the next tick retries'));
  }

  /** After a change committed: the snapshot follows it (a failure is the sweep's to repair). */
  private async rebuildSnapshot(): Promise<void> {
    await this.d.snapshots.rebuild().catch((err: unknown) => this.d.log.error({ err }, 'blacklist snapshot rebuild failed; the sweep retries'));
  }

  /**
   * Every minute (durable job): enforces adds again until SETTLE_AFTER_MS after them (a crash between
   * commit and enforcement, an enrollment that checked before the add and committed after it),
   * prunes changes older than 72 hours, and rebuilds a snapshot that fell behind.
   */
  async sweep(): Promise<{ enforced: number; pruned: number }> {
    const now = this.d.clock.now().getTime();
    let enforced = 0;
    for (const change of await repo.unsettled(this.d.sql, 500)) {
      if (await repo.listed(this.d.sql, change.model, change.sn)) enforced += await this.enforce({ model: change.model, sn: change.sn, by: change.by });
      if (change.at.getTime() <= now - SETTLE_AFTER_MS) await repo.settle(this.d.sql, change.seq);
    }
    const pruned = await repo.prune(this.d.sql, new Date(now - DELTA_LIFETIME_MS).toISOString());
    await this.d.snapshots.ensureFresh();
    await this.d.index.catchUp();
    return { enforced, pruned };
  }
}
