import type { ThingState } from '../../machines/thing.js';
import type { Gateway } from '../gateway.js';
import type { UnitOfWork } from '../actors/store.js';
import { conflict, notFound } from '../lib/errors.js';
import { isoNow } from '../lib/clock.js';
import { isUuid } from '../http/auth/principal.js';
import { thingKind, thingRefusal, thingRevoked } from './kinds.js';
import type { TrustService } from './service.js';
import type { Db } from '../db/client.js';

/** The lifecycle steps a tenant drives over HTTP (PROVISION and FACTORY_DONE belong to the saga). */
export type LifecycleVerb = 'FACTORY_HANDOVER' | 'ACTIVATE' | 'DEACTIVATE';

export interface ThingStateChange { seq: number; thingId: string; accountId: string | null; from: string; to: string; event: string; at: string }

/**
 * Whose things a caller sees: its account's; a factory service (signed request) only those of its
 * model. Anything outside the scope is "not found", as another account's thing is.
 */
export interface ThingScope {
  accountId: string;
  modelId?: string;
}

/** What the PROVISION saga needs of a thing. */
export interface SagaThing {
  id: string;
  accountId: string;
  modelId: string;
  manufacturer: string;
  model: string;
  serial: string;
}

/** The thing's lifecycle as the tenant sees it: its state, lookups by serial, the steps, the log. */
export class ThingLifecycleService {
  constructor(private readonly gw: Gateway, private readonly trust: Pick<TrustService, 'revokeThing'>) {}

  /** GET /api/v1/things/{id}/state; REGISTERED things (not enrolled yet) have no `updated_at` of their own: their creation time. */
  async state(scope: ThingScope, thingId: string): Promise<{ state: ThingState; updated_at: string }> {
    const row = await this.row(scope, thingId);
    return { state: row.state, updated_at: row.updated_at.toISOString() };
  }

  /** GET /api/v1/things/resolve: the caller's thing with this model and serial (one manufacturer, or named). */
  async resolve(scope: ThingScope, q: { model: string; serial: string; manufacturer?: string }) {
    const rows = await lifecycleRepo.byModelSerial(this.gw.sql, scope, q);
    if (rows.length === 0) throw notFound(`no thing with model ${q.model} and serial ${q.serial} in this account`);
    if (rows.length > 1) throw conflict(`several manufacturers have a thing with model ${q.model} and serial ${q.serial}: add manufacturer`);
    const [t] = rows;
    return { id: t.id, manufacturer: t.manufacturer, model: t.model, serial: t.serial, state: t.state, updated_at: t.updated_at.toISOString(), revoked: t.revoked };
  }

  /**
   * GET /api/v1/things/{id}/factory-eligibility: may the factory still deliver to this thing
   * (provision it, report legs)? The thing's machine says (FACTORY_DELIVERY: open from ROLLEDOFF
   * to IN_FACTORY while not revoked; factory-handover closes it).
   */
  async factoryEligibility(scope: ThingScope, thingId: string) {
    const row = await this.row(scope, thingId);
    const thing = await this.gw.actors.get(thingKind, thingId);
    const open = thing?.snapshot.can({ type: 'FACTORY_DELIVERY' }) ?? false;
    const reason = thingRevoked(thing) ? 'the thing is revoked'
      : open ? `the thing is ${row.state}: factory deliveries are open until factory-handover`
      : row.state === 'REGISTERED' ? 'the thing is REGISTERED: it is not enrolled yet'
      : `the thing is ${row.state}: factory-handover closed factory deliveries`;
    return { thing_id: row.id, state: row.state, eligible: open, reason, model_id: row.model_id, updated_at: row.updated_at.toISOString() };
  }

  /** One lifecycle step; 404 for another account's thing, 409 naming the state when the machine refuses. */
  async step(scope: ThingScope, thingId: string, verb: LifecycleVerb) {
    await this.gw.actors.run(async (uow) => {
      await this.lockInScope(uow, scope, thingId);
      const sent = await uow.trySend(thingKind, thingId, { type: verb, at: isoNow(this.gw.clock) });
      if ('refused' in sent) throw thingRefusal(thingId, sent.snapshot, verb);
    });
    return this.state(scope, thingId);
  }

  /** Terminal: revoked exactly like DELETE /api/v1/things/{id} (certificate flag, CRL, disconnect). */
  async annihilate(accountId: string, thingId: string, by: string) {
    if (!isUuid(thingId)) throw notFound(`thing ${thingId} not found`);
    const revoked = await this.trust.revokeThing(accountId, thingId, by, 'ANNIHILATE');
    return { ...revoked, ...(await this.state({ accountId }, thingId)) };
  }

  // --- the PROVISION saga's steps on the thing, inside the saga's unit of work (factory domain)

  /** ROLLEDOFF -> PROVISIONED (404 outside the scope, 409 naming the state otherwise). */
  async startProvisioning(uow: UnitOfWork, scope: ThingScope, thingId: string): Promise<SagaThing> {
    const row = await this.lockInScope(uow, scope, thingId);
    if (!row.model_id) throw conflict(`thing ${thingId} has model ${row.model}, which is not a registered model: no factory service can provision it`);
    const sent = await uow.trySend(thingKind, thingId, { type: 'PROVISION', at: isoNow(this.gw.clock) });
    if ('refused' in sent) throw thingRefusal(thingId, sent.snapshot, 'PROVISION');
    return { id: row.id, accountId: scope.accountId, modelId: row.model_id, manufacturer: row.manufacturer, model: row.model, serial: row.serial };
  }

  /** Is the thing still PROVISIONED and not revoked (may a saga leg go on)? Reason when not. */
  async provisioningBlocked(uow: UnitOfWork, thingId: string): Promise<string | undefined> {
    const thing = await uow.load(thingKind, thingId);
    if (!thing) return `thing ${thingId} no longer exists`;
    if (thing.snapshot.context.revokedAt) return `thing ${thingId} was revoked`;
    if (thing.state !== 'PROVISIONED') return `thing ${thingId} is ${thing.state}, no longer PROVISIONED`;
    return undefined;
  }

  /** The saga ended: IN_FACTORY when it succeeded, back to ROLLEDOFF when it failed (no-op when the thing moved on). */
  async provisioningEnded(uow: UnitOfWork, thingId: string, outcome: 'SUCCEEDED' | 'FAILED'): Promise<void> {
    await uow.trySend(thingKind, thingId, { type: outcome === 'SUCCEEDED' ? 'FACTORY_DONE' : 'PROVISION_FAILED', at: isoNow(this.gw.clock) });
  }

  /**
   * The PROVISION saga (factory domain) asks for the thing's steps here, each in trust's own
   * transaction; the thing machine decides. PROVISION: ROLLEDOFF -> PROVISIONED, answers the thing
   * (404 outside the scope, 409 naming the state). CHECK: may a leg go on (PROVISIONED, not
   * revoked)? answers why not. FACTORY_DONE, PROVISION_FAILED: the run ended (a no-op when the
   * thing moved on meanwhile).
   */
  async provisioningStep(request: { step: 'PROVISION'; scope: ThingScope; thingId: string } | { step: 'CHECK' | 'FACTORY_DONE' | 'PROVISION_FAILED'; thingId: string }): Promise<{ thing?: SagaThing; blocked?: string }> {
    return this.gw.actors.run(async (uow) => {
      if (request.step === 'PROVISION') return { thing: await this.startProvisioning(uow, request.scope, request.thingId) };
      if (request.step === 'CHECK') return { blocked: await this.provisioningBlocked(uow, request.thingId) };
      await this.provisioningEnded(uow, request.thingId, request.step === 'FACTORY_DONE' ? 'SUCCEEDED' : 'FAILED');
      return {};
    });
  }

  private async row(scope: ThingScope, thingId: string): Promise<StateRow> {
    const row = isUuid(thingId) ? await lifecycleRepo.state(this.gw.sql, scope, thingId) : undefined;
    if (!row) throw notFound(`thing ${thingId} not found`);
    return row;
  }

  /** Locks the thing's actor, then checks the scope on its row (404 outside it). */
  private async lockInScope(uow: UnitOfWork, scope: ThingScope, thingId: string): Promise<StateRow> {
    const thing = isUuid(thingId) ? await uow.load(thingKind, thingId) : undefined;
    const row = thing && thing.snapshot.context.accountId === scope.accountId ? await lifecycleRepo.state(uow.sql, scope, thingId) : undefined;
    if (!row) throw notFound(`thing ${thingId} not found`);
    return row;
  }
}

interface StateRow { id: string; model_id: string | null; manufacturer: string; model: string; serial: string; state: ThingState; updated_at: Date; revoked: boolean }

/** SQL of the lifecycle reads (the columns are the thing actor's projection and the log view). */
export const lifecycleRepo = {
  async state(db: Db, scope: ThingScope, thingId: string): Promise<StateRow | undefined> {
    const [row] = await db<StateRow[]>`
      select id, model_id, manufacturer, model, serial, lifecycle_state as state, coalesce(lifecycle_updated_at, created_at) as updated_at, revoked_at is not null as revoked
      from things where id = ${thingId} and account_id = ${scope.accountId}
        ${scope.modelId === undefined ? db`` : db`and model_id = ${scope.modelId}`}`;
    return row;
  },
  async byModelSerial(db: Db, scope: ThingScope, q: { model: string; serial: string; manufacturer?: string }): Promise<StateRow[]> {
    return db<StateRow[]>`
      select id, model_id, manufacturer, model, serial, lifecycle_state as state, coalesce(lifecycle_updated_at, created_at) as updated_at, revoked_at is not null as revoked
      from things where account_id = ${scope.accountId} and model = ${q.model} and serial = ${q.serial}
        ${q.manufacturer === undefined ? db`` : db`and manufacturer = ${q.manufacturer}`}
        ${scope.modelId === undefined ? db`` : db`and model_id = ${scope.modelId}`}
      order by id limit 2`;
  },
  /** The state-change log of one thing, oldest first (view thing_state_changes over domain_events). */
  async stateChanges(db: Db, thingId: string): Promise<ThingStateChange[]> {
    const rows = await db<{ seq: string; thing_id: string; account_id: string | null; from_state: string; to_state: string; event: string; at: Date }[]>`
      select seq, thing_id, account_id, from_state, to_state, event, at from thing_state_changes where thing_id = ${thingId} order by seq`;
    return rows.map((r) => ({ seq: Number(r.seq), thingId: r.thing_id, accountId: r.account_id, from: r.from_state, to: r.to_state, event: r.event, at: r.at.toISOString() }));
  },
};
