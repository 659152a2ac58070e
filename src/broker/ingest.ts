import postgres from 'postgres';
import type { Logger } from '../log.js';
import type { BrokerRepo } from './repo.js';
import type { HistoryRow, TelemetryHistoryRepo } from './telemetryHistory.js';

const FLUSH_MS = 250;
const MAX_PENDING = 2_000;
/** telemetry messages waiting for the history that trigger a flush before the timer */
const MAX_HISTORY_MESSAGES = 20_000;

/** the batched writes, the `table` label of `broker_ingest_rows_dropped_total` */
export type IngestTable = 'telemetry' | 'last_seen' | 'history';

/**
 * The database refused the data of some row (SQLSTATE class 22 data exception, 23 integrity
 * constraint, P0 raised by a trigger), as opposed to failing as a whole (connection, timeout).
 */
const refusedData = (err: unknown) => err instanceof postgres.PostgresError && /^(22|23|P0)/.test(err.code);

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
  /** rows not written (read by /metrics) */
  readonly dropped: Record<IngestTable, number> = { telemetry: 0, last_seen: 0, history: 0 };
  /** per thing: its telemetry messages of this batch, in arrival order (when history is on) */
  private historyPending = new Map<string, HistoryPoints>();
  private historyMessages = 0;

  /** `history`: where every message is also appended (telemetry_history); without it, latest values only */
  constructor(private readonly repo: BrokerRepo, private readonly log: Logger, private readonly history?: TelemetryHistoryRepo) {}

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

  /**
   * `values` is the caller's freshly parsed object: kept as is, not copied. `json`, the checked
   * JSON it was parsed from, goes to the history as sent (saves re-encoding `values`): its text,
   * and its UTF-8 bytes, which may be a view of a buffer the caller reuses (copied here).
   */
  addTelemetry(thingId: string, values: Record<string, unknown>, json?: { text: string; bytes: Buffer }): void {
    const now = Date.now();
    if (this.history) {
      // taken now: the merge below mutates the first message's object
      const text = json?.text ?? JSON.stringify(values);
      const h = this.historyPending.get(thingId);
      if (h) h.add(now, json?.bytes ?? Buffer.from(text));
      else this.historyPending.set(thingId, new HistoryPoints(now, text));
      if (++this.historyMessages >= MAX_HISTORY_MESSAGES) void this.flush();
    }
    const entry = this.pending.get(thingId);
    if (!entry) return this.add(thingId, { at: now, values });
    entry.at = now;
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
      if (this.pending.size === 0 && this.historyPending.size === 0) return;
      const batch = this.pending;
      this.pending = new Map();
      const history: HistoryRow[] = [];
      for (const [thing_id, h] of this.historyPending) history.push({ thing_id, first: h.first, last: h.last, points: h.text() });
      this.historyPending = new Map();
      this.historyMessages = 0;
      const telemetry: { thing_id: string; telemetry: Record<string, unknown>; at: string }[] = [];
      const seen: { thing_id: string; at: string }[] = [];
      for (const [thing_id, entry] of batch) {
        const at = new Date(entry.at).toISOString();
        seen.push({ thing_id, at });
        if (entry.values) telemetry.push({ thing_id, telemetry: entry.values, at });
      }
      await this.write('telemetry', telemetry, (rows) => this.repo.writeTelemetry(rows));
      await this.write('last_seen', seen, (rows) => this.repo.writeSeen(rows));
      if (this.history) await this.write('history', history, (rows) => this.history!.insert(rows));
    });
    return this.flushing;
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

/**
 * One thing's history points of a batch, `[[epoch ms,{values}],...]`. The first as a string (the
 * payload's text, decoded for the parse anyway); from the second on, as UTF-8 bytes outside the
 * JavaScript heap, decoded once at the flush. Why: a busy device's texts, kept as strings until
 * the flush, outlived a young-generation collection or two and were copied by the garbage
 * collector, then joined (about 1 to 1.5 µs more per 1 KiB message); for a device that sends one
 * message per batch (the common case) a buffer would only add a copy and a decode.
 */
class HistoryPoints {
  private readonly firstPoint: string;
  private buf?: Buffer;
  private length = 0;
  last: number;

  constructor(readonly first: number, text: string) {
    this.firstPoint = `[${first},${text}]`;
    this.last = first;
  }

  add(at: number, json: Buffer): void {
    this.last = at;
    if (!this.buf) {
      this.buf = Buffer.allocUnsafe(Math.max(2 * Buffer.byteLength(this.firstPoint), 4 * json.length) + 64);
      this.buf[this.length++] = 0x5b; // [
      this.length += this.buf.write(this.firstPoint, this.length);
    }
    // room for the point and text()'s closing bracket
    const need = this.length + json.length + 24;
    if (need > this.buf.length) {
      const grown = Buffer.allocUnsafe(Math.max(need, 2 * this.buf.length));
      this.buf.copy(grown, 0, 0, this.length);
      this.buf = grown;
    }
    this.buf[this.length++] = 0x2c; // ,
    this.buf[this.length++] = 0x5b; // [
    this.length += this.buf.write(String(at), this.length, 'latin1');
    this.buf[this.length++] = 0x2c;
    this.length += json.copy(this.buf, this.length);
    this.buf[this.length++] = 0x5d; // ]
  }

  text(): string {
    if (!this.buf) return `[${this.firstPoint}]`;
    this.buf[this.length] = 0x5d;
    return this.buf.toString('utf8', 0, this.length + 1);
  }
}
