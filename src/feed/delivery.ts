import fs from 'node:fs';
import https from 'node:https';
import tls from 'node:tls';
import { Counter, type Registry } from 'prom-client';
import type { Sql } from '../db/client.js';
import type { Logger } from '../log.js';
import { callError, resolveTarget } from '../lib/targets.js';
import type { Sealer } from '../pki/sealer.js';
import * as repo from './repo.js';
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

/**
 * Delivers pending webhook deliveries: claims due rows (leased, so a crashed node's deliveries
 * return to the queue when the lease lapses), POSTs each signed body to its target over HTTPS,
 * then deletes the row on a 2xx, or schedules the next attempt with backoff, or drops it after
 * the last attempt. A 410 suspends the subscription; so do WEBHOOK_SUSPEND_AFTER drops in a row
 * (the subscription machine counts them). At-least-once: a crash after a receiver's 2xx and
 * before the delete sends it again, with the same webhook-id.
 */
export class DeliveryWorker {
  private readonly agent: https.Agent;
  private readonly perSubscription = new Map<string, number>();
  private readonly outcomes: Counter<'outcome'>;
  private inFlight = 0;
  private claiming = false;
  private again = false;
  private stopped = true;
  private timer?: NodeJS.Timeout;
  /** successful deliveries whose rows go in one delete */
  private done: string[] = [];

  constructor(private readonly d: { sql: Sql; log: Logger; sealer: Sealer; subscriptions: Subscriptions; settings: DeliverySettings; metrics: Registry }) {
    this.agent = agentFor(d.settings);
    this.outcomes = new Counter({
      name: 'webhook_delivery_attempts_total', help: 'webhook delivery attempts by outcome (delivered, retry, dropped, gone)',
      labelNames: ['outcome'], registers: [d.metrics],
    });
  }

  get share(): number {
    return Math.max(1, Math.floor(this.d.settings.concurrency / 4));
  }

  start(): void {
    this.stopped = false;
    this.wake();
  }

  /** Stops claiming and waits (up to the delivery timeout) for attempts in flight. */
  async stop(): Promise<void> {
    this.stopped = true;
    clearTimeout(this.timer);
    const deadline = Date.now() + this.d.settings.timeoutMs;
    while (this.inFlight > 0 && Date.now() < deadline) await new Promise((r) => setTimeout(r, 20));
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
   * Claims as many due deliveries as there are free slots. A subscription with half its share in
   * flight is left out of the claim (so claims come in batches, not one per completion); every
   * completion wakes this again. With nothing claimed and nothing in flight it sleeps until the
   * next delivery is due (at most a poll interval).
   */
  private async fill(): Promise<void> {
    try {
      do {
        this.again = false;
        await this.flushDone();
        const free = this.d.settings.concurrency - this.inFlight;
        if (free <= 0 || this.stopped) return;
        const busy = [...this.perSubscription].filter(([, n]) => n >= Math.ceil(this.share / 2)).map(([id]) => id);
        const rows = await repo.claimDeliveries(this.d.sql, { limit: free, perSubscription: this.share, busy, leaseMs: this.d.settings.timeoutMs + 30_000 });
        for (const row of rows) this.launch(row);
        if (rows.length === free) this.again = true;
        else if (this.inFlight === 0) await this.schedule();
        // completions wake it; the poll still finds retries of other subscriptions falling due meanwhile
        else this.scheduleIn(POLL_MS);
      } while (this.again && !this.stopped);
    } catch (err) {
      this.d.log.error({ err }, 'webhook delivery round failed; retried at the next poll');
      this.scheduleIn(POLL_MS);
    }
  }

  /** Next look: when the next delivery is due, at most a poll interval away. */
  private async schedule(): Promise<void> {
    const due = await repo.nextDueInMs(this.d.sql);
    this.scheduleIn(due === undefined ? POLL_MS : Math.max(5, Math.min(POLL_MS, due)));
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
    if (this.inFlight > 0 || this.claiming) return this.wake();
    void repo.nextDueInMs(this.d.sql).then((due) => {
      if (due === 0) this.wake();
      else this.scheduleIn(due === undefined ? POLL_MS : Math.min(POLL_MS, due));
    }, (err) => {
      this.d.log.error({ err }, 'webhook delivery poll failed; retried at the next poll');
      this.scheduleIn(POLL_MS);
    });
  }

  private launch(row: repo.ClaimedDelivery): void {
    this.inFlight++;
    this.perSubscription.set(row.subscription_id, (this.perSubscription.get(row.subscription_id) ?? 0) + 1);
    void this.attempt(row)
      .catch((err) => this.d.log.error({ err, deliveryId: row.id }, 'webhook delivery bookkeeping failed; the lease lapses and it is retried'))
      .finally(() => {
        this.inFlight--;
        const n = (this.perSubscription.get(row.subscription_id) ?? 1) - 1;
        if (n > 0) this.perSubscription.set(row.subscription_id, n);
        else this.perSubscription.delete(row.subscription_id);
        this.wake();
      });
  }

  private async attempt(row: repo.ClaimedDelivery): Promise<void> {
    const { status, error } = await this.post(row);
    const sub = row.subscription_id;
    if (status !== null && status >= 200 && status < 300) {
      this.outcomes.inc({ outcome: 'delivered' });
      this.done.push(row.id);
      if (row.consecutive_failures > 0) await this.d.subscriptions.delivered(sub);
      return;
    }
    if (status === 410) {
      this.outcomes.inc({ outcome: 'gone' });
      await repo.deleteDelivery(this.d.sql, row.id);
      await this.d.subscriptions.gone(sub);
      return;
    }
    const why = error ?? `the receiver answered ${status}`;
    if (row.attempts >= this.d.settings.maxAttempts) {
      this.outcomes.inc({ outcome: 'dropped' });
      await repo.deleteDelivery(this.d.sql, row.id);
      this.d.log.warn({ deliveryId: row.id, subscriptionId: sub, attempts: row.attempts, lastStatus: status, error: why }, 'webhook delivery dropped after its last attempt');
      await this.d.subscriptions.dropped(sub, status);
      return;
    }
    this.outcomes.inc({ outcome: 'retry' });
    await repo.retryLater(this.d.sql, row.id, retryDelayMs(this.d.settings.retryBaseMs, row.attempts), status, why);
  }

  private async flushDone(): Promise<void> {
    if (this.done.length === 0) return;
    const ids = this.done;
    this.done = [];
    await repo.deliveriesDone(this.d.sql, ids);
  }

  /** One signed POST to the checked address of the target; the status, or why there was none. */
  private async post(row: repo.ClaimedDelivery): Promise<{ status: number | null; error?: string }> {
    const s = this.d.settings;
    try {
      const url = new URL(row.target_url);
      const target = await resolveTarget(url, s.allowPrivateTargets, 'target_url');
      const id = `msg_${row.id}`;
      // receivers compare it with their own clock (replay window): wall time, not the lifecycle clock
      const timestamp = Math.floor(Date.now() / 1000);
      const signature = signWebhook(this.d.sealer.open(row.secret_sealed), id, timestamp, row.body);
      const status = await new Promise<number>((resolve, reject) => {
        const req = https.request(url, {
          method: 'POST',
          agent: this.agent,
          timeout: s.timeoutMs,
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
        req.on('timeout', () => req.destroy(new Error(`no answer within ${s.timeoutMs} ms`)));
        // the error names the target's host, never the address it resolved to
        req.on('error', (err: NodeJS.ErrnoException) => reject(new Error(callError(err, url, target))));
        req.end(row.body);
      });
      return { status };
    } catch (err) {
      const e = err as NodeJS.ErrnoException & { detail?: string };
      return { status: null, error: `${e.code ? `${e.code}: ` : ''}${e.detail ?? e.message}`.slice(0, 300) };
    }
  }
}
