import PgBoss from 'pg-boss';
import postgres from 'postgres';
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

/** While a queue of this node has a job due that its worker has not taken yet: how often the due query runs again. */
const DUE_POLL_MS = 1000;
/**
 * With nothing due: the due query runs when the next delayed job (a retry, a startAfter) falls
 * due, when a job is inserted on any node (LISTEN/NOTIFY, below), and at the latest after this
 * long (a fallback for what no notification reports: pg-boss's own retries of expired jobs, a
 * lost listener connection). Issue 36 item 4: an idle node runs this one query twice a minute.
 */
const IDLE_POLL_MS = 30_000;
/** The channel a statement trigger on pgboss.job notifies on every insert (from any node, at its commit). */
const JOB_CHANNEL = 'gateway_jobs';
/** Notifications arriving together cause one due query. */
const NOTIFY_GATHER_MS = 50;
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
  /** the next due query is running or about to (a notification while it runs asks for one more) */
  private polling = false;
  private pollAgain = false;
  /** when the planned due query runs (ms) */
  private duePollAt?: number;
  private listener?: { sql: postgres.Sql; unlisten(): Promise<void> };

  constructor(private readonly connectionString: string, private readonly log: Logger) {
    // cronWorkerIntervalSeconds: how often pg-boss's own worker looks for the jobs its cron monitor
    // queued (default 5 s): the schedules are sweeps every minute or hour, 15 s late at most is fine,
    // and an idle node saves a query every 5 s (issue 36 item 4)
    this.boss = new PgBoss({ connectionString, schema: 'pgboss', max: 4, application_name: 'device-gateway-jobs', cronWorkerIntervalSeconds: 15 });
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
        // a retry is due later: the due query learns when
        if (outcomes.some((o) => o.status === 'rejected')) this.pollDueSoon();
      });
      this.workers.set(name, workerId);
    }
    if (this.workers.size) {
      await this.listen();
      this.pollDueSoon();
    }
  }

  /**
   * A statement trigger on pgboss.job notifies JOB_CHANNEL at the commit of every insert (jobs sent
   * by any node, in a transaction of ours or by pg-boss itself); this node listens on a connection
   * of its own. Created here, not in a migration: pg-boss creates its schema at its first start.
   */
  private async listen(): Promise<void> {
    const db = this.boss.getDb();
    await db.executeSql(`
      DO $$ BEGIN
        PERFORM pg_advisory_xact_lock(hashtext('gateway_jobs_trigger'));
        CREATE OR REPLACE FUNCTION pgboss.gateway_job_inserted() RETURNS trigger LANGUAGE plpgsql AS
          'BEGIN PERFORM pg_notify(''${JOB_CHANNEL}'', ''''); RETURN NULL; END';
        CREATE OR REPLACE TRIGGER gateway_job_inserted AFTER INSERT ON pgboss.job
          FOR EACH STATEMENT EXECUTE FUNCTION pgboss.gateway_job_inserted();
      END $$`, undefined as never);
    try {
      const sql = postgres(this.connectionString, { max: 1, onnotice: () => {}, connection: { application_name: 'device-gateway-jobs-listen' } });
      // inserts come in bursts (a transaction's jobs, a busy node): one due query per NOTIFY_GATHER_MS
      const listening = await sql.listen(JOB_CHANNEL, () => this.pollDueWithin(NOTIFY_GATHER_MS), () => this.pollDueSoon());
      this.listener = { sql, unlisten: () => listening.unlisten() };
    } catch (err) {
      // the poll still runs, at IDLE_POLL_MS while idle
      this.log.warn({ error: (err as Error).message }, 'job notifications unavailable; due jobs are found by the poll');
    }
  }

  /** The due query within `ms` (sooner if it is already planned sooner). */
  private pollDueWithin(ms: number): void {
    if (!this.started || this.polling) {
      this.pollAgain ||= this.polling;
      return;
    }
    const at = Date.now() + ms;
    if (this.duePollAt !== undefined && this.duePollAt <= at) return;
    clearTimeout(this.duePoll);
    this.duePollAt = at;
    this.duePoll = setTimeout(() => this.pollDueSoon(), ms);
  }

  /** Runs the due query now (once, however many ask while it runs). */
  private pollDueSoon(): void {
    if (!this.started || this.workers.size === 0) return;
    if (this.polling) {
      this.pollAgain = true;
      return;
    }
    clearTimeout(this.duePoll);
    this.duePollAt = undefined;
    this.polling = true;
    void this.pollDue().then((nextMs) => {
      this.polling = false;
      if (!this.started) return;
      if (this.pollAgain) {
        this.pollAgain = false;
        return this.pollDueSoon();
      }
      clearTimeout(this.duePoll);
      this.duePollAt = Date.now() + nextMs;
      this.duePoll = setTimeout(() => this.pollDueSoon(), nextMs);
    });
  }

  /**
   * One query over this node's queues (pg-boss's partial index on (name, start_after) of each
   * queue's pending jobs): wakes the workers of the queues with jobs due, and answers when to look
   * again: in a second while some job is due (its worker fetches it meanwhile), else when the next
   * delayed job falls due, at most IDLE_POLL_MS away.
   */
  private async pollDue(): Promise<number> {
    try {
      const { rows } = await this.boss.getDb().executeSql(
        `SELECT name, (extract(epoch from (min(start_after) - now())) * 1000)::float8 AS due_in_ms
         FROM pgboss.job WHERE name = ANY($1::text[]) AND state < 'active' GROUP BY name`,
        [[...this.workers.keys()]],
      ) as { rows: { name: string; due_in_ms: number }[] };
      let next = IDLE_POLL_MS;
      for (const { name, due_in_ms: dueInMs } of rows) {
        if (dueInMs > 0) {
          next = Math.min(next, Math.ceil(dueInMs) + 5);
          continue;
        }
        next = Math.min(next, DUE_POLL_MS);
        const worker = this.workers.get(name);
        if (worker && this.started) this.boss.notifyWorker(worker);
      }
      return next;
    } catch (err) {
      this.log.warn({ error: (err as Error).message }, 'due-job poll failed; retried in a second');
      return DUE_POLL_MS;
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
    if (this.listener) {
      await this.listener.unlisten().catch(() => {});
      await this.listener.sql.end({ timeout: 1 }).catch(() => {});
      this.listener = undefined;
    }
    await this.boss.stop({ graceful: true, timeout: 5000, wait: true });
  }
}
