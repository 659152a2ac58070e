import type { Logger } from '../log.js';
import type { BrokerRepo } from './repo.js';

const FLUSH_MS = 250;
const MAX_PENDING = 2_000;

/**
 * Telemetry and last-seen writes, coalesced in memory and written in one statement per batch
 * (every FLUSH_MS, or sooner when MAX_PENDING things are waiting): a device sending 10 messages
 * a second costs the database at most one row update per batch.
 */
export class IngestBuffer {
  private telemetry = new Map<string, { values: Record<string, unknown>; at: number }>();
  /** epoch ms (numbers, not Dates: this runs for every device message) */
  private seen = new Map<string, number>();
  private timer?: NodeJS.Timeout;
  private flushing: Promise<void> = Promise.resolve();

  constructor(private readonly repo: BrokerRepo, private readonly log: Logger) {}

  start(): void {
    this.timer = setInterval(() => void this.flush(), FLUSH_MS);
    this.timer.unref();
  }

  async stop(): Promise<void> {
    clearInterval(this.timer);
    await this.flush();
  }

  seenNow(thingId: string): void {
    this.seen.set(thingId, Date.now());
    this.flushIfFull();
  }

  addTelemetry(thingId: string, values: Record<string, unknown>): void {
    const current = this.telemetry.get(thingId);
    const now = Date.now();
    if (current) {
      Object.assign(current.values, values);
      current.at = now;
    } else this.telemetry.set(thingId, { values: { ...values }, at: now });
    this.seen.set(thingId, now);
    this.flushIfFull();
  }

  private flushIfFull(): void {
    if (this.seen.size >= MAX_PENDING) void this.flush();
  }

  /** Writes what is pending; batches never overlap (the next waits for the previous). */
  flush(): Promise<void> {
    this.flushing = this.flushing.then(async () => {
      if (this.telemetry.size === 0 && this.seen.size === 0) return;
      const telemetry = [...this.telemetry].map(([thing_id, t]) => ({ thing_id, telemetry: t.values, at: new Date(t.at).toISOString() }));
      const seen = [...this.seen].map(([thing_id, at]) => ({ thing_id, at: new Date(at).toISOString() }));
      this.telemetry = new Map();
      this.seen = new Map();
      try {
        await this.repo.writeBatch(telemetry, seen);
      } catch (err) {
        this.log.error({ err, things: seen.length }, 'telemetry batch could not be written; dropped');
      }
    });
    return this.flushing;
  }
}
