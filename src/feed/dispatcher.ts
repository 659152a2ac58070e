import crypto from 'node:crypto';
import type { Sql } from '../db/client.js';
import type { Logger } from '../log.js';
import { after, horizonPosition } from './cursor.js';
import { itemOf } from './feed.js';
import * as repo from './repo.js';

const BATCH = 500;
const RETRY_ELSEWHERE_MS = 200;
/** Changes arriving together are dispatched together: a round starts this long after a wake. */
const GATHER_MS = 25;

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
 * a change never waits for it. It walks the log in the feed's order below the horizon (so no
 * change is passed over while it commits late), from a cursor row that one node at a time locks;
 * deliveries and the cursor move in one transaction, so a crash loses or repeats nothing (and
 * the unique (subscription, change) key would absorb a repeat). Woken by every committed change
 * (any node) and by a poll, for a horizon that moved on without a new change.
 */
export class Dispatcher {
  private running = false;
  private again = false;
  private stopped = false;
  private retry?: NodeJS.Timeout;
  private gathering?: NodeJS.Timeout;

  constructor(private readonly d: { sql: Sql; log: Logger; onDeliveries(): void }) {}

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
        let n: number;
        do n = await this.once(); while (n === BATCH && !this.stopped);
        if (n === -1 && !this.stopped) {
          // another node dispatches; look again shortly in case it read before our change was final
          clearTimeout(this.retry);
          this.retry = setTimeout(() => this.wake(), RETRY_ELSEWHERE_MS);
        }
      } while (this.again && !this.stopped);
    } catch (err) {
      this.d.log.error({ err }, 'state-change dispatch failed; retried at the next change or poll');
    }
  }

  /** One batch: the changes processed, or -1 when another node holds the cursor. */
  async once(): Promise<number> {
    // read without a lock first: an idle poll writes nothing
    if (!(await repo.dispatchPending(this.d.sql))) return 0;
    let inserted = 0;
    const n = await this.d.sql.begin(async (tx) => {
      const from = await repo.lockDispatchCursor(tx);
      if (!from) return -1;
      // no ACTIVE subscription anywhere: move past everything final without reading it. The
      // horizon is taken before the check, so a subscription made after the check only misses
      // changes whose transactions had ended before it existed.
      const horizon = await repo.horizon(tx);
      if (!(await repo.anyActiveSubscription(tx))) {
        const to = horizonPosition(horizon);
        if (after(to, from)) await repo.moveDispatchCursor(tx, to);
        return 0;
      }
      const rows = await repo.changesOfAll(tx, from, BATCH);
      if (rows.length === 0) return 0;
      const subs = await repo.activeSubscriptionsOf(tx, [...new Set(rows.map((r) => r.account_id))]);
      if (subs.length) {
        const deliveries = rows.flatMap((r) => {
          const wanted = subs.filter((s) => matches(s, r));
          if (wanted.length === 0) return [];
          const body = deliveryBody(r);
          return wanted.map((s) => ({ id: crypto.randomUUID(), subscription_id: s.id, event_seq: r.seq, body }));
        });
        for (let i = 0; i < deliveries.length; i += 5000) inserted += await repo.insertDeliveries(tx, deliveries.slice(i, i + 5000));
      }
      const last = rows[rows.length - 1];
      await repo.moveDispatchCursor(tx, { xid: BigInt(last.xid), seq: BigInt(last.seq) });
      return rows.length;
    });
    if (inserted > 0) this.d.onDeliveries();
    return n;
  }
}
