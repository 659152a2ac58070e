import crypto from 'node:crypto';
import net from 'node:net';
import type { ActorKind, ActorStore, UnitOfWork } from '../actors/store.js';
import type { Sql } from '../db/client.js';
import type { Logger } from '../log.js';
import type { Clock } from '../lib/clock.js';
import { iso } from '../lib/encoding.js';
import { DomainError, conflict, invalid, notFound } from '../lib/errors.js';
import { nonPublic } from '../lib/targets.js';
import { isUuid } from '../http/auth/principal.js';
import type { Sealer } from '../pki/sealer.js';
import { subscriptionMachine, type SubscriptionEvent, type SuspendReason } from '../../machines/subscription.js';
import type { Scope } from './cursor.js';
import * as repo from './repo.js';
import { newWebhookSecret } from './signature.js';

export const subscriptionKind: ActorKind<typeof subscriptionMachine> = {
  type: 'subscription',
  machine: subscriptionMachine,
  accountOf: (c) => c.accountId,
  projection: {
    table: 'state_change_subscriptions',
    columns: ['status', 'consecutive_failures', 'suspended_at', 'suspended_reason'],
    project: (s, state) => ({
      status: state, consecutive_failures: s.context.consecutiveFailures, suspended_at: s.context.suspendedAt, suspended_reason: s.context.suspendedReason,
    }),
  },
};

export interface EventFilter {
  new_states?: string[];
  thing_ids?: string[];
}

export interface SubscriptionView {
  id: string;
  account_id: string;
  registrar_id: string | null;
  target_url: string;
  acknowledge_polling_still_mandatory: true;
  event_filter: EventFilter | null;
  status: 'ACTIVE' | 'SUSPENDED';
  consecutive_failures: number;
  suspended_at: string | null;
  suspended_reason: SuspendReason | null;
  created_at: string;
  updated_at: string;
}

export interface Caller extends Scope {
  sub: string;
}

export interface CreateInput {
  target_url: string;
  event_filter?: EventFilter | null;
}

export interface PatchInput {
  target_url?: string;
  event_filter?: EventFilter | null;
  status?: 'ACTIVE' | 'SUSPENDED';
}

const view = (r: repo.SubscriptionRow): SubscriptionView => ({
  id: r.id, account_id: r.account_id, registrar_id: r.registrar_id, target_url: r.target_url, acknowledge_polling_still_mandatory: true,
  event_filter: r.event_filter, status: r.status as 'ACTIVE' | 'SUSPENDED', consecutive_failures: r.consecutive_failures,
  suspended_at: iso(r.suspended_at), suspended_reason: r.suspended_reason as SuspendReason | null, created_at: iso(r.created_at), updated_at: iso(r.updated_at),
});

const unknownSubscription = (id: string) => notFound(`state-change subscription ${id} not found`, { code: 'THM-60100', type: 'subscription-not-found' });

const suspendedEdit = (id: string) => conflict(
  `state-change subscription ${id} is SUSPENDED: the only change it accepts is PATCH {"status":"ACTIVE"}; reactivate it first, then edit or delete it`,
  { code: 'THM-60150', type: 'subscription-suspended', extra: { subscription_status: 'SUSPENDED' } },
);

/** an empty filter (or one with only empty lists) stored as none: every change */
const normalFilter = (f: EventFilter | null | undefined): EventFilter | null => {
  if (!f) return null;
  const out: EventFilter = {};
  if (f.new_states?.length) out.new_states = [...new Set(f.new_states)];
  if (f.thing_ids?.length) out.thing_ids = [...new Set(f.thing_ids.map((t) => t.toLowerCase()))];
  return Object.keys(out).length ? out : null;
};

/**
 * State-change subscriptions: create (the webhook secret is returned once), read, list, PATCH,
 * DELETE. The subscription machine decides every lifecycle step, including what a SUSPENDED
 * subscription accepts; delivery outcomes reach it through `delivered`, `dropped` and `gone`.
 */
export class Subscriptions {
  constructor(private readonly d: { sql: Sql; actors: ActorStore; clock: Clock; log: Logger; sealer: Sealer; allowPrivateTargets: boolean; suspendAfter: number }) {}

  async create(caller: Caller, input: CreateInput): Promise<SubscriptionView & { secret: string }> {
    this.checkTarget(input.target_url);
    const id = crypto.randomUUID();
    const secret = newWebhookSecret();
    const now = this.d.clock.now();
    await this.d.actors.run(async (uow) => {
      await repo.insertSubscription(uow.sql, {
        id, account_id: caller.accountId, registrar_id: caller.registrarId, target_url: input.target_url, event_filter: normalFilter(input.event_filter),
        secret_sealed: this.d.sealer.seal(secret), created_by: caller.sub, created_at: now,
      });
      await uow.create(subscriptionKind, id, { id, accountId: caller.accountId, suspendAfter: this.d.suspendAfter, createdAt: now.toISOString() });
      // deliveries start with the changes after this point (the log before it is not replayed)
      await repo.startDispatchIfIdle(uow.sql, caller.accountId, id);
    });
    this.d.log.info({ subscriptionId: id, accountId: caller.accountId, by: caller.sub }, 'state-change subscription created');
    return { ...(await this.get(caller, id)), secret };
  }

  async get(caller: Caller, id: string): Promise<SubscriptionView> {
    if (!isUuid(id)) throw unknownSubscription(id);
    const row = await repo.findSubscription(this.d.sql, caller.accountId, id);
    if (!row) throw unknownSubscription(id);
    return view(row);
  }

  async list(caller: Caller, q: { after?: string; limit: number }): Promise<{ items: SubscriptionView[]; next_cursor: string | null }> {
    const rows = await repo.listSubscriptions(this.d.sql, caller.accountId, q.after, q.limit + 1);
    const items = rows.slice(0, q.limit).map(view);
    return { items, next_cursor: rows.length > q.limit ? items[items.length - 1].id : null };
  }

  /**
   * Edits first, then the status: a SUSPENDED subscription refuses the edit (THM-60150) before
   * a status=ACTIVE in the same body could wake it.
   */
  async patch(caller: Caller, id: string, input: PatchInput): Promise<SubscriptionView> {
    const before = await this.get(caller, id);
    if (input.target_url !== undefined) this.checkTarget(input.target_url);
    const at = this.d.clock.now();
    const edits = input.target_url !== undefined || input.event_filter !== undefined;
    await this.d.actors.run(async (uow) => {
      if (edits) {
        await this.step(uow, id, { type: 'UPDATE', at: at.toISOString(), by: caller.sub });
        await repo.updateSubscription(uow.sql, id, {
          target_url: input.target_url, event_filter: input.event_filter === undefined ? undefined : normalFilter(input.event_filter),
        }, at);
      }
      if (input.status) {
        await this.step(uow, id, { type: input.status === 'ACTIVE' ? 'ACTIVATE' : 'SUSPEND', at: at.toISOString(), by: caller.sub });
        if (input.status === 'SUSPENDED') await repo.dropPending(uow.sql, id);
        // reactivated: changes made while it was suspended are not delivered later
        else if (before.status === 'SUSPENDED') await repo.startDispatchIfIdle(uow.sql, caller.accountId, id);
      }
    });
    return this.get(caller, id);
  }

  async delete(caller: Caller, id: string): Promise<void> {
    await this.get(caller, id);
    await this.d.actors.run(async (uow) => {
      await this.step(uow, id, { type: 'DELETE', at: this.d.clock.now().toISOString(), by: caller.sub });
      await repo.purgeSubscription(uow.sql, id);
      await uow.delete(subscriptionKind, id);
    });
    this.d.log.info({ subscriptionId: id, by: caller.sub }, 'state-change subscription deleted');
  }

  /** A delivery succeeded: ends a failure run (called only while one is counted). */
  delivered(id: string): Promise<void> {
    return this.outcome(id, { type: 'DELIVERED', at: this.d.clock.now().toISOString() });
  }

  /** A delivery failed its last attempt and was dropped. */
  dropped(id: string, lastStatus: number | null): Promise<void> {
    return this.outcome(id, { type: 'DELIVERY_DROPPED', at: this.d.clock.now().toISOString(), lastStatus });
  }

  /** The receiver answered 410 Gone: suspended at once. */
  gone(id: string): Promise<void> {
    return this.outcome(id, { type: 'RECEIVER_GONE', at: this.d.clock.now().toISOString() });
  }

  /** Sends a delivery outcome; a suspension drops the pending deliveries with it. */
  private async outcome(id: string, event: SubscriptionEvent): Promise<void> {
    try {
      await this.d.actors.run(async (uow) => {
        const r = await uow.trySend(subscriptionKind, id, event);
        if ('refused' in r || r.state !== 'SUSPENDED') return;
        const dropped = await repo.dropPending(uow.sql, id);
        this.d.log.warn({ subscriptionId: id, reason: r.snapshot.context.suspendedReason, droppedDeliveries: dropped }, 'state-change subscription suspended');
      });
    } catch (err) {
      // deleted meanwhile: nothing left to tell
      if (err instanceof DomainError && err.kind === 'not_found') return;
      throw err;
    }
  }

  private async step(uow: UnitOfWork, id: string, event: SubscriptionEvent): Promise<void> {
    const r = await uow.trySend(subscriptionKind, id, event);
    if ('refused' in r) {
      if (r.state === 'SUSPENDED') throw suspendedEdit(id);
      throw conflict(`state-change subscription ${id} is ${r.state}: ${event.type} is not accepted`, { extra: { subscription_status: r.state } });
    }
  }

  /**
   * Literal loopback, link-local and private addresses are refused at once; host names are
   * resolved and checked at each delivery (a DNS answer may change), which connects only to
   * the address it checked.
   */
  private checkTarget(targetUrl: string): void {
    if (this.d.allowPrivateTargets) return;
    const host = new URL(targetUrl).hostname.replace(/^\[|\]$/g, '');
    const why = net.isIP(host) ? nonPublic(host) : /^localhost\.?$/i.test(host) || /\.localhost\.?$/i.test(host) ? 'a loopback name' : undefined;
    if (why) {
      throw invalid(`target_url ${new URL(targetUrl).origin} is ${why}; the gateway does not deliver to loopback, link-local or private targets (ALLOW_PRIVATE_TARGETS=true allows them in development)`, { type: 'target-refused' });
    }
  }
}
