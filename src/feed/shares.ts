/**
 * Fair shares of a node's webhook delivery slots (issue 40). Two levels: the node's slots are
 * shared between the accounts with deliveries in flight or due, an account's share between its
 * subscriptions that have some. A share always leaves room for one more claimant:
 * `max(1, floor(pool / (claimants + 1)))`. So the accounts already busy hold at most n/(n+1) of
 * the slots together, and an account that comes along finds free slots at once instead of
 * waiting for someone else's attempts to end (a hanging receiver holds a slot for the whole
 * delivery timeout, and nothing can take it back earlier). The same holds for a subscription
 * beside its account's others: a hanging subscription's attempts wait in its own share.
 */

/** One subscription's work on this node: deliveries in flight, and deliveries due now (counted up to `maxShare`). */
export interface Demand {
  accountId: string;
  subscriptionId: string;
  inFlight: number;
  due: number;
}

/** A share of `pool` among `claimants` that leaves room for one more. */
export const shareOf = (pool: number, claimants: number): number => Math.max(1, Math.floor(pool / (claimants + 1)));

/** The largest share one subscription can get (a lone subscription of a lone account): due rows are counted up to it. */
export const maxShare = (slots: number): number => shareOf(shareOf(slots, 1), 1);

interface Sub { id: string; held: number; due: number; picked: number }
interface Account { held: number; subs: Sub[] }

/**
 * How many due deliveries of each subscription to start now, within `slots - in flight` free
 * slots. Free slots go one at a time to the account holding the fewest (below its share), and in
 * it to the subscription holding the fewest (below its share, with a due delivery left): round
 * robin, so a busy account cannot take the free slots before a quiet one. Ties go to the order of
 * `demands` (the caller shuffles it). A subscription is topped up once at most half its share is
 * in flight, then up to its share: claims come in batches, not one per completed attempt.
 */
export function allocate(slots: number, demands: Demand[]): Map<string, number> {
  const accounts = new Map<string, Account>();
  let free = slots;
  for (const d of demands) {
    if (d.inFlight === 0 && d.due === 0) continue;
    let a = accounts.get(d.accountId);
    if (!a) accounts.set(d.accountId, (a = { held: 0, subs: [] }));
    a.subs.push({ id: d.subscriptionId, held: d.inFlight, due: d.due, picked: 0 });
    a.held += d.inFlight;
    free -= d.inFlight;
  }
  const accountShare = shareOf(slots, accounts.size);
  const picks = new Map<string, number>();
  while (free > 0) {
    let best: { a: Account; s: Sub } | undefined;
    for (const a of accounts.values()) {
      if (a.held >= accountShare || (best && a.held >= best.a.held)) continue;
      const subShare = shareOf(accountShare, a.subs.length);
      let s: Sub | undefined;
      for (const c of a.subs) if (c.held < subShare && c.picked < c.due && (c.picked > 0 || c.held <= subShare / 2) && (!s || c.held < s.held)) s = c;
      if (s) best = { a, s };
    }
    if (!best) break;
    best.a.held++;
    best.s.held++;
    best.s.picked++;
    picks.set(best.s.id, best.s.picked);
    free--;
  }
  return picks;
}
