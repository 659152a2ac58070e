import crypto from 'node:crypto';
import type { ActorStore } from '../actors/store.js';
import type { Sql } from '../db/client.js';
import type { Clock } from '../lib/clock.js';
import type { Logger } from '../log.js';
import { iso } from '../lib/encoding.js';
import { conflict, invalid, notFound, refused } from '../lib/errors.js';
import { accountOfCaller, type Caller } from './caller.js';
import { referenceRequestKind } from './kinds.js';
import * as repo from './repo.js';

export const RECONCILE_JOB = 'registry.reconcile-references';
const CURSOR = 'thing.enrolled';
/** Events younger than this are read again by the next sweep (a lower seq may commit later). */
const SETTLE_SECONDS = 300;
const SWEEP_BATCH = 5000;
/** enrolled things reconciled together: at most this many, waiting at most this long */
const BATCH_MAX = 500;
const BATCH_WAIT_MS = 20;

export interface ReferenceRequestView {
  id: string; registrar_id: string; requester_account_id: string; owner_account_id: string; filter: repo.ReferenceFilter; note: string | null;
  state: repo.ReferenceRequestRow['state']; decided_at: string | null; decided_by: string | null; reason: string | null; revoked_at: string | null; created_at: string;
}
const requestView = (r: repo.ReferenceRequestRow): ReferenceRequestView => ({
  id: r.id, registrar_id: r.registrar_id, requester_account_id: r.requester_account_id, owner_account_id: r.owner_account_id, filter: r.filter,
  note: r.note, state: r.state, decided_at: iso(r.decided_at), decided_by: r.decided_by, reason: r.reason, revoked_at: iso(r.revoked_at), created_at: iso(r.created_at),
});

export interface ThingReferenceView {
  id: string; thing_id: string; owner_account_id: string; source: 'reference_request' | 'device_deeplink';
  reference_request_id: string | null; device_deeplink_id: string | null;
  model_id: string | null; descriptor: string | null; manufacturer: string; model: string; serial: string; state: string; created_at: string;
}
export const referenceView = (r: repo.ThingReferenceRow): ThingReferenceView => ({
  id: r.id, thing_id: r.thing_id, owner_account_id: r.owner_account_id, source: r.source, reference_request_id: r.reference_request_id,
  device_deeplink_id: r.device_deeplink_id, model_id: r.model_id, descriptor: r.descriptor, manufacturer: r.manufacturer, model: r.model,
  serial: r.serial, state: r.lifecycle_state, created_at: iso(r.created_at),
});

/**
 * Reference requests: an eligible account's standing filter over the things of another account's
 * registrar (its canonical model). Approved, the initial reconcile runs in the approval's
 * transaction; things enrolled later are added from their `thing.enrolled` events, and a sweep
 * over domain_events (by seq cursor) adds whatever an event handler missed (crash, lost NOTIFY,
 * an approval committing while the thing's event was handled).
 */
export class References {
  constructor(private readonly d: { sql: Sql; actors: ActorStore; clock: Clock; log: Logger }) {}

  async create(c: Caller, input: { registrar_id: string; filter?: repo.ReferenceFilter; note?: string }): Promise<ReferenceRequestView> {
    const requester = accountOfCaller(c);
    const id = crypto.randomUUID();
    const at = this.d.clock.now();
    await this.d.actors.run(async (uow) => {
      // locked: a concurrent delete of the registrar waits, then revokes this request too
      const registrar = await repo.registrar(uow.sql, input.registrar_id, undefined, { share: true });
      if (!registrar || registrar.state !== 'APPROVED') throw invalid(`registrar_id ${input.registrar_id} names no approved registrar`);
      if (registrar.account_id === requester) throw invalid('the registrar is your own account\'s: its things are yours already');
      if (!registrar.canonical_model_id) throw invalid(`registrar ${registrar.id} has no canonical model yet, so no things to reference`);
      if (!(await repo.eligible(uow.sql, registrar.account_id, requester))) {
        throw refused(`your account is not an eligible accessor of account ${registrar.account_id}: redeem one of its eligibility artifacts and wait for its approval`);
      }
      await repo.insertReferenceRequest(uow.sql, {
        id, requester, owner: registrar.account_id, registrarId: registrar.id, filter: input.filter ?? {}, note: input.note ?? null, by: c.sub, at,
      });
      await uow.create(referenceRequestKind, id, {
        id, requesterAccountId: requester, ownerAccountId: registrar.account_id, registrarId: registrar.id, createdAt: at.toISOString(), createdBy: c.sub,
      });
    });
    return this.get(c, id);
  }

  /** `role`: requester (the caller's own requests) or owner (the inbox against its registrars). */
  async list(c: Caller, f: { role: 'owner' | 'requester'; state?: string; after?: string; limit: number }) {
    return repo.page(await repo.listReferenceRequests(this.d.sql, accountOfCaller(c), f), f.limit, requestView);
  }

  private async visible(c: Caller, id: string): Promise<repo.ReferenceRequestRow> {
    const row = await repo.referenceRequest(this.d.sql, id, accountOfCaller(c));
    if (!row) throw notFound(`reference request ${id} not found`);
    return row;
  }

  async get(c: Caller, id: string): Promise<ReferenceRequestView> {
    return requestView(await this.visible(c, id));
  }

  /** The requester or the owner stops it; the references it made go. 204 again once revoked; 409 when rejected. */
  async revoke(c: Caller, id: string): Promise<void> {
    await this.visible(c, id);
    await this.d.actors.run(async (uow) => {
      const r = await uow.trySend(referenceRequestKind, id, { type: 'REVOKE', at: this.d.clock.now().toISOString(), by: c.sub });
      if ('refused' in r && r.state !== 'REVOKED') throw conflict(`reference request ${id} is ${r.state}: nothing stands to revoke`, { extra: { state: r.state } });
      await repo.dropReferences(uow.sql, id);
    });
  }

  /** The owner decides (404 for anyone else, 409 once decided). Approval runs the initial reconcile. */
  async decide(c: Caller, id: string, decision: { type: 'APPROVE' } | { type: 'REJECT'; reason: string }): Promise<ReferenceRequestView & { references_added?: number }> {
    const row = await this.visible(c, id);
    if (row.owner_account_id !== c.accountId) throw notFound(`reference request ${id} not found in your inbox`);
    const added = await this.d.actors.run(async (uow) => {
      const r = await uow.trySend(referenceRequestKind, id, { ...decision, at: this.d.clock.now().toISOString(), by: c.sub });
      if ('refused' in r) throw conflict(`reference request ${id} is ${r.state}: decided once`, { extra: { state: r.state } });
      return decision.type === 'APPROVE' ? repo.reconcile(uow.sql, { requestId: id }) : undefined;
    });
    return { ...(await this.get(c, id)), ...(added !== undefined ? { references_added: added } : {}) };
  }

  /** The caller's repository of other accounts' things. */
  async listReferences(c: Caller, f: { reference_request_id?: string; after?: string; limit: number }) {
    return repo.page(await repo.listThingReferences(this.d.sql, accountOfCaller(c), { requestId: f.reference_request_id, after: f.after, limit: f.limit }), f.limit, referenceView);
  }

  /** A thing enrolled: references of every approved request it matches (on the bus of every node; idempotent). */
  async thingsEnrolled(thingIds: string[]): Promise<number> {
    return repo.reconcile(this.d.sql, { thingIds });
  }

  private queued = new Set<string>();
  private flushing?: Promise<void>;

  /**
   * Queues an enrolled thing; the queue is reconciled in one statement per batch (a bulk claim
   * emits one event per thing: one query each would cost the enrollment path). A failure is
   * logged; the sweep adds what it missed.
   */
  enrolled(thingId: string): void {
    this.queued.add(thingId);
    if (this.queued.size >= BATCH_MAX) void this.flush();
    else this.flushing ??= new Promise<void>((resolve) => setTimeout(resolve, BATCH_WAIT_MS)).then(() => this.flush());
  }

  /** Reconciles what is queued now. */
  async flush(): Promise<void> {
    this.flushing = undefined;
    const thingIds = [...this.queued];
    this.queued.clear();
    if (thingIds.length === 0) return;
    try {
      await this.thingsEnrolled(thingIds);
    } catch (err) {
      this.d.log.error({ err, things: thingIds.length }, 'thing references of enrolled things failed; the sweep adds them');
    }
  }

  /** The durable sweep: thing.enrolled events since the cursor, reconciled; the cursor moves past settled ones. */
  async sweep(): Promise<number> {
    let added = 0;
    for (;;) {
      const from = await repo.cursor(this.d.sql, CURSOR);
      const batch = await repo.enrolledSince(this.d.sql, from, SWEEP_BATCH, SETTLE_SECONDS, this.d.clock.now());
      if (batch.thingIds.length) added += await repo.reconcile(this.d.sql, { thingIds: batch.thingIds });
      if (batch.advanceTo > from) await repo.setCursor(this.d.sql, CURSOR, batch.advanceTo);
      if (batch.advanceTo === from || batch.thingIds.length < SWEEP_BATCH) break;
    }
    if (added) this.d.log.info({ added }, 'reference sweep added thing references an event handler had missed');
    return added;
  }
}
