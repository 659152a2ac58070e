import type { ActorStore } from '../actors/store.js';
import type { Sql } from '../db/client.js';
import type { Clock } from '../lib/clock.js';
import { iso } from '../lib/encoding.js';
import { conflict, notFound } from '../lib/errors.js';
import { accountOfCaller, platformOnly, type Caller } from './caller.js';
import { factoryRegistrationKind } from './kinds.js';
import * as repo from './repo.js';

export interface FactoryRegistrationView {
  account_id: string; state: repo.FactoryRegistrationRow['state']; note: string | null; requested_at: string; requested_by: string;
  decided_at: string | null; decided_by: string | null; reason: string | null;
}
const view = (r: repo.FactoryRegistrationRow): FactoryRegistrationView => ({
  account_id: r.account_id, state: r.state, note: r.note, requested_at: iso(r.requested_at), requested_by: r.requested_by,
  decided_at: iso(r.decided_at), decided_by: r.decided_by, reason: r.reason,
});

/** The account's factory capability badge; platform staff decide it. Approved, it lets the account create registrars. */
export class FactoryRegistrations {
  constructor(private readonly d: { sql: Sql; actors: ActorStore; clock: Clock }) {}

  /** 201 on the first request; 200 with the current one, or after asking again once refused or revoked. */
  async request(c: Caller, note?: string): Promise<{ registration: FactoryRegistrationView; created: boolean }> {
    const accountId = accountOfCaller(c);
    const at = this.d.clock.now().toISOString();
    const created = await this.d.actors.run(async (uow) => {
      // the row is born with its actor: the store inserts it with the machine's projection (the
      // request's note, time and author), or skips it when the account has one
      const born = await uow.createWithRows(factoryRegistrationKind, [{ id: accountId, input: { accountId, requestedAt: at, requestedBy: c.sub, note: note ?? null }, row: {} }], ['account_id']);
      if (born.size === 1) return true;
      // an existing one: asked again after a refusal or revocation; else left as it is
      await uow.trySend(factoryRegistrationKind, accountId, { type: 'REQUEST', at, by: c.sub, note: note ?? null });
      return false;
    });
    return { registration: await this.me(c), created };
  }

  async me(c: Caller): Promise<FactoryRegistrationView> {
    const row = await repo.factoryRegistration(this.d.sql, accountOfCaller(c));
    if (!row) throw notFound('your account has not requested a factory registration: POST /api/v1/factory-registrations');
    return view(row);
  }

  async pending(c: Caller, f: { after?: string; limit: number }) {
    platformOnly(c, 'read the factory registration queue');
    const rows = await repo.pendingRegistrations(this.d.sql, f);
    const items = rows.slice(0, f.limit).map(view);
    return { items, next_cursor: rows.length > f.limit ? items[items.length - 1].account_id : null };
  }

  /** 403 unless platform staff, 404 for an account that never asked, 409 from the wrong state. */
  async decide(c: Caller, accountId: string, decision: 'APPROVE' | 'REFUSE' | 'REVOKE', reason?: string): Promise<FactoryRegistrationView> {
    platformOnly(c, 'decide factory registrations');
    await this.d.actors.run(async (uow) => {
      const r = await uow.trySend(factoryRegistrationKind, accountId, { type: decision, at: this.d.clock.now().toISOString(), by: c.sub, reason });
      if ('refused' in r) {
        throw conflict(`the factory registration of account ${accountId} is ${r.state}: ${decision} is not accepted in that state`, { extra: { state: r.state } });
      }
    }).catch((err) => {
      if ((err as { kind?: string }).kind === 'not_found') throw notFound(`account ${accountId} has not requested a factory registration`);
      throw err;
    });
    const row = await repo.factoryRegistration(this.d.sql, accountId);
    return view(row!);
  }
}
