import { createSql, type Sql } from './client.js';

/** how long /readyz waits for the database before it reports it down */
export const READINESS_TIMEOUT_MS = 3_000;

/**
 * The database check of /readyz, on a connection of its own (docs/decisions.md, "Listeners for
 * scale", readiness): in the main pool its `select 1` queued behind a reconnect storm's connect
 * bookkeeping for more than 10 s, past HAProxy's `timeout check`, and every node was marked down.
 */
export class DatabaseProbe {
  private inFlight: Promise<boolean> | undefined;

  constructor(private readonly sql: Sql, private readonly timeoutMs = READINESS_TIMEOUT_MS) {}

  /** Same URL and options as the main pool, one connection, opened at the first check. */
  static connect(url: string): DatabaseProbe {
    const seconds = Math.ceil(READINESS_TIMEOUT_MS / 1000);
    return new DatabaseProbe(createSql(url, 1, { connectTimeoutSeconds: seconds, applicationName: 'device-gateway-readiness' }));
  }

  /**
   * True when the database answered `select 1`; false when it failed or did not answer within
   * the timeout. Concurrent checks share the statement in flight, and it stays shared until it
   * settles (also past a timeout): probes never pile up on the one connection.
   */
  check(): Promise<boolean> {
    this.inFlight ??= this.sql`select 1`.then(() => true, () => false).finally(() => { this.inFlight = undefined; });
    let timer: NodeJS.Timeout | undefined;
    const late = new Promise<boolean>((resolve) => { timer = setTimeout(resolve, this.timeoutMs, false); });
    return Promise.race([this.inFlight, late]).finally(() => clearTimeout(timer));
  }

  async end(): Promise<void> {
    await this.sql.end({ timeout: 1 });
  }
}
