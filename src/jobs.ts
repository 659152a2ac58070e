import PgBoss from 'pg-boss';
import type { Logger } from './log.js';

export interface JobOptions {
  /** cron expression (UTC) for a scheduled sweep */
  schedule?: string;
  retryLimit?: number;
  /** seconds before the first retry; doubled each time (exponential backoff) */
  retryDelay?: number;
  expireInSeconds?: number;
  batchSize?: number;
}

type JobHandler<T> = (data: T) => Promise<void>;

/** How often one query looks for due jobs of this node's queues (the latency of a job sent elsewhere, scheduled or retried) */
const DUE_POLL_MS = 1000;
/**
 * pg-boss's own poll of each queue: a fallback only. The due poll wakes a queue's worker when it
 * has work, so an idle node runs one query a second instead of one per queue (19: issue 19, bench:idle).
 */
const WORKER_POLL_SECONDS = 60;

/**
 * Durable background jobs on Postgres through pg-boss: any node picks them up, nothing is lost on
 * a crash, retries back off exponentially. Domains `define` their jobs at init; handlers start
 * working when the gateway starts.
 */
export class Jobs {
  readonly boss: PgBoss;
  private readonly defs = new Map<string, { handler: JobHandler<unknown>; options: JobOptions }>();
  private started = false;
  /** this node's worker of each queue (to wake it when a job is sent) */
  private readonly workers = new Map<string, string>();
  private duePoll?: NodeJS.Timeout;

  constructor(connectionString: string, private readonly log: Logger) {
    this.boss = new PgBoss({ connectionString, schema: 'pgboss', max: 4, application_name: 'device-gateway-jobs' });
    // Log message and code only: pg errors carry the whole client (connection parameters) with them.
    // 57P01 = the server is shutting down (Ctrl-C reaches the embedded PostgreSQL too): not an error.
    this.boss.on('error', (err: Error & { code?: string }) =>
      this.log[err.code === '57P01' ? 'debug' : 'error']({ error: err.message, code: err.code }, 'job queue error'));
  }

  define<T extends object>(name: string, handler: JobHandler<T>, options: JobOptions = {}): void {
    this.defs.set(name, { handler: handler as JobHandler<unknown>, options });
  }

  async start(work = true): Promise<void> {
    await this.boss.start();
    this.started = true;
    for (const [name, { handler, options }] of this.defs) {
      await this.boss.createQueue(name, {
        name,
        retryLimit: options.retryLimit ?? 5,
        retryDelay: options.retryDelay ?? 5,
        retryBackoff: true,
        expireInSeconds: options.expireInSeconds ?? 300,
      });
      if (options.schedule) await this.boss.schedule(name, options.schedule, {}, { tz: 'UTC' });
      if (!work) continue;
      const workerId = await this.boss.work<object>(name, { batchSize: options.batchSize ?? 1, pollingIntervalSeconds: WORKER_POLL_SECONDS }, async (jobs) => {
        // the jobs of a batch run side by side; one that fails is failed alone (retried with
        // backoff) and the others complete: one bad job never costs the rest of its batch
        const outcomes = await Promise.allSettled(jobs.map((job) => handler(job.data)));
        for (const [i, outcome] of outcomes.entries()) {
          if (outcome.status === 'fulfilled') continue;
          const error = outcome.reason as Error;
          this.log.warn({ job: name, jobId: jobs[i].id, error: error?.message }, 'job failed; retried with backoff');
          await this.boss.fail(name, jobs[i].id, { message: String(error?.message ?? error) });
        }
      });
      this.workers.set(name, workerId);
    }
    if (this.workers.size) this.scheduleDuePoll();
  }

  /**
   * Every DUE_POLL_MS, one query over this node's queues (pg-boss's partial index on
   * (name, start_after) of each queue's pending jobs) wakes the workers of the queues with jobs due:
   * as before, a queue with work fetches a batch at least once a second, and an idle one costs nothing.
   */
  private scheduleDuePoll(): void {
    this.duePoll = setTimeout(() => void this.pollDue().finally(() => {
      if (this.started) this.scheduleDuePoll();
    }), DUE_POLL_MS);
  }

  private async pollDue(): Promise<void> {
    try {
      const { rows } = await this.boss.getDb().executeSql(
        `SELECT DISTINCT name FROM pgboss.job WHERE name = ANY($1::text[]) AND state < 'active' AND start_after < now()`,
        [[...this.workers.keys()]],
      ) as { rows: { name: string }[] };
      for (const { name } of rows) {
        const worker = this.workers.get(name);
        if (worker && this.started) this.boss.notifyWorker(worker);
      }
    } catch (err) {
      this.log.warn({ error: (err as Error).message }, 'due-job poll failed; retried in a second');
    }
  }

  /** Queues a job (durably, on this transaction's connection string). */
  async send<T extends object>(name: string, data: T, options: { startAfter?: number | string | Date; singletonKey?: string } = {}): Promise<string | null> {
    if (!this.started) throw new Error(`job queue not started; cannot send ${name}`);
    const id = await this.boss.send(name, data, options);
    // a job due now wakes this node's worker instead of waiting for its next poll
    const worker = this.workers.get(name);
    if (id && worker && !options.startAfter) this.boss.notifyWorker(worker);
    return id;
  }

  /** Wakes this node's worker of a queue (a job due now was queued in a transaction that has just committed). */
  wake(name: string): void {
    const worker = this.workers.get(name);
    if (worker && this.started) this.boss.notifyWorker(worker);
  }

  async stop(): Promise<void> {
    if (!this.started) return;
    this.started = false;
    clearTimeout(this.duePoll);
    await this.boss.stop({ graceful: true, timeout: 5000, wait: true });
  }
}
