import fs from 'node:fs';
import https from 'node:https';
import type { AddressInfo } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestGateway, type TestGateway } from '../helpers/gateway.js';
import { createAccount, type TestAccount } from '../helpers/accounts.js';
import { waitFor } from '../helpers/wait.js';
import { ManualClock } from '../../src/lib/clock.js';
import { allocate, maxShare, shareOf, type Demand } from '../../src/feed/shares.js';
import { bornThings, createTestCa, startReceiver, type TestCa } from './helpers.js';

/**
 * Fair webhook delivery and failure accounting (issue 40), with real HTTPS receivers (a CA of the
 * test, trusted through OUTBOUND_CA_FILE) and the default delivery settings: WEBHOOK_TIMEOUT_MS
 * 10 s, WEBHOOK_MAX_ATTEMPTS 8, WEBHOOK_RETRY_BASE_MS 5 s, WEBHOOK_SUSPEND_AFTER 5,
 * WEBHOOK_CONCURRENCY 64. A hanging receiver accepts the connection, reads the request and never
 * answers.
 */
const PATH = '/provisioning/v1/state-change-subscriptions';
const SLOTS = 64;
const TIMEOUT_MS = 10_000;

let ca: TestCa;
beforeAll(async () => {
  ca = await createTestCa();
});
afterAll(() => {
  if (ca) fs.rmSync(ca.dir, { recursive: true, force: true });
});

/** An HTTPS receiver that never answers: counts the requests it holds open, per path and in all, and their peaks. */
async function startHangingReceiver(ca: TestCa) {
  const open = new Map<string, number>();
  const peak = new Map<string, number>();
  let total = 0;
  let peakTotal = 0;
  const requests: { path: string; id: string }[] = [];
  const server = https.createServer({ key: ca.keyPem, cert: ca.certPem }, (req, res) => {
    const p = req.url ?? '/';
    requests.push({ path: p, id: String(req.headers['webhook-id']) });
    open.set(p, (open.get(p) ?? 0) + 1);
    peak.set(p, Math.max(peak.get(p) ?? 0, open.get(p)!));
    peakTotal = Math.max(peakTotal, ++total);
    res.on('close', () => {
      open.set(p, open.get(p)! - 1);
      total--;
    });
    req.resume();
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const port = (server.address() as AddressInfo).port;
  return {
    url: (p: string) => `https://127.0.0.1:${port}${p}`,
    requests,
    open: (p?: string) => (p === undefined ? total : open.get(p) ?? 0),
    peak: (p?: string) => (p === undefined ? peakTotal : peak.get(p) ?? 0),
    close: () => new Promise<void>((resolve) => {
      server.closeAllConnections();
      server.close(() => resolve());
    }),
  };
}

async function subscribe(gw: TestGateway, account: TestAccount, targetUrl: string): Promise<string> {
  const res = await gw.http.post(PATH, { target_url: targetUrl, acknowledge_polling_still_mandatory: true }, { token: account.admin });
  expect(res.status, res.text).toBe(201);
  return res.body.id;
}

const percentile = (sorted: number[], p: number) => sorted[Math.min(sorted.length - 1, Math.ceil(p * sorted.length) - 1)];

describe('shares of the delivery slots (src/feed/shares.ts)', () => {
  const d = (accountId: string, subscriptionId: string, inFlight: number, due: number): Demand => ({ accountId, subscriptionId, inFlight, due });
  const sum = (m: Map<string, number>, ids: string[]) => ids.reduce((n, id) => n + (m.get(id) ?? 0), 0);

  it('an account alone takes at most half the slots, a subscription alone half of that', () => {
    expect(shareOf(SLOTS, 1)).toBe(32);
    expect(maxShare(SLOTS)).toBe(16);
    expect(allocate(SLOTS, [d('A', 'a1', 0, 100)]).get('a1')).toBe(16);
    const eight = Array.from({ length: 8 }, (_, i) => d('A', `a${i}`, 0, 100));
    const picks = allocate(SLOTS, eight);
    // 32 / (8 + 1) = 3 each: 24 of 64, room left for a newcomer
    expect(eight.map((x) => picks.get(x.subscriptionId))).toEqual(Array(8).fill(3));
  });

  it('an account arriving beside a busy one gets slots at once, the busy one none above its share', () => {
    const a = Array.from({ length: 8 }, (_, i) => d('A', `a${i}`, 3, 100));
    const picks = allocate(SLOTS, [...a, d('B', 'b', 0, 50)]);
    // two accounts: 64 / 3 = 21 each; A holds 24 already; B's one subscription 21 / 2 = 10
    expect(sum(picks, a.map((x) => x.subscriptionId))).toBe(0);
    expect(picks.get('b')).toBe(10);
  });

  it('with about as many accounts as slots, each holds one: the newcomers get theirs, the busy ones no second', () => {
    const busy = Array.from({ length: 60 }, (_, i) => d(`X${i}`, `x${i}`, 1, 5));
    const picks = allocate(SLOTS, [...busy, d('B', 'b', 0, 5), d('C', 'c', 0, 5)]);
    expect(picks.get('b')).toBe(1);
    expect(picks.get('c')).toBe(1);
    expect(sum(picks, busy.map((x) => x.subscriptionId))).toBe(0);
  });

  it('a subscription is topped up in batches: once at most half its share is in flight, then to its share', () => {
    expect(allocate(SLOTS, [d('A', 'a', 9, 100)]).size).toBe(0);
    expect(allocate(SLOTS, [d('A', 'a', 8, 100)]).get('a')).toBe(8);
  });

  it('never more than the free slots, nor more than is due', () => {
    expect(allocate(SLOTS, [d('A', 'a', 63, 0), d('B', 'b', 0, 9)]).get('b')).toBe(1);
    expect(allocate(SLOTS, [d('A', 'a', 0, 2)]).get('a')).toBe(2);
    expect(allocate(1, [d('A', 'a', 0, 5), d('B', 'b', 0, 5)]).size).toBe(1);
  });
});

describe('one account with 8 hanging receivers and 100 changes; another with one receiver and 50 changes', () => {
  let gw: TestGateway;
  let hanging: Awaited<ReturnType<typeof startHangingReceiver>>;
  let receiver: Awaited<ReturnType<typeof startReceiver>>;

  beforeAll(async () => {
    hanging = await startHangingReceiver(ca);
    receiver = await startReceiver(ca);
    // the default delivery settings: only the receivers' trust is set
    gw = await startTestGateway({ ALLOW_PRIVATE_TARGETS: 'true', OUTBOUND_CA_FILE: ca.caFile });
  });
  afterAll(async () => {
    // the receivers go first: the gateway's attempts end with their connections
    await hanging?.close();
    await receiver?.close();
    await gw?.close();
  });

  it("B's deliveries arrive within seconds (p99 < 2 s from commit, below the horizon); A holds no more than its share; A's timeouts count against A's subscriptions", async () => {
    const A = await createAccount(gw);
    const B = await createAccount(gw);
    const aSubs: string[] = [];
    for (let i = 1; i <= 8; i++) aSubs.push(await subscribe(gw, A, hanging.url(`/a${i}`)));
    const bSub = await subscribe(gw, B, receiver.url('/b'));

    const aStarted = Date.now();
    await bornThings(gw, A.id, 100);
    // A's attempts hang: its share of the node fills (3 per subscription while it is alone)
    await waitFor(() => hanging.open() >= 24, 20_000, "A's share of attempts in flight");

    // each change's time is when it could be dispatched: committed and below the horizon, which a
    // transaction of another test file (any database of the server) may hold back for seconds
    const committed = new Map<string, number>();
    for (let batch = 0; batch < 5; batch++) {
      const ids = await bornThings(gw, B.id, 10);
      const [{ xid }] = await gw.db.sql<{ xid: string }[]>`select max(xid)::text as xid from domain_events where actor_type = 'thing' and actor_id = any(${ids}::text[])`;
      await waitFor(async () => (await gw.db.sql<{ past: boolean }[]>`select pg_snapshot_xmin(pg_current_snapshot()) > ${xid}::xid8 as past`)[0].past, 60_000, "B's changes below the horizon", 20);
      const at = Date.now();
      for (const id of ids) committed.set(id, at);
      await new Promise((r) => setTimeout(r, 300));
    }
    const arrived = await waitFor(() => (receiver.at('/b').length >= 50 ? receiver.at('/b') : undefined), 60_000, "B's 50 deliveries");
    const latencies = arrived.map((r) => r.at - committed.get(JSON.parse(r.body).data.thing_id)!).sort((x, y) => x - y);
    console.log(`B's deliveries beside 8 hanging subscriptions: p50 ${percentile(latencies, 0.5)} ms, p99 ${percentile(latencies, 0.99)} ms, max ${latencies[latencies.length - 1]} ms`);
    expect(new Set(arrived.map((r) => r.headers['webhook-id'])).size).toBe(50);
    expect(percentile(latencies, 0.99)).toBeLessThan(2000);
    // A was really hanging all along: none of A's changes was answered
    expect(hanging.open()).toBeGreaterThanOrEqual(8);

    // no account above its share of the node's 64 slots, no subscription above its share of A's
    expect(hanging.peak()).toBeLessThanOrEqual(shareOf(SLOTS, 1));
    for (let i = 1; i <= 8; i++) expect(hanging.peak(`/a${i}`)).toBeLessThanOrEqual(shareOf(shareOf(SLOTS, 1), 8));

    // a timed-out attempt (10 s, the default) is a failed attempt of the subscription that made it
    await new Promise((r) => setTimeout(r, Math.max(0, aStarted + TIMEOUT_MS + 2000 - Date.now())));
    const failed = await waitFor(async () => {
      const rows = await gw.db.sql<{ subscription_id: string; attempts: number; last_error: string }[]>`
        select subscription_id, attempts, last_error from webhook_deliveries where subscription_id = any(${aSubs}::uuid[]) and last_error is not null`;
      // wait for every subscription, not for 8 rows: two rows of one subscription may come first
      return new Set(rows.map((r) => r.subscription_id)).size >= 8 ? [...rows] : undefined;
    }, 15_000, "a timed-out attempt of each of A's 8 subscriptions");
    for (const r of failed) {
      expect(r.last_error).toBe(`no answer within ${TIMEOUT_MS} ms`);
      expect(r.attempts).toBeGreaterThanOrEqual(1);
    }
    expect(new Set(failed.map((r) => r.subscription_id)).size).toBe(8);
    const [b] = await gw.db.sql<{ status: string; consecutive_failures: number }[]>`select status, consecutive_failures from state_change_subscriptions where id = ${bSub}`;
    expect(b).toEqual({ status: 'ACTIVE', consecutive_failures: 0 });
    expect(await gw.db.sql`select 1 from webhook_deliveries where subscription_id = ${bSub}`).toHaveLength(0);
  }, 120_000);
});

describe('a receiver that never answers, with the default settings, on a ManualClock', () => {
  const clock = new ManualClock();
  let gw: TestGateway;
  let hanging: Awaited<ReturnType<typeof startHangingReceiver>>;

  beforeAll(async () => {
    hanging = await startHangingReceiver(ca);
    gw = await startTestGateway({ ALLOW_PRIVATE_TARGETS: 'true', OUTBOUND_CA_FILE: ca.caFile }, { clock });
  });
  afterAll(async () => {
    await hanging?.close();
    await gw?.close();
  });

  /** Does the worker top up a lone subscription holding `held` attempts (at most half its share)? */
  const toppedUp = (held: number) => held <= maxShare(SLOTS) / 2;

  /**
   * The delivery rows of `sub` once the worker has done all it can at the clock's time: each
   * leased row's request is open at the receiver, and either the subscription is not topped up
   * now or nothing more is due. Undefined while not settled.
   */
  async function settled(sub: string) {
    const now = clock.now();
    const [s] = await gw.db.sql<{ status: string }[]>`select status from state_change_subscriptions where id = ${sub}`;
    if (s.status === 'SUSPENDED') return { suspended: true as const, rows: [], leased: [], due: [] };
    const rows = await gw.db.sql<{ event_seq: string; lease_until: Date | null; next_attempt_at: Date }[]>`
      select event_seq, lease_until, next_attempt_at from webhook_deliveries where subscription_id = ${sub} order by event_seq`;
    const leased = rows.filter((r) => r.lease_until && r.lease_until > now);
    const due = rows.filter((r) => !(r.lease_until && r.lease_until > now) && r.next_attempt_at <= now);
    if (hanging.open() !== leased.length) return undefined;
    // the dispatcher has not made the subscription's deliveries yet: nothing to settle on
    if (rows.length === 0) return undefined;
    if (toppedUp(leased.length) && due.length > 0) return undefined;
    return { rows, leased, due };
  }

  it('200 changes pending: the oldest deliveries run out of their 8 attempts on schedule, whatever the backlog; suspended within the documented 6.6 to 13 minutes; the owner is notified', async () => {
    const account = await createAccount(gw);
    const sub = await subscribe(gw, account, hanging.url('/dead'));
    const t0 = clock.now().getTime();
    await bornThings(gw, account.id, 200);

    // the test moves the clock from one thing the worker waits for to the next: an attempt's
    // deadline (its lease less the 30 s margin) or the next retry falling due
    let steps = 0;
    const started = Date.now();
    for (;;) {
      const state = await waitFor(() => settled(sub), 20_000, `the worker to settle at +${(clock.now().getTime() - t0) / 1000} s`, 20);
      if ('suspended' in state) break;
      const deadlines = state.leased.map((r) => r.lease_until!.getTime() - 30_000);
      const retries = toppedUp(state.leased.length) ? state.rows.filter((r) => !r.lease_until || r.lease_until <= clock.now()).map((r) => r.next_attempt_at.getTime()) : [];
      const next = Math.min(...deadlines, ...retries);
      expect(Number.isFinite(next), 'something to wait for').toBe(true);
      clock.set(Math.max(next, clock.now().getTime()));
      // an attempt cut at its deadline: wait until the worker has seen it (its request closes)
      if (deadlines.includes(next)) await waitFor(() => hanging.open() < state.leased.length, 20_000, 'an attempt cut at its deadline', 20);
      if (++steps > 2000) throw new Error('no suspension after 2000 steps');
    }
    const [s] = await gw.db.sql<{ status: string; suspended_at: Date; suspended_reason: string; consecutive_failures: number }[]>`
      select status, suspended_at, suspended_reason, consecutive_failures from state_change_subscriptions where id = ${sub}`;
    const after = (s.suspended_at.getTime() - t0) / 1000;
    console.log(`suspended ${after} s (${(after / 60).toFixed(1)} min) after the changes on the gateway clock; ${steps} clock steps in ${Date.now() - started} ms`);
    expect(s).toMatchObject({ status: 'SUSPENDED', suspended_reason: 'delivery-failures', consecutive_failures: 5 });
    // 8 attempts of 10 s and 7 backoffs of 5 s * 2^(n-1), jittered 1/2 to 1: 397.5 to 715 s; a
    // retry may wait for a slot of its subscription's share (held by its own newer deliveries) up
    // to one timeout each: at most 70 s more
    expect(after).toBeGreaterThanOrEqual(397.5);
    expect(after).toBeLessThanOrEqual(715 + 70);

    // deliveries were attempted 8 times at most (every timeout counted), 5 were dropped after their 8th
    const attempts = new Map<string, number>();
    for (const r of hanging.requests) attempts.set(r.id, (attempts.get(r.id) ?? 0) + 1);
    expect([...attempts.values()].filter((n) => n === 8).length).toBeGreaterThanOrEqual(5);
    expect(Math.max(...attempts.values())).toBe(8);
    const metrics = await gw.gw.metrics.getSingleMetric('webhook_delivery_attempts_total')!.get();
    // (attempts cut at the same deadline may drop one more beside the fifth: counted, the subscription already suspended)
    expect(metrics.values.find((v) => v.labels.outcome === 'dropped')?.value).toBeGreaterThanOrEqual(5);
    // suspension drops the rest of its pending deliveries
    expect(await gw.db.sql`select 1 from webhook_deliveries where subscription_id = ${sub}`).toHaveLength(0);

    // its owner is told: a tenant notification of the account
    const notified = await waitFor(async () => {
      const res = await gw.http.get('/api/notifications/feed', { token: account.admin, headers: { 'x-account-id': account.id } });
      return res.body.items?.find((n: { template: string }) => n.template === 'webhook/subscription-suspended');
    }, 20_000, 'the suspension notification');
    expect(notified).toMatchObject({ scope: 'tenant', accountId: account.id, severity: 'warning', actionUrl: `/state-change-subscriptions/${sub}` });
    expect(notified.title).toBe(`Webhook subscription ${sub} was suspended (delivery-failures)`);
  }, 300_000);
});
