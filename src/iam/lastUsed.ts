import type { Db } from '../db/client.js';
import type { Logger } from '../log.js';
import * as repo from './repo.js';

const FLUSH_MS = 5_000;

/**
 * `last_used_at` of access keys, batched: the SVC hot path only records the instant in memory;
 * a timer (and every listing, so it reads fresh values) writes the batch in one statement.
 */
export class LastUsed {
  private pending = new Map<string, Date>();
  private timer?: NodeJS.Timeout;

  constructor(private readonly sql: Db, private readonly log: Logger) {}

  touch(accessKeyId: string, at: Date): void {
    this.pending.set(accessKeyId, at);
  }

  async flush(): Promise<void> {
    if (this.pending.size === 0) return;
    const batch = this.pending;
    this.pending = new Map();
    await repo.touchCredentials(this.sql, [...batch.keys()], [...batch.values()].map((t) => t.toISOString()));
  }

  start(): void {
    this.timer = setInterval(() => void this.flush().catch((err) => this.log.warn({ err }, 'iam: last_used_at flush failed')), FLUSH_MS);
    this.timer.unref();
  }

  async stop(): Promise<void> {
    if (this.timer) clearInterval(this.timer);
    await this.flush().catch(() => {});
  }
}
