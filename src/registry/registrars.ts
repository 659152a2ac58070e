import crypto from 'node:crypto';
import type { ActorStore } from '../actors/store.js';
import type { Sql } from '../db/client.js';
import type { Clock } from '../lib/clock.js';
import type { Logger } from '../log.js';
import { iso } from '../lib/encoding.js';
import { conflict, invalid, notFound, refused } from '../lib/errors.js';
import { accountOfCaller, platformOnly, type Caller } from './caller.js';
import { factoryRegistrationKind, referenceRequestKind, registrarKind } from './kinds.js';
import * as repo from './repo.js';

export interface RegistrarView {
  id: string; account_id: string; name: string; description: string; state: repo.RegistrarRow['state']; canonical_model_id: string | null;
  decided_at: string | null; decided_by: string | null; reason: string | null; created_at: string; updated_at: string;
}
export const registrarView = (r: repo.RegistrarRow): RegistrarView => ({
  id: r.id, account_id: r.account_id, name: r.name, description: r.description, state: r.state, canonical_model_id: r.canonical_model_id,
  decided_at: iso(r.decided_at), decided_by: r.decided_by, reason: r.reason, created_at: iso(r.created_at), updated_at: iso(r.updated_at),
});

/**
 * Registrars: an account with an approved factory registration creates them; platform staff
 * approve or reject them while pending; the owner binds the canonical model once. The registrar
 * machine decides every step.
 */
export class Registrars {
  constructor(private readonly d: { sql: Sql; actors: ActorStore; clock: Clock; log: Logger }) {}

  private at() { return this.d.clock.now(); }

  async create(c: Caller, input: { name: string; description?: string }): Promise<RegistrarView> {
    const accountId = accountOfCaller(c);
    // what an approved factory registration unlocks: the factoryRegistration machine answers
    if (!(await this.d.actors.can(factoryRegistrationKind, accountId, { type: 'USE' }))) {
      throw refused('creating registrars needs an approved factory registration: POST /api/v1/factory-registrations and wait for a platform operator');
    }
    const id = crypto.randomUUID();
    const at = this.at();
    await this.d.actors.run(async (uow) => {
      await repo.insertRegistrar(uow.sql, { id, accountId, name: input.name, description: input.description ?? '', at });
      await uow.create(registrarKind, id, { id, accountId, createdAt: at.toISOString(), createdBy: c.sub });
    });
    return this.get(c, id);
  }

  /** Account callers see their own; platform staff see every account's (the approval queue). */
  async list(c: Caller, f: { state?: string; account_id?: string; after?: string; limit: number }) {
    const accountId = c.platform ? f.account_id : accountOfCaller(c);
    if (!c.platform && f.account_id && f.account_id !== accountId) throw invalid('account_id filters only for platform staff; you see your own account');
    return repo.page(await repo.listRegistrars(this.d.sql, { ...f, accountId }), f.limit, registrarView);
  }

  private async visible(c: Caller, id: string): Promise<repo.RegistrarRow> {
    const row = await repo.registrar(this.d.sql, id, c.platform ? undefined : accountOfCaller(c));
    if (!row) throw notFound(`registrar ${id} not found`);
    return row;
  }

  /** The owner, platform staff, and accounts whose access request to it was approved (what an approved access request unlocks). */
  async get(c: Caller, id: string): Promise<RegistrarView> {
    if (c.platform) return registrarView(await this.visible(c, id));
    const row = await repo.readableRegistrar(this.d.sql, id, accountOfCaller(c));
    if (!row) throw notFound(`registrar ${id} not found`);
    return registrarView(row);
  }

  async update(c: Caller, id: string, patch: { name?: string; description?: string }): Promise<RegistrarView> {
    await this.visible({ ...c, platform: false }, id);
    const at = this.at();
    await this.d.actors.run(async (uow) => {
      await uow.send(registrarKind, id, { type: 'UPDATE', at: at.toISOString(), by: c.sub });
      await repo.updateRegistrar(uow.sql, id, { ...patch, at });
    });
    return this.get(c, id);
  }

  /** Deleting stops the reference requests standing against it (their references go). */
  async delete(c: Caller, id: string): Promise<void> {
    await this.visible({ ...c, platform: false }, id);
    const at = this.at().toISOString();
    await this.d.actors.run(async (uow) => {
      await uow.send(registrarKind, id, { type: 'DELETE', at, by: c.sub });
      for (const requestId of await repo.openReferenceRequests(uow.sql, id)) {
        await uow.send(referenceRequestKind, requestId, { type: 'REVOKE', at, by: c.sub });
        await repo.dropReferences(uow.sql, requestId);
      }
    });
    this.d.log.info({ registrarId: id, by: c.sub }, 'registrar deleted');
  }

  /** Platform staff decide a pending registrar: 404 unknown, 409 when it is not pending. */
  async decide(c: Caller, id: string, decision: 'APPROVE' | 'REJECT', reason?: string): Promise<RegistrarView> {
    platformOnly(c, 'approve or reject registrars');
    await this.visible(c, id);
    const at = this.at();
    await this.d.actors.run(async (uow) => {
      const r = await uow.trySend(registrarKind, id, decision === 'APPROVE' ? { type: 'APPROVE', at: at.toISOString(), by: c.sub } : { type: 'REJECT', at: at.toISOString(), by: c.sub, reason });
      if ('refused' in r) throw conflict(`registrar ${id} is ${r.state}: only a PENDING registrar is approved or rejected`, { extra: { state: r.state } });
      await repo.touchRegistrar(uow.sql, id, at);
    });
    return this.get(c, id);
  }

  /** What an account may name as a factory service's registrar (see RegistrarDirectory). */
  async mayActFor(accountId: string, registrarId: string): Promise<boolean> {
    const row = await repo.readableRegistrar(this.d.sql, registrarId, accountId);
    return row?.state === 'APPROVED';
  }

  /** Set-once: 400 for a model not the owner's, 409 when another model is bound already. */
  async setCanonicalModel(c: Caller, id: string, modelId: string): Promise<RegistrarView> {
    const accountId = accountOfCaller(c);
    await this.visible(c, id);
    if (!(await repo.ownModel(this.d.sql, accountId, modelId))) throw invalid(`model_id ${modelId} names no model of your account`);
    const at = this.at();
    await this.d.actors.run(async (uow) => {
      const r = await uow.trySend(registrarKind, id, { type: 'SET_CANONICAL_MODEL', at: at.toISOString(), by: c.sub, modelId });
      if ('refused' in r) {
        throw conflict(`registrar ${id} is bound to canonical model ${r.snapshot.context.canonicalModelId} already; the binding is set once`, {
          extra: { canonical_model_id: r.snapshot.context.canonicalModelId },
        });
      }
      await repo.touchRegistrar(uow.sql, id, at);
    });
    return this.get(c, id);
  }
}
