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

/**
 * Durable background jobs on Postgres through pg-boss: any node picks them up, nothing is lost on
 * a crash, retries back off exponentially. Domains `define` their jobs at init; handlers start
 * working when the gateway starts.
 */
export class Jobs {
  readonly boss: PgBoss;
  private readonly defs = new Map<string, { handler: JobHandler<unknown>; options: JobOptions }>();
  private started = false;

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
      await this.boss.work<object>(name, { batchSize: options.batchSize ?? 1, pollingIntervalSeconds: 1 }, async (jobs) => {
        for (const job of jobs) await handler(job.data);
      });
    }
  }

  /** Queues a job (durably, on this transaction's connection string). */
  async send<T extends object>(name: string, data: T, options: { startAfter?: number | string | Date; singletonKey?: string } = {}): Promise<string | null> {
    if (!this.started) throw new Error(`job queue not started; cannot send ${name}`);
    return this.boss.send(name, data, options);
  }

  async stop(): Promise<void> {
    if (!this.started) return;
    this.started = false;
    await this.boss.stop({ graceful: true, timeout: 5000, wait: true });
  }
}
