import crypto from 'node:crypto';
import type { ActorStore } from '../actors/store.js';
import type { Sql } from '../db/client.js';
import type { Clock } from '../lib/clock.js';
import { iso } from '../lib/encoding.js';
import { conflict, invalid, notFound, refused } from '../lib/errors.js';
import type { AccessDecision } from '../../machines/accessRequest.js';
import { accountOfCaller, type Caller } from './caller.js';
import { accessRequestKind } from './kinds.js';
import * as repo from './repo.js';

export interface AccessRequestView {
  id: string; registrar_id: string; requester_account_id: string; owner_account_id: string; note: string | null; state: repo.AccessRequestRow['state'];
  decision: AccessDecision | null; decided_at: string | null; decided_by: string | null; reason: string | null; created_at: string;
}
const view = (r: repo.AccessRequestRow): AccessRequestView => ({
  id: r.id, registrar_id: r.registrar_id, requester_account_id: r.requester_account_id, owner_account_id: r.owner_account_id, note: r.note,
  state: r.state, decision: r.state === 'PENDING' ? null : (r.state as AccessDecision), decided_at: iso(r.decided_at), decided_by: r.decided_by,
  reason: r.reason, created_at: iso(r.created_at),
});

/**
 * Access requests: an account asks the owner of an approved registrar for access to it; the owner
 * decides APPROVED or REJECTED once (approve and reject are shorthand for decide).
 */
export class AccessRequests {
  constructor(private readonly d: { sql: Sql; actors: ActorStore; clock: Clock }) {}

  async create(c: Caller, input: { registrar_id: string; note?: string }): Promise<AccessRequestView> {
    const requester = accountOfCaller(c);
    const registrar = await repo.registrar(this.d.sql, input.registrar_id);
    if (!registrar || registrar.state !== 'APPROVED') throw invalid(`registrar_id ${input.registrar_id} names no approved registrar`);
    if (registrar.account_id === requester) throw invalid('the registrar is your own account\'s: no access request needed');
    const id = crypto.randomUUID();
    const at = this.d.clock.now();
    const inserted = await this.d.actors.run(async (uow) => {
      if (!(await repo.insertAccessRequest(uow.sql, { id, requester, owner: registrar.account_id, registrarId: registrar.id, note: input.note ?? null, at }))) return false;
      await uow.create(accessRequestKind, id, {
        id, requesterAccountId: requester, ownerAccountId: registrar.account_id, registrarId: registrar.id, createdAt: at.toISOString(), createdBy: c.sub,
      });
      return true;
    });
    if (!inserted) {
      const pending = await repo.pendingAccessRequest(this.d.sql, requester, registrar.id);
      throw conflict(`an access request to registrar ${registrar.id} is pending already (${pending})`, { extra: { access_request_id: pending } });
    }
    return this.get(c, id);
  }

  async list(c: Caller, f: { role?: 'owner' | 'requester'; state?: string; after?: string; limit: number }) {
    return repo.page(await repo.listAccessRequests(this.d.sql, accountOfCaller(c), f), f.limit, view);
  }

  async get(c: Caller, id: string): Promise<AccessRequestView> {
    const row = await repo.accessRequest(this.d.sql, id, accountOfCaller(c));
    if (!row) throw notFound(`access request ${id} not found`);
    return view(row);
  }

  /** The registrar's owner decides once: 404 unseen, 403 for the requester, 409 decided. */
  async decide(c: Caller, id: string, decision: AccessDecision, reason?: string): Promise<AccessRequestView> {
    const row = await repo.accessRequest(this.d.sql, id, accountOfCaller(c));
    if (!row) throw notFound(`access request ${id} not found`);
    if (row.owner_account_id !== c.accountId) throw refused('only the registrar\'s owner decides an access request');
    await this.d.actors.run(async (uow) => {
      const r = await uow.trySend(accessRequestKind, id, { type: 'DECIDE', decision, at: this.d.clock.now().toISOString(), by: c.sub, reason });
      if ('refused' in r) throw conflict(`access request ${id} is decided already (${r.state})`, { extra: { state: r.state } });
    });
    return this.get(c, id);
  }
}
