import crypto from 'node:crypto';
import type { Sql } from '../db/client.js';
import type { Clock } from '../lib/clock.js';
import type { Logger } from '../log.js';
import { itemOf } from './feed.js';
import * as repo from './repo.js';

const BATCH = 500;
const RETRY_ELSEWHERE_MS = 200;
/** Changes arriving together are dispatched together: a round starts this long after a wake. */
const GATHER_MS = 25;
/** How often a round asks whether changes are held back by the horizon (the fast poll's period). */
const HELD_BACK_EVERY_MS = 1000;
/** Accounts dispatched per round (more follow in the next round at once). */
const ACCOUNTS_PER_ROUND = 50;

/** Does a subscription want this change? Filters and the registrar's models, all ANDed. */
function matches(s: repo.DispatchCandidate, r: repo.ChangeRow): boolean {
  if (s.account_id !== r.account_id) return false;
  if (s.new_states && !s.new_states.includes(r.to_state)) return false;
  if (s.thing_ids && !s.thing_ids.includes(r.thing_id)) return false;
  if (s.registrar_models && !(r.model_id && s.registrar_models.includes(r.model_id))) return false;
  return true;
}

/** The delivery body: Standard Webhooks' { type, timestamp, data } with the feed's item. */
export function deliveryBody(r: repo.ChangeRow): string {
  const item = itemOf(r);
  return JSON.stringify({ type: 'thing.state_changed', timestamp: item.changed_at, data: item });
}

/**
 * Turns the state-change log into webhook deliveries, after the fact: the transaction that made
 * a change never waits for it. Only accounts with an ACTIVE subscription are read (a tenant
 * without one costs nothing); each is walked in the feed's order below the horizon (so no change
 * is passed over while it commits late) from its cursor row, which one node at a time locks;
 * deliveries and the cursor move in one transaction, so a crash loses or repeats nothing (and the
 * unique (subscription, change) key would absorb a repeat). Woken by every committed change (any
 * node) and by a poll, for a horizon that moved on without a new change.
 */
export class Dispatcher {
  private running = false;
  private again = false;
  private stopped = false;
  private retry?: NodeJS.Timeout;
  private gathering?: NodeJS.Timeout;
  /** the last round left changes behind the horizon (see repo.changesHeldBack): the poll stays fast */
  heldBack = false;
  private heldBackAt = 0;

  constructor(private readonly d: { sql: Sql; log: Logger; clock: Clock; onDeliveries(): void }) {}

  /** Asks for a round (many wakes, one round: every committed change wakes it). */
  wake(): void {
    if (this.stopped) return;
    if (this.running) {
      this.again = true;
      return;
    }
    if (this.gathering) return;
    this.gathering = setTimeout(() => {
      this.gathering = undefined;
      this.running = true;
      void this.run().finally(() => {
        this.running = false;
      });
    }, GATHER_MS);
  }

  stop(): void {
    this.stopped = true;
    clearTimeout(this.retry);
    clearTimeout(this.gathering);
  }

  private async run(): Promise<void> {
    try {
      do {
        this.again = false;
        let r: { more: boolean; elsewhere: boolean };
        do r = await this.once(); while (r.more && !this.stopped);
        // asked at most once a second (the poll it decides is a one-second one; a round runs at every
        // change, and the query visits every account with an active subscription)
        if (!this.stopped && Date.now() - this.heldBackAt >= HELD_BACK_EVERY_MS) {
          this.heldBackAt = Date.now();
          this.heldBack = await repo.changesHeldBack(this.d.sql);
        }
        if (r.elsewhere && !this.stopped) {
          // another node dispatches an account; look again shortly in case it read before our change was final
          clearTimeout(this.retry);
          this.retry = setTimeout(() => this.wake(), RETRY_ELSEWHERE_MS);
        }
      } while (this.again && !this.stopped);
    } catch (err) {
      this.d.log.error({ err }, 'state-change dispatch failed; retried at the next change or poll');
    }
  }

  /** One round over the accounts with something to dispatch: is more waiting, was an account busy elsewhere. */
  async once(): Promise<{ more: boolean; elsewhere: boolean }> {
    const accounts = await repo.accountsToDispatch(this.d.sql, ACCOUNTS_PER_ROUND);
    let more = accounts.length === ACCOUNTS_PER_ROUND;
    let elsewhere = false;
    let inserted = 0;
    for (const accountId of accounts) {
      const r = await this.account(accountId);
      if (r === undefined) elsewhere = true;
      else {
        inserted += r.inserted;
        if (r.changes === BATCH) more = true;
      }
    }
    if (inserted > 0) this.d.onDeliveries();
    return { more, elsewhere };
  }

  /** One batch of an account's changes; undefined when another node holds its cursor. */
  private async account(accountId: string): Promise<{ changes: number; inserted: number } | undefined> {
    return this.d.sql.begin(async (tx) => {
      const from = await repo.lockDispatchCursor(tx, accountId);
      if (!from) return undefined;
      const { rows } = await repo.changesPage(tx, { accountId, registrarId: null }, from, BATCH);
      const batch = rows.slice(0, BATCH);
      if (batch.length === 0) return { changes: 0, inserted: 0 };
      const subs = await repo.activeSubscriptionsOf(tx, accountId);
      // due at once on the gateway's clock (retries and leases are timed on it too)
      const now = this.d.clock.now();
      const deliveries = batch.flatMap((r) => {
        const wanted = subs.filter((s) => matches(s, r));
        if (wanted.length === 0) return [];
        const body = deliveryBody(r);
        return wanted.map((s) => ({ id: crypto.randomUUID(), subscription_id: s.id, event_seq: r.seq, body, next_attempt_at: now, created_at: now }));
      });
      let inserted = 0;
      for (let i = 0; i < deliveries.length; i += 5000) inserted += await repo.insertDeliveries(tx, deliveries.slice(i, i + 5000));
      const last = batch[batch.length - 1];
      await repo.moveDispatchCursor(tx, accountId, { xid: BigInt(last.xid), seq: BigInt(last.seq) });
      return { changes: batch.length, inserted };
    });
  }
}
