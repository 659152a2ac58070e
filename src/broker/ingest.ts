import postgres from 'postgres';
import type { Logger } from '../log.js';
import type { BrokerRepo, SeenRow, TelemetryRow } from './repo.js';
import type { HistoryRow, TelemetryHistoryRepo } from './telemetryHistory.js';

const FLUSH_MS = 250;
const MAX_PENDING = 2_000;
/** telemetry messages waiting that trigger a flush before the timer */
const MAX_MESSAGES = 20_000;
/** telemetry bytes waiting that trigger a flush before the timer (bounds the memory of a burst of large messages) */
const MAX_BYTES = 16 * 1024 * 1024;
/** telemetry text per latest-values and history statement of a flush */
const CHUNK_BYTES = 512 * 1024;

/** the batched writes, the `table` label of `broker_ingest_rows_dropped_total` */
export type IngestTable = 'telemetry' | 'last_seen' | 'history';

/**
 * The database refused the data of some row (SQLSTATE class 22 data exception, 23 integrity
 * constraint, P0 raised by a trigger), as opposed to failing as a whole (connection, timeout).
 */
const refusedData = (err: unknown) => err instanceof postgres.PostgresError && /^(22|23|P0)/.test(err.code);

/**
 * Telemetry and last-seen writes, coalesced in memory and written in one statement per batch
 * (FLUSH_MS after the first thing of a batch, or sooner when MAX_PENDING things, MAX_MESSAGES messages or MAX_BYTES of
 * telemetry are waiting): a device sending 10 messages a second costs the database at most one
 * row update per batch.
 *
 * Telemetry is taken as checked JSON bytes (scanJsonObject) and not parsed here: a thing's
 * messages of a batch are appended to one buffer as history points, and its latest values are
 * the last message's text, merged into the stored ones by PostgreSQL (`||`). Only when the
 * messages of a batch have different keys are they parsed and merged here, at the flush.
 */
export class IngestBuffer {
  /** per thing: when it was last seen (epoch ms: this runs for every device message) and its telemetry of the batch */
  private pending = new Map<string, { at: number; telemetry?: ThingTelemetry }>();
  private timer?: NodeJS.Timeout;
  private started = false;
  private flushing: Promise<void> = Promise.resolve();
  /** rows not written (read by /metrics) */
  readonly dropped: Record<IngestTable, number> = { telemetry: 0, last_seen: 0, history: 0 };
  private messages = 0;
  private bytes = 0;

  /** `history`: where every message is also appended (telemetry_history); without it, latest values only */
  constructor(private readonly repo: BrokerRepo, private readonly log: Logger, private readonly history?: TelemetryHistoryRepo) {}

  start(): void {
    this.started = true;
    if (this.pending.size) this.arm();
  }

  async stop(): Promise<void> {
    this.started = false;
    clearTimeout(this.timer);
    this.timer = undefined;
    await this.flush();
  }

  /**
   * The flush timer runs only while something waits: armed by the first thing of a batch, so an
   * idle broker has no timer ticking (a free-running 250 ms interval woke it 4 times a second).
   * Whatever is added while it is armed goes in the flush it triggers; what comes after that
   * flush took the batch arms it again.
   */
  private arm(): void {
    if (this.timer !== undefined || !this.started) return;
    this.timer = setTimeout(this.onTimer, FLUSH_MS);
    this.timer.unref();
  }

  private readonly onTimer = (): void => {
    this.timer = undefined;
    void this.flush();
  };

  seenNow(thingId: string): void {
    const entry = this.pending.get(thingId);
    if (entry) entry.at = Date.now();
    else this.add(thingId, { at: Date.now() });
  }

  /**
   * `json`: a telemetry object as checked by scanJsonObject (a view of a buffer the caller may
   * reuse: copied here), `keys` the signature of its top-level keys it returned.
   */
  addTelemetry(thingId: string, json: Uint8Array, keys: number): void {
    const now = Date.now();
    const entry = this.pending.get(thingId);
    if (entry) {
      entry.at = now;
      if (entry.telemetry) entry.telemetry.add(now, json, keys);
      else entry.telemetry = new ThingTelemetry(now, json, keys);
    } else this.add(thingId, { at: now, telemetry: new ThingTelemetry(now, json, keys) });
    this.bytes += json.length;
    if (++this.messages >= MAX_MESSAGES || this.bytes >= MAX_BYTES) void this.flush();
  }

  private add(thingId: string, entry: { at: number; telemetry?: ThingTelemetry }): void {
    this.pending.set(thingId, entry);
    this.arm();
    if (this.pending.size >= MAX_PENDING) void this.flush();
  }

  /** Writes what is pending; batches never overlap (the next waits for the previous). */
  flush(): Promise<void> {
    this.flushing = this.flushing.then(async () => {
      if (this.pending.size === 0) return;
      const batch = this.pending;
      this.pending = new Map();
      this.messages = 0;
      this.bytes = 0;
      const seen: SeenRow[] = [];
      for (const [thing_id, entry] of batch) seen.push({ thing_id, at: entry.at });
      await this.write('last_seen', seen, (rows) => this.repo.writeSeen(rows));
      // the values in statements of about CHUNK_BYTES, each decoded just before it is written: the
      // texts live for one round trip instead of the whole flush, so they die young instead of being
      // promoted to the old generation (whose growth costs full garbage collections of a large heap)
      let history: HistoryRow[] = [];
      let telemetry: TelemetryRow[] = [];
      let bytes = 0;
      for (const [thing_id, entry] of batch) {
        const t = entry.telemetry;
        if (!t) continue;
        const last = t.lastText();
        // one message (the usual device: one a second, a batch every 250 ms): its points from its text, no second decode
        const points = this.history || t.mixedKeys ? (t.count === 1 ? `[[${t.first},${last}]]` : t.points()) : undefined;
        telemetry.push({ thing_id, telemetry: t.mixedKeys ? mergedValues(points!) : last, at: entry.at });
        if (this.history) history.push({ thing_id, first: t.first, last: t.last, points: points! });
        bytes += last.length + (this.history ? points!.length : 0);
        if (bytes >= CHUNK_BYTES) {
          await this.writeValues(telemetry, history);
          [telemetry, history, bytes] = [[], [], 0];
        }
      }
      await this.writeValues(telemetry, history);
    });
    return this.flushing;
  }

  private async writeValues(telemetry: TelemetryRow[], history: HistoryRow[]): Promise<void> {
    await this.write('telemetry', telemetry, (rows) => this.repo.writeTelemetry(rows));
    if (this.history) await this.write('history', history, (rows) => this.history!.insert(rows));
  }

  /**
   * One statement for the batch. When the database refuses some row's data, the batch is halved
   * and each half written again until the refused rows stand alone: every other device's row is
   * stored, and only the refused ones are dropped (and logged once, with their thing id).
   */
  private async write<T extends { thing_id: string }>(table: IngestTable, rows: T[], insert: (rows: T[]) => Promise<void>): Promise<void> {
    if (rows.length === 0) return;
    try {
      await insert(rows);
    } catch (err) {
      if (!refusedData(err)) {
        this.dropped[table] += rows.length;
        this.log.error({ err, table, things: rows.length }, 'ingest batch could not be written; dropped');
      } else if (rows.length === 1) {
        this.dropped[table] += 1;
        // the message and code only: the error's detail may quote the whole row
        const { code, message } = err as postgres.PostgresError;
        this.log.error({ table, thingId: rows[0].thing_id, code, reason: message }, 'ingest row refused by the database; dropped');
      } else {
        const half = rows.length >> 1;
        await this.write(table, rows.slice(0, half), insert);
        await this.write(table, rows.slice(half), insert);
      }
    }
  }
}

/** The latest values of messages with different keys: merged in order, as JSON text (null prototype: a `__proto__` key is data). */
function mergedValues(points: string): string {
  const merged = Object.create(null) as Record<string, unknown>;
  for (const [, values] of JSON.parse(points) as [number, Record<string, unknown>][]) for (const key of Object.keys(values)) merged[key] = values[key];
  return JSON.stringify(merged);
}

/**
 * One thing's telemetry of a batch: its messages as history points `[[epoch ms,{values}],...`,
 * UTF-8 in one buffer outside the JavaScript heap (copied from the payload, the timestamp written
 * in place), decoded once at the flush; where the last message is; whether all had the same keys.
 */
class ThingTelemetry {
  private buf: Buffer;
  private length = 0;
  private lastStart = 0;
  private lastEnd = 0;
  last: number;
  /** the messages' top-level keys differ (signatures from scanJsonObject) */
  mixedKeys = false;
  count = 1;

  constructor(readonly first: number, json: Uint8Array, private keys: number) {
    // room for a few points; small buffers come from Node's shared pool
    this.buf = Buffer.allocUnsafe(2 * json.length + 64);
    this.buf[this.length++] = 0x5b; // [
    this.last = first;
    this.append(first, json);
  }

  add(at: number, json: Uint8Array, keys: number): void {
    if (keys !== this.keys) this.mixedKeys = true;
    this.keys = keys;
    this.count++;
    this.last = at;
    this.buf[this.length++] = 0x2c; // ,
    this.append(at, json);
  }

  private append(at: number, json: Uint8Array): void {
    // room for the point, the next comma and points()' closing bracket
    const need = this.length + json.length + 24;
    if (need > this.buf.length) {
      const grown = Buffer.allocUnsafe(Math.max(need, 2 * this.buf.length));
      this.buf.copy(grown, 0, 0, this.length);
      this.buf = grown;
    }
    const buf = this.buf;
    buf[this.length++] = 0x5b; // [
    this.length += buf.write(String(at), this.length, 'latin1');
    buf[this.length++] = 0x2c;
    this.lastStart = this.length;
    buf.set(json, this.length);
    this.length += json.length;
    this.lastEnd = this.length;
    buf[this.length++] = 0x5d; // ]
  }

  /** the history points, `[[epoch ms,{values}],...]` */
  points(): string {
    this.buf[this.length] = 0x5d;
    return this.buf.toString('utf8', 0, this.length + 1);
  }

  /** the last message's text (its values are the thing's latest when all messages had the same keys) */
  lastText(): string {
    return this.buf.toString('utf8', this.lastStart, this.lastEnd);
  }
}
