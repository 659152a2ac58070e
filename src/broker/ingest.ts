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
  /** per thing: when it was last seen (epoch ms: this runs for every device message) and its merged telemetry */
  private pending = new Map<string, { at: number; values?: Record<string, unknown> }>();
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
    const entry = this.pending.get(thingId);
    if (entry) entry.at = Date.now();
    else this.add(thingId, { at: Date.now() });
  }

  /** `values` is the caller's freshly parsed object: kept as is, not copied */
  addTelemetry(thingId: string, values: Record<string, unknown>): void {
    const entry = this.pending.get(thingId);
    if (!entry) return this.add(thingId, { at: Date.now(), values });
    entry.at = Date.now();
    if (entry.values) Object.assign(entry.values, values);
    else entry.values = values;
  }

  private add(thingId: string, entry: { at: number; values?: Record<string, unknown> }): void {
    this.pending.set(thingId, entry);
    if (this.pending.size >= MAX_PENDING) void this.flush();
  }

  /** Writes what is pending; batches never overlap (the next waits for the previous). */
  flush(): Promise<void> {
    this.flushing = this.flushing.then(async () => {
      if (this.pending.size === 0) return;
      const batch = this.pending;
      this.pending = new Map();
      const telemetry: { thing_id: string; telemetry: Record<string, unknown>; at: string }[] = [];
      const seen: { thing_id: string; at: string }[] = [];
      for (const [thing_id, entry] of batch) {
        const at = new Date(entry.at).toISOString();
        seen.push({ thing_id, at });
        if (entry.values) telemetry.push({ thing_id, telemetry: entry.values, at });
      }
      try {
        await this.repo.writeBatch(telemetry, seen);
      } catch (err) {
        this.log.error({ err, things: seen.length }, 'telemetry batch could not be written; dropped');
      }
    });
    return this.flushing;
  }
}
