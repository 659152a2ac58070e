import crypto from 'node:crypto';
import type { ActorKind, ActorStore } from '../actors/store.js';
import type { Services } from '../gateway.js';
import type { Sql } from '../db/client.js';
import type { Jobs } from '../jobs.js';
import type { Logger } from '../log.js';
import type { Clock } from '../lib/clock.js';
import { iso } from '../lib/encoding.js';
import { conflict, invalid, notFound, refused } from '../lib/errors.js';
import { factoryServiceMachine } from '../../machines/factoryService.js';
import * as repo from './repo.js';
import type { Sealer } from '../pki/sealer.js';
import { probe } from './targets.js';
import { defaultPolicy, normalizePolicy } from './policy.js';

export const factoryServiceKind: ActorKind<typeof factoryServiceMachine> = {
  type: 'factoryService',
  machine: factoryServiceMachine,
  accountOf: (c) => c.accountId,
  projection: {
    table: 'factory_services',
    columns: ['state', 'rotation_pending', 'deleted_at', 'drained_at'],
    project: (s, state) => ({ state, rotation_pending: s.context.rotationPending, deleted_at: s.context.deletedAt, drained_at: s.context.drainedAt }),
  },
};

export const DRAIN_JOB = 'factory.drain-service';
export const COLLECT_JOB = 'factory.collect-service';
export const SWEEP_JOB = 'factory.sweep';
/** How long a soft-deleted service drains before it is hard-deleted (unless expedited). */
export const DRAIN_GRACE_SECONDS = 24 * 3600;
export const HEALTH_CHECK_TIMEOUT_MS = 3000;

/** Who acts: a user of the account, or a factory service (signed request). */
export interface Caller {
  sub: string;
  accountId: string;
  /** set when the caller is a factory service itself */
  factoryServiceId?: string;
}

export interface FactoryServiceView {
  id: string;
  account_id: string;
  role: 'identify' | 'provision';
  state: string;
  registrar_id: string | null;
  model_id: string;
  endpoint_url: string;
  access_key_id: string;
  rotation_pending: boolean;
  last_health_check_at: string | null;
  last_health_check_status: 'HEALTHY' | 'UNHEALTHY' | null;
  last_health_check_http_status: number | null;
  last_health_check_latency_ms: number | null;
  last_health_check_error: string | null;
  created_at: string;
  updated_at: string;
  deleted_at: string | null;
}

export function view(r: repo.FactoryServiceRow): FactoryServiceView {
  return {
    id: r.id, account_id: r.account_id, role: r.role, state: r.state, registrar_id: r.registrar_id, model_id: r.model_id,
    endpoint_url: r.endpoint_url, access_key_id: r.access_key_id, rotation_pending: r.rotation_pending,
    last_health_check_at: iso(r.last_health_check_at), last_health_check_status: r.last_health_check_status,
    last_health_check_http_status: r.last_health_check_http_status, last_health_check_latency_ms: r.last_health_check_latency_ms,
    last_health_check_error: r.last_health_check_error, created_at: iso(r.created_at), updated_at: iso(r.updated_at), deleted_at: iso(r.deleted_at),
  };
}

/** A service's policy: the actions its signed requests may call. */
export interface PolicyView {
  factory_service_id: string;
  role: 'identify' | 'provision';
  /** true: the role's default (it follows the documented default); false: set by an account admin */
  default: boolean;
  allow: string[];
}

/** `AKSV` + 16 upper-case hex (DESIGN.md section 7), and a 256-bit secret. */
const newAccessKeyId = () => `AKSV${crypto.randomBytes(8).toString('hex').toUpperCase()}`;
const newSecretAccessKey = () => crypto.randomBytes(32).toString('base64url');

export interface CreateInput {
  role: 'identify' | 'provision';
  model_id: string;
  registrar_id?: string | null;
  endpoint_url: string;
}

/**
 * Factory-service backends: registration with a signing key pair, credential rotation, health
 * checks, soft delete, drain and garbage collection. The factoryService machine decides every
 * lifecycle step; this service holds the secrets (sealed) and the I/O.
 */
export class FactoryServices {
  constructor(private readonly d: {
    sql: Sql; actors: ActorStore; clock: Clock; jobs: Jobs; log: Logger; sealer: Sealer; allowPrivateTargets: boolean;
    /** tells every node's signature verification that a key's secrets or state changed */
    signingChanged(accessKeyId: string): Promise<void>;
    /** which registrars an account may name (the registry domain's) */
    registrars: Services['registrarDirectory'];
    /** whether an account owns a model (the trust domain's) */
    models: Pick<Services['models'], 'isOwnedBy'>;
    /** whether some route declares an action (a policy naming another is a 400 "unknown action") */
    declaredAction(action: string): boolean;
  }) {}

  async create(caller: Caller, input: CreateInput): Promise<FactoryServiceView & { secret_access_key: string }> {
    if (!(await this.d.models.isOwnedBy(caller.accountId, input.model_id))) {
      throw invalid(`model_id ${input.model_id} names no model of your account`);
    }
    if (input.registrar_id && !(await this.d.registrars.mayActFor(caller.accountId, input.registrar_id))) {
      throw invalid(`registrar_id ${input.registrar_id} names no approved registrar of your account, nor one your access request was approved for`);
    }
    const id = crypto.randomUUID();
    const accessKeyId = newAccessKeyId();
    const secret = newSecretAccessKey();
    const now = this.d.clock.now();
    try {
      await this.d.actors.run(async (uow) => {
        await repo.insert(uow.sql, {
          id, account_id: caller.accountId, role: input.role, model_id: input.model_id, registrar_id: input.registrar_id ?? null,
          endpoint_url: input.endpoint_url, access_key_id: accessKeyId, secret_sealed: this.d.sealer.seal(secret), created_at: now,
        });
        await uow.create(factoryServiceKind, id, {
          id, accountId: caller.accountId, role: input.role, modelId: input.model_id, registrarId: input.registrar_id ?? null, accessKeyId, createdAt: now.toISOString(),
        });
      });
    } catch (err) {
      if ((err as { constraint_name?: string }).constraint_name === 'factory_services_model_role') {
        throw conflict(`model ${input.model_id} already has an active ${input.role} factory service; delete it first or rotate its credentials`);
      }
      throw err;
    }
    this.d.log.info({ factoryServiceId: id, accessKeyId, accountId: caller.accountId, by: caller.sub }, 'factory service registered');
    return { ...(await this.get(caller, id)), secret_access_key: secret };
  }

  async list(caller: Caller, f: repo.ListFilter): Promise<{ items: FactoryServiceView[]; next_cursor: string | null }> {
    const rows = await repo.list(this.d.sql, caller.accountId, { ...f, limit: f.limit + 1 });
    const items = rows.slice(0, f.limit).map(view);
    return { items, next_cursor: rows.length > f.limit ? items[items.length - 1].id : null };
  }

  async get(caller: Caller, id: string): Promise<FactoryServiceView> {
    const row = await repo.find(this.d.sql, caller.accountId, id);
    if (!row) throw notFound(`factory service ${id} not found`);
    return view(row);
  }

  async update(caller: Caller, id: string, endpointUrl: string): Promise<FactoryServiceView> {
    await this.get(caller, id);
    await this.d.actors.run(async (uow) => {
      await uow.send(factoryServiceKind, id, { type: 'UPDATE', at: this.d.clock.now().toISOString(), by: caller.sub });
      await repo.setEndpoint(uow.sql, id, endpointUrl, this.d.clock.now());
    });
    return this.get(caller, id);
  }

  /** A new secret, returned once; the old one keeps working until the rotation is confirmed. */
  async rotate(caller: Caller, id: string): Promise<FactoryServiceView & { secret_access_key: string }> {
    this.ownOnly(caller, id, 'rotate only its own credentials');
    const current = await this.get(caller, id);
    const secret = newSecretAccessKey();
    await this.d.actors.run(async (uow) => {
      await uow.send(factoryServiceKind, id, { type: 'ROTATE', at: this.d.clock.now().toISOString(), by: caller.sub });
      await repo.setPendingSecret(uow.sql, id, this.d.sealer.seal(secret), this.d.clock.now());
    });
    await this.d.signingChanged(current.access_key_id);
    this.d.log.info({ factoryServiceId: id, by: caller.sub }, 'factory service credentials rotated');
    return { ...(await this.get(caller, id)), secret_access_key: secret };
  }

  async confirmRotation(caller: Caller, id: string): Promise<FactoryServiceView> {
    this.ownOnly(caller, id, 'confirm the rotation of only its own credentials');
    const current = await this.get(caller, id);
    await this.d.actors.run(async (uow) => {
      const r = await uow.trySend(factoryServiceKind, id, { type: 'CONFIRM_ROTATION', at: this.d.clock.now().toISOString(), by: caller.sub });
      if ('refused' in r) throw conflict(`factory service ${id} has no rotation pending (state ${r.state}); POST rotate-credentials first`, { extra: { state: r.state } });
      await repo.promotePendingSecret(uow.sql, id, this.d.clock.now());
    });
    await this.d.signingChanged(current.access_key_id);
    return this.get(caller, id);
  }

  /** Probes `endpoint_url` + `/healthz` now and records the outcome (a factory service: its own only). */
  async healthCheck(caller: Caller, id: string): Promise<FactoryServiceView> {
    this.ownOnly(caller, id, 'health-check only itself');
    const row = await this.get(caller, id);
    const result = await probe(row.endpoint_url, HEALTH_CHECK_TIMEOUT_MS, this.d.allowPrivateTargets);
    await repo.recordHealthCheck(this.d.sql, id, { at: this.d.clock.now(), ...result });
    return this.get(caller, id);
  }

  /** Soft delete: its credentials stop working at once; drain and collection follow as jobs. */
  async delete(caller: Caller, id: string): Promise<void> {
    const current = await this.get(caller, id);
    await this.d.actors.send(factoryServiceKind, id, { type: 'DELETE', at: this.d.clock.now().toISOString(), by: caller.sub });
    await this.d.signingChanged(current.access_key_id);
    await this.d.jobs.send(DRAIN_JOB, { id }, { startAfter: DRAIN_GRACE_SECONDS, singletonKey: id });
    this.d.log.info({ factoryServiceId: id, by: caller.sub }, 'factory service soft-deleted');
  }

  /** Hard delete now; 409 while saga legs still reference it (or when it is not soft-deleted). */
  async expediteDrain(caller: Caller, id: string): Promise<void> {
    await this.get(caller, id);
    const refusal = await this.drain(id, caller.sub);
    if (refusal) throw conflict(refusal.detail, { extra: { state: refusal.state, active_legs: refusal.activeLegs } });
  }

  /** Sends DRAIN; on success queues garbage collection; else the machine's refusal, explained. */
  async drain(id: string, by?: string): Promise<{ detail: string; state: string; activeLegs: number } | undefined> {
    const refusal = await this.d.actors.run(async (uow) => {
      const activeLegs = await repo.activeLegCount(uow.sql, id);
      const r = await uow.trySend(factoryServiceKind, id, { type: 'DRAIN', at: this.d.clock.now().toISOString(), activeLegs, by });
      if (!('refused' in r)) return undefined;
      const detail = r.state === 'SOFT_DELETED'
        ? `factory service ${id} is still referenced by ${activeLegs} active saga leg(s); it drains when they finish`
        : `factory service ${id} is ${r.state}: only a soft-deleted (DELETEd) service drains`;
      return { detail, state: r.state, activeLegs };
    });
    if (!refusal) await this.d.jobs.send(COLLECT_JOB, { id }, { singletonKey: id });
    return refusal;
  }

  /** The drain job: hard-deletes when free, else tries again later (pg-boss retry with backoff). */
  async drainJob(id: string): Promise<void> {
    const current = await this.d.actors.get(factoryServiceKind, id);
    if (!current || current.state !== 'SOFT_DELETED') return; // expedited or collected meanwhile
    const refusal = await this.drain(id);
    if (refusal) throw new Error(refusal.detail);
  }

  /** Garbage collection: the hard-deleted row, its sealed secrets and its actor go. */
  async collect(id: string): Promise<void> {
    const collected = await this.d.actors.run(async (uow) => {
      if (!(await repo.purge(uow.sql, id))) return false;
      await uow.delete(factoryServiceKind, id);
      return true;
    });
    if (collected) this.d.log.info({ factoryServiceId: id }, 'factory service collected');
  }

  /**
   * Scheduled: forgets signatures past the skew window, drains due services and collects
   * hard-deleted ones whose jobs a crash lost.
   */
  async sweep(): Promise<void> {
    await repo.sweepSignatures(this.d.sql, this.d.clock.now());
    for (const id of await repo.drainDue(this.d.sql, new Date(this.d.clock.now().getTime() - DRAIN_GRACE_SECONDS * 1000))) await this.drain(id);
    for (const id of await repo.uncollected(this.d.sql)) await this.collect(id);
  }

  /** The service's policy: the list an admin set, or its role's default. */
  async policy(caller: Caller, id: string): Promise<PolicyView> {
    const row = await repo.find(this.d.sql, caller.accountId, id);
    if (!row) throw notFound(`factory service ${id} not found`);
    return { factory_service_id: row.id, role: row.role, default: row.policy_allow === null, allow: [...(row.policy_allow ?? defaultPolicy(row.role))] };
  }

  /**
   * Replaces the service's policy (null: back to the role's default); a 400 names the first
   * entry no policy may hold. Every node drops the cached signing identity, so the next signed
   * request anywhere is judged by the new list.
   */
  async setPolicy(caller: Caller, id: string, allow: readonly string[] | null): Promise<PolicyView> {
    const stored = allow === null ? null : normalizePolicy(allow, this.d.declaredAction);
    const current = await this.get(caller, id);
    await this.d.actors.run(async (uow) => {
      // the machine decides whether the service may still change (409 once soft-deleted)
      await uow.send(factoryServiceKind, id, { type: 'UPDATE', at: this.d.clock.now().toISOString(), by: caller.sub });
      await repo.setPolicy(uow.sql, id, stored, this.d.clock.now());
    });
    await this.d.signingChanged(current.access_key_id);
    this.d.log.info({ factoryServiceId: id, by: caller.sub, allow: stored ?? 'default' }, 'factory service policy set');
    return this.policy(caller, id);
  }

  private ownOnly(caller: Caller, id: string, what: string): void {
    if (caller.factoryServiceId && caller.factoryServiceId !== id) {
      throw refused(`a factory service may ${what} (it is ${caller.factoryServiceId}); an account admin manages the others`);
    }
  }
}
