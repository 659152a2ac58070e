import type { ThingState } from '../../machines/thing.js';
import type { Gateway } from '../gateway.js';
import { conflict, notFound } from '../lib/errors.js';
import { isoNow } from '../lib/clock.js';
import { isUuid } from '../http/auth/principal.js';
import { thingKind, thingRefusal } from './kinds.js';
import type { TrustService } from './service.js';
import type { Db } from '../db/client.js';

/** The lifecycle steps a tenant drives over HTTP (PROVISION and FACTORY_DONE belong to the saga). */
export type LifecycleVerb = 'FACTORY_HANDOVER' | 'ACTIVATE' | 'DEACTIVATE';

export interface ThingStateChange { seq: number; thingId: string; accountId: string | null; from: string; to: string; event: string; at: string }

/** The thing's lifecycle as the tenant sees it: its state, lookups by serial, the steps, the log. */
export class ThingLifecycleService {
  constructor(private readonly gw: Gateway, private readonly trust: Pick<TrustService, 'revokeThing'>) {}

  /** GET /api/v1/things/{id}/state; REGISTERED things (not enrolled yet) have no `updated_at` of their own: their creation time. */
  async state(accountId: string, thingId: string): Promise<{ state: ThingState; updated_at: string }> {
    const row = isUuid(thingId) ? await lifecycleRepo.state(this.gw.sql, accountId, thingId) : undefined;
    if (!row) throw notFound(`thing ${thingId} not found`);
    return { state: row.state, updated_at: row.updated_at.toISOString() };
  }

  /** GET /api/v1/things/resolve: the caller's thing with this model and serial (one manufacturer, or named). */
  async resolve(accountId: string, q: { model: string; serial: string; manufacturer?: string }) {
    const rows = await lifecycleRepo.byModelSerial(this.gw.sql, accountId, q);
    if (rows.length === 0) throw notFound(`no thing with model ${q.model} and serial ${q.serial} in this account`);
    if (rows.length > 1) throw conflict(`several manufacturers have a thing with model ${q.model} and serial ${q.serial}: add manufacturer`);
    const [t] = rows;
    return { id: t.id, manufacturer: t.manufacturer, model: t.model, serial: t.serial, state: t.state, updated_at: t.updated_at.toISOString(), revoked: t.revoked };
  }

  /** One lifecycle step; 404 for another account's thing, 409 naming the state when the machine refuses. */
  async step(accountId: string, thingId: string, verb: LifecycleVerb) {
    await this.gw.actors.run(async (uow) => {
      const thing = isUuid(thingId) ? await uow.load(thingKind, thingId) : undefined;
      if (!thing || thing.snapshot.context.accountId !== accountId) throw notFound(`thing ${thingId} not found`);
      const sent = await uow.trySend(thingKind, thingId, { type: verb, at: isoNow(this.gw.clock) });
      if ('refused' in sent) throw thingRefusal(thingId, sent.snapshot, verb);
    });
    return this.state(accountId, thingId);
  }

  /** Terminal: revoked exactly like DELETE /api/v1/things/{id} (certificate flag, CRL, disconnect). */
  async annihilate(accountId: string, thingId: string, by: string) {
    if (!isUuid(thingId)) throw notFound(`thing ${thingId} not found`);
    const revoked = await this.trust.revokeThing(accountId, thingId, by, 'ANNIHILATE');
    return { ...revoked, ...(await this.state(accountId, thingId)) };
  }
}

interface StateRow { id: string; manufacturer: string; model: string; serial: string; state: ThingState; updated_at: Date; revoked: boolean }

/** SQL of the lifecycle reads (the columns are the thing actor's projection and the log view). */
export const lifecycleRepo = {
  async state(db: Db, accountId: string, thingId: string): Promise<StateRow | undefined> {
    const [row] = await db<StateRow[]>`
      select id, manufacturer, model, serial, lifecycle_state as state, coalesce(lifecycle_updated_at, created_at) as updated_at, revoked_at is not null as revoked
      from things where id = ${thingId} and account_id = ${accountId}`;
    return row;
  },
  async byModelSerial(db: Db, accountId: string, q: { model: string; serial: string; manufacturer?: string }): Promise<StateRow[]> {
    return db<StateRow[]>`
      select id, manufacturer, model, serial, lifecycle_state as state, coalesce(lifecycle_updated_at, created_at) as updated_at, revoked_at is not null as revoked
      from things where account_id = ${accountId} and model = ${q.model} and serial = ${q.serial}
        ${q.manufacturer === undefined ? db`` : db`and manufacturer = ${q.manufacturer}`}
      order by id limit 2`;
  },
  /** The state-change log of one thing, oldest first (view thing_state_changes over domain_events). */
  async stateChanges(db: Db, thingId: string): Promise<ThingStateChange[]> {
    const rows = await db<{ seq: string; thing_id: string; account_id: string | null; from_state: string; to_state: string; event: string; at: Date }[]>`
      select seq, thing_id, account_id, from_state, to_state, event, at from thing_state_changes where thing_id = ${thingId} order by seq`;
    return rows.map((r) => ({ seq: Number(r.seq), thingId: r.thing_id, accountId: r.account_id, from: r.from_state, to: r.to_state, event: r.event, at: r.at.toISOString() }));
  },
};
