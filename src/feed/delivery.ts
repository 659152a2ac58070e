import fs from 'node:fs';
import https from 'node:https';
import tls from 'node:tls';
import { Counter, type Registry } from 'prom-client';
import type { Sql } from '../db/client.js';
import type { Clock } from '../lib/clock.js';
import type { Logger } from '../log.js';
import { callError, resolveTarget } from '../lib/targets.js';
import type { Sealer } from '../pki/sealer.js';
import * as repo from './repo.js';
import { allocate, maxShare, type Demand } from './shares.js';
import { signWebhook } from './signature.js';
import type { Subscriptions } from './subscriptions.js';

export interface DeliverySettings {
  timeoutMs: number;
  maxAttempts: number;
  retryBaseMs: number;
  concurrency: number;
  allowPrivateTargets: boolean;
  /** PEM of extra CAs receivers' certificates may chain to (OUTBOUND_CA_FILE) */
  caFile?: string;
}

const MAX_DELAY_MS = 3600_000;
const POLL_MS = 1000;
/**
 * With no claimable delivery at all (nothing pending, or only rows leased elsewhere): the next
 * look. New deliveries wake the worker of the node that dispatched them, completions and retries
 * wake it on their own; this fallback finds what no wake reports (another node's lapsed leases).
 * Issue 36 item 4: an idle node asks twice a minute, not every second.
 */
const IDLE_POLL_MS = 30_000;
/** how often the attempts in flight are held against their deadlines (on the gateway's clock) */
const WATCH_MS = 250;
/** a lease outlives its attempt's deadline by this much (a crashed node's deliveries return after it) */
const LEASE_MARGIN_MS = 30_000;

/** Delay before attempt `attempt + 1`: base * 2^(attempt-1), with jitter (half to full), at most an hour. */
export function retryDelayMs(baseMs: number, attempt: number): number {
  const full = Math.min(MAX_DELAY_MS, baseMs * 2 ** Math.min(30, attempt - 1));
  return Math.round(full / 2 + (Math.random() * full) / 2);
}

/**
 * The TLS trust of deliveries: the public roots, plus OUTBOUND_CA_FILE when set. Built once as a
 * secure context: an agent given `ca` itself concatenates every root into its pool key on each
 * request (most of a delivery's CPU time, measured).
 */
function agentFor(s: DeliverySettings): https.Agent {
  const extra = s.caFile ? fs.readFileSync(s.caFile, 'utf8') : undefined;
  const secureContext = extra ? tls.createSecureContext({ ca: [...tls.rootCertificates, extra] }) : undefined;
  return new https.Agent({ keepAlive: true, maxSockets: s.concurrency, ...(secureContext ? { secureContext } : {}) });
}

/** An attempt in flight on this node. */
interface Attempt {
  accountId: string;
  subscriptionId: string;
  /** gateway-clock ms by which the receiver must have answered */
  deadline: number;
  abort: AbortController;
  /** cut short by stop(): the delivery goes back to the queue uncounted */
  stopping?: boolean;
  done?: Promise<void>;
}

/** Fisher-Yates, in place: ties in the share allocation go to no account in particular. */
function shuffle<T>(items: T[]): T[] {
  for (let i = items.length - 1; i > 0; i--) {
    const j = Math.floor(Math.random() * (i + 1));
    [items[i], items[j]] = [items[j], items[i]];
  }
  return items;
}

/**
 * Delivers pending webhook deliveries: claims due rows (leased, so a crashed node's deliveries
 * return to the queue when the lease lapses), POSTs each signed body to its target over HTTPS,
 * then deletes the row on a 2xx, or schedules the next attempt with backoff, or drops it after
 * the last attempt. A 410 suspends the subscription; so do WEBHOOK_SUSPEND_AFTER drops in a row
 * (the subscription machine counts them). At-least-once: a crash after a receiver's 2xx and
 * before the delete sends it again, with the same webhook-id.
 *
 * Fair (issue 40): the node's WEBHOOK_CONCURRENCY slots are shared between accounts, and an
 * account's share between its subscriptions (src/feed/shares.ts), so one account's hanging
 * receivers wait in their own share. Each subscription works on its oldest deliveries first
 * (repo.PENDING_WINDOW), so a retry is not queued behind newer changes and a dead receiver's
 * deliveries are dropped on their schedule. Time is the gateway's clock: when a delivery is due,
 * its lease, and the deadline of an attempt (WEBHOOK_TIMEOUT_MS from its start: connect, TLS,
 * request and answer together), past which it is cut and counts as a failed attempt.
 */
export class DeliveryWorker {
  private readonly agent: https.Agent;
  private readonly inFlight = new Map<string, Attempt>();
  private readonly outcomes: Counter<'outcome'>;
  private claiming = false;
  private again = false;
  private stopped = true;
  private timer?: NodeJS.Timeout;
  private watchdog?: NodeJS.Timeout;
  /** successful deliveries whose rows go in one delete */
  private done: string[] = [];

  constructor(private readonly d: { sql: Sql; log: Logger; clock: Clock; sealer: Sealer; subscriptions: Subscriptions; settings: DeliverySettings; metrics: Registry }) {
    this.agent = agentFor(d.settings);
    this.outcomes = new Counter({
      name: 'webhook_delivery_attempts_total', help: 'webhook delivery attempts by outcome (delivered, retry, dropped, gone); a timed-out attempt is a retry or a drop',
      labelNames: ['outcome'], registers: [d.metrics],
    });
  }

  start(): void {
    this.stopped = false;
    this.wake();
  }

  /**
   * Stops claiming and waits (up to the delivery timeout) for attempts in flight; those still
   * running then are cut and their deliveries go back to the queue, their attempt uncounted.
   */
  async stop(): Promise<void> {
    this.stopped = true;
    clearTimeout(this.timer);
    const deadline = Date.now() + this.d.settings.timeoutMs;
    while (this.inFlight.size > 0 && Date.now() < deadline) await new Promise((r) => setTimeout(r, 20));
    for (const a of this.inFlight.values()) {
      a.stopping = true;
      a.abort.abort(new Error('the gateway stopped'));
    }
    await Promise.allSettled([...this.inFlight.values()].map((a) => a.done));
    clearInterval(this.watchdog);
    await this.flushDone();
    this.agent.destroy();
  }

  wake(): void {
    if (this.stopped) return;
    if (this.claiming) {
      this.again = true;
      return;
    }
    this.claiming = true;
    void this.fill().finally(() => {
      this.claiming = false;
    });
  }

  /**
   * Claims what the free slots allow: the due work of each subscription (counted up to the
   * largest share), the fair shares computed from it and from what is in flight here, then one
   * claim of each subscription's picks. Every completion wakes this again. With nothing in
   * flight it sleeps until the next delivery is due (at most a poll interval).
   */
  private async fill(): Promise<void> {
    try {
      do {
        this.again = false;
        await this.flushDone();
        const slots = this.d.settings.concurrency;
        if (this.inFlight.size >= slots || this.stopped) return;
        const now = this.d.clock.now();
        const inFlight = [...this.inFlight.keys()];
        const due = await repo.dueDemand(this.d.sql, { now, inFlight, upTo: maxShare(slots) });
        const picks = allocate(slots, this.demands(due));
        const leaseUntil = new Date(now.getTime() + this.d.settings.timeoutMs + LEASE_MARGIN_MS);
        const rows = await repo.claimDeliveries(this.d.sql, { picks, now, leaseUntil, inFlight });
        // the deadline on the clock reading the lease was taken with, not a later one: the lease
        // (what other nodes and a restart go by) and the cut must agree even if the clock moved
        // during the claim (a ManualClock set meanwhile in the tests)
        for (const row of rows) this.launch(row, leaseUntil.getTime() - LEASE_MARGIN_MS);
        if (this.inFlight.size === 0) await this.schedule();
        // completions wake it; the poll still finds retries falling due meanwhile
        else this.scheduleIn(POLL_MS);
      } while (this.again && !this.stopped);
    } catch (err) {
      this.d.log.error({ err }, 'webhook delivery round failed; retried at the next poll');
      this.scheduleIn(POLL_MS);
    }
  }

  /** What each subscription has here: in flight (with or without more due) and due. */
  private demands(due: repo.DueDemand[]): Demand[] {
    const bySub = new Map<string, Demand>();
    for (const a of this.inFlight.values()) {
      const d = bySub.get(a.subscriptionId) ?? { accountId: a.accountId, subscriptionId: a.subscriptionId, inFlight: 0, due: 0 };
      d.inFlight++;
      bySub.set(a.subscriptionId, d);
    }
    for (const r of due) {
      const d = bySub.get(r.subscription_id) ?? { accountId: r.account_id, subscriptionId: r.subscription_id, inFlight: 0, due: 0 };
      d.due = r.due;
      bySub.set(r.subscription_id, d);
    }
    return shuffle([...bySub.values()]);
  }

  /**
   * Next look: when the next delivery is due, at most a poll interval away. "Due now" with
   * nothing claimed (beyond a subscription's window, or taken by another node) waits a poll too.
   */
  private async schedule(): Promise<void> {
    const due = await repo.nextDueInMs(this.d.sql, this.d.clock.now(), [...this.inFlight.keys()]);
    this.scheduleIn(due === undefined ? IDLE_POLL_MS : due === 0 ? POLL_MS : Math.max(5, Math.min(POLL_MS, due)));
  }

  private scheduleIn(ms: number): void {
    clearTimeout(this.timer);
    if (!this.stopped) this.timer = setTimeout(() => this.look(), ms);
  }

  /**
   * The poll: one query for when the next claimable delivery is due (rows from any node), and a
   * claim only when one is due now; with deliveries in flight (completions wake it) it claims as
   * before, for the retries of other subscriptions. An idle node asks once a second, not twice.
   */
  private look(): void {
    if (this.stopped) return;
    if (this.inFlight.size > 0 || this.claiming) return this.wake();
    void repo.nextDueInMs(this.d.sql, this.d.clock.now()).then((due) => {
      if (due === 0) this.wake();
      else this.scheduleIn(due === undefined ? IDLE_POLL_MS : Math.min(POLL_MS, due));
    }, (err) => {
      this.d.log.error({ err }, 'webhook delivery poll failed; retried at the next poll');
      this.scheduleIn(POLL_MS);
    });
  }

  private launch(row: repo.ClaimedDelivery, deadline: number): void {
    const a: Attempt = { accountId: row.account_id, subscriptionId: row.subscription_id, deadline, abort: new AbortController() };
    this.inFlight.set(row.id, a);
    this.watch();
    a.done = this.attempt(row, a)
      .catch((err) => this.d.log.error({ err, deliveryId: row.id }, 'webhook delivery bookkeeping failed; the lease lapses and it is retried'))
      .finally(() => {
        this.inFlight.delete(row.id);
        if (this.inFlight.size === 0) {
          clearInterval(this.watchdog);
          this.watchdog = undefined;
        }
        this.wake();
      });
  }

  /** While attempts are in flight: cuts those past their deadline on the gateway's clock. */
  private watch(): void {
    if (this.watchdog) return;
    this.watchdog = setInterval(() => {
      const now = this.d.clock.now().getTime();
      for (const a of this.inFlight.values()) {
        if (now >= a.deadline && !a.abort.signal.aborted) a.abort.abort(new Error(`no answer within ${this.d.settings.timeoutMs} ms`));
      }
    }, WATCH_MS);
    this.watchdog.unref();
  }

  private async attempt(row: repo.ClaimedDelivery, a: Attempt): Promise<void> {
    const { status, error } = await this.post(row, a.abort.signal);
    const sub = row.subscription_id;
    if (status !== null && status >= 200 && status < 300) {
      this.outcomes.inc({ outcome: 'delivered' });
      this.done.push(row.id);
      if (row.consecutive_failures > 0) await this.d.subscriptions.delivered(sub);
      return;
    }
    if (a.stopping) {
      await repo.releaseDelivery(this.d.sql, row.id);
      return;
    }
    if (status === 410) {
      this.outcomes.inc({ outcome: 'gone' });
      await repo.deleteDelivery(this.d.sql, row.id);
      await this.d.subscriptions.gone(sub);
      return;
    }
    // a timeout, like any other failure, uses up this attempt
    const why = error ?? `the receiver answered ${status}`;
    if (row.attempts >= this.d.settings.maxAttempts) {
      this.outcomes.inc({ outcome: 'dropped' });
      await repo.deleteDelivery(this.d.sql, row.id);
      this.d.log.warn({ deliveryId: row.id, subscriptionId: sub, attempts: row.attempts, lastStatus: status, error: why }, 'webhook delivery dropped after its last attempt');
      await this.d.subscriptions.dropped(sub, status);
      return;
    }
    this.outcomes.inc({ outcome: 'retry' });
    const next = new Date(this.d.clock.now().getTime() + retryDelayMs(this.d.settings.retryBaseMs, row.attempts));
    await repo.retryLater(this.d.sql, row.id, next, status, why);
  }

  private async flushDone(): Promise<void> {
    if (this.done.length === 0) return;
    const ids = this.done;
    this.done = [];
    await repo.deliveriesDone(this.d.sql, ids);
  }

  /**
   * One signed POST to the checked address of the target; the status, or why there was none.
   * `signal` cuts it at any stage (name lookup included): its reason is the error.
   */
  private async post(row: repo.ClaimedDelivery, signal: AbortSignal): Promise<{ status: number | null; error?: string }> {
    const s = this.d.settings;
    try {
      const url = new URL(row.target_url);
      const target = await abortable(resolveTarget(url, s.allowPrivateTargets, 'target_url'), signal);
      const id = `msg_${row.id}`;
      // receivers compare it with their own clock (replay window): wall time, not the lifecycle clock
      const timestamp = Math.floor(Date.now() / 1000);
      const signature = signWebhook(this.d.sealer.open(row.secret_sealed), id, timestamp, row.body);
      // the signal destroys the request; abortable() also ends a wait for the rest of an answer
      const status = await abortable(new Promise<number>((resolve, reject) => {
        const req = https.request(url, {
          method: 'POST',
          agent: this.agent,
          signal,
          headers: {
            'content-type': 'application/json', 'content-length': Buffer.byteLength(row.body), 'user-agent': 'device-gateway-webhooks',
            'webhook-id': id, 'webhook-timestamp': String(timestamp), 'webhook-signature': signature,
          },
          // connect to the address that was checked, whatever DNS answers now
          lookup: (_h, opts, cb) => (opts.all ? cb(null, [target]) : cb(null, target.address, target.family)),
        }, (res) => {
          res.resume();
          res.on('end', () => resolve(res.statusCode ?? 0));
          res.on('error', reject);
        });
        // the error names the target's host, never the address it resolved to
        req.on('error', (err: NodeJS.ErrnoException) => reject(new Error(callError(err, url, target))));
        req.end(row.body);
      }), signal);
      return { status };
    } catch (err) {
      if (signal.aborted) return { status: null, error: (signal.reason as Error).message };
      const e = err as NodeJS.ErrnoException & { detail?: string };
      return { status: null, error: `${e.code ? `${e.code}: ` : ''}${e.detail ?? e.message}`.slice(0, 300) };
    }
  }
}

/** `p`, or the signal's reason once it is aborted. */
function abortable<T>(p: Promise<T>, signal: AbortSignal): Promise<T> {
  if (signal.aborted) return Promise.reject(signal.reason);
  return new Promise<T>((resolve, reject) => {
    const onAbort = () => reject(signal.reason);
    signal.addEventListener('abort', onAbort, { once: true });
    p.then(resolve, reject).finally(() => signal.removeEventListener('abort', onAbort));
  });
}
