import { setTimeout as sleep } from 'node:timers/promises';
import postgres from 'postgres';
import type { Logger } from '../log.js';

export interface WaitOptions {
  /** give up after this long (DATABASE_CONNECT_TIMEOUT_MS) */
  timeoutMs: number;
  log: Pick<Logger, 'warn'>;
}

// SQLSTATEs that no amount of waiting fixes: bad credentials (class 28), unknown database.
const PERMANENT = (code: string | undefined) => code !== undefined && (code.startsWith('28') || code === '3D000');

/** Where the URL points, without its password: safe to log and to put in error messages. */
export function describeDatabase(url: string): string {
  const u = new URL(url);
  return `${u.hostname}:${u.port || 5432}${u.pathname}`;
}

/**
 * Waits until the database at `url` answers `select 1` (in compose the gateway may start before
 * Postgres accepts connections). Logs every failed attempt at warn with its cause and throws a
 * clear error once `timeoutMs` has passed, or at once when the failure is permanent.
 * (The error carries the cause in its message: pino would print a `cause` a second time.)
 */
export async function waitForDatabase(url: string, { timeoutMs, log }: WaitOptions): Promise<void> {
  const where = describeDatabase(url);
  const deadline = Date.now() + timeoutMs;
  let delay = 250;
  for (let attempt = 1; ; attempt++) {
    const err = await tryOnce(url, deadline - Date.now());
    if (!err) return;
    const cause = describeError(err);
    if (PERMANENT(err.code)) throw new Error(`database ${where} refused the gateway: ${cause}`);
    const wait = Math.min(delay, deadline - Date.now());
    if (wait <= 0) throw new Error(`database ${where} not reachable after ${timeoutMs} ms (${attempt} attempts; DATABASE_CONNECT_TIMEOUT_MS): ${cause}`);
    log.warn({ database: where, attempt, cause }, 'database not reachable yet; retrying');
    await sleep(wait);
    delay = Math.min(delay * 2, 5000);
  }
}

/** One `select 1` on a fresh connection; the error, or undefined on success. */
async function tryOnce(url: string, leftMs: number): Promise<(Error & { code?: string; errors?: Error[] }) | undefined> {
  const connectSeconds = Math.max(1, Math.ceil(Math.min(leftMs, 10_000) / 1000));
  const sql = postgres(url, { max: 1, onnotice: () => {}, connect_timeout: connectSeconds });
  try {
    await sql`select 1`;
    return undefined;
  } catch (err) {
    return err as Error & { code?: string };
  } finally {
    await sql.end({ timeout: 0 });
  }
}

/** "CODE message"; connection errors to a name with several addresses are AggregateErrors with no message. */
function describeError(err: Error & { code?: string; errors?: Error[] }): string {
  const message = err.message || err.errors?.map((e) => e.message).join('; ') || 'unknown error';
  return err.code && !message.includes(err.code) ? `${err.code} ${message}` : message;
}
