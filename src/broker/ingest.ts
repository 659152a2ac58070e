import postgres from 'postgres';
import type { Logger } from '../log.js';
import type { BrokerRepo, SeenRow, TelemetryRow } from './repo.js';
import type { HistoryRow, TelemetryHistoryRepo } from './telemetryHistory.js';
import type { RecentHistory } from './recentHistory.js';

const FLUSH_MS = 250;
const MAX_PENDING = 2_000;
/** telemetry messages waiting that trigger a flush before the timer */
const MAX_MESSAGES = 20_000;
/** telemetry bytes waiting that trigger a flush before the timer (TELEMETRY_BATCH_BYTES) */
const BATCH_BYTES = 16 * 1024 * 1024;
/** telemetry text per latest-values and history statement of a flush */
const CHUNK_BYTES = 512 * 1024;

/** longest a batch with waiters waits to gather the things the last one had (see commitSoon) */
const GATHER_MS = 2;
/** the window over which the things waiting for PUBACKs are counted (see commitSoon) */
const ANSWERED_WINDOW_MS = 100;
/** history bytes of a batch up to which it is written by one insert rather than a COPY */
const SMALL_BATCH_BYTES = 32 * 1024;

/** the batched writes, the `table` label of `broker_ingest_rows_dropped_total` */
export type IngestTable = 'telemetry' | 'last_seen' | 'history';

/**
 * The database refused the data of some row (SQLSTATE class 22 data exception, 23 integrity
 * constraint, P0 raised by a trigger), as opposed to failing as a whole (connection, timeout).
 */
const refusedData = (err: unknown) => err instanceof postgres.PostgresError && /^(22|23|P0)/.test(err.code);

/**
 * Telemetry and last-seen writes, coalesced in memory and written in one statement per batch
 * (FLUSH_MS after the batch's first thing, or sooner when MAX_PENDING things, MAX_MESSAGES
 * messages or `batchBytes` of telemetry are waiting): a device sending 10 messages a second costs
 * the database at most one row update per batch.
 *
 * Telemetry is taken as checked JSON bytes (scanJsonObject) and not parsed here: every message is
 * copied once, as a history point, into the batch's PointArena; a thing's latest values are its
 * last message's text, merged into the stored ones by PostgreSQL (`||`), and its history row goes
 * to the server by COPY straight from the arena's bytes. Only when the messages of a batch have
 * different keys are they parsed and merged here, at the flush.
 */
/** One thing's part of a batch. */
interface Entry {
  /** when it was last seen (epoch ms: this runs for every device message) */
  at: number;
  /** its telemetry of the batch */
  telemetry?: ThingTelemetry;
  /** called once what the thing sent up to now is stored (true) or given up (false): see whenStored */
  waiters?: ((stored: boolean) => void)[];
}

export class IngestBuffer {
  /** the batch being filled, per thing */
  private pending = new Map<string, Entry>();
  /** the batch being written, until its messages are stored (whenStored waits on its entries too) */
  private writing?: Map<string, Entry>;
  /** batches taken by a flush so far: the number of the batch being filled */
  private taken = 0;
  /** a flush for the waiters of the batch being filled is asked for, at the end of this event-loop turn (commitSoon) */
  private commitQueued = false;
  /** the batch being filled, and the one being written (or free): they swap at each flush */
  private arena = new PointArena();
  private spare = new PointArena();
  private timer?: NodeJS.Timeout;
  private started = false;
  private flushing: Promise<void> = Promise.resolve();
  /** a flush for the batch being filled is queued (behind the one writing): the limits ask for one, not one per message */
  private flushQueued = false;
  /** rows not written (read by /metrics) */
  readonly dropped: Record<IngestTable, number> = { telemetry: 0, last_seen: 0, history: 0 };
  /** batches taken for writing and the telemetry messages in them (/metrics: their ratio is the mean batch, the group commit's reach) */
  readonly written = { batches: 0, messages: 0 };
  private messages = 0;
  private bytes = 0;
  /** readers stopped by `hold`, resumed when a flush takes the batch */
  private held: (() => void)[] = [];
  /** the batch's telemetry bytes from which `hold` stops readers: a batch's worth beyond the one that asks for a flush */
  private readonly holdBytes: number;

  /**
   * `history`: where every message is also appended (telemetry_history); without it, latest values
   * only. `batchBytes`: telemetry bytes that ask for a flush before the timer. `smallBatchBytes`:
   * history bytes up to which a batch goes by one insert instead of a COPY. `recent`: where the
   * history rows written are also kept, once committed, while the log's readers want them.
   */
  constructor(
    private readonly repo: BrokerRepo,
    private readonly log: Logger,
    private readonly history?: TelemetryHistoryRepo,
    private readonly batchBytes = BATCH_BYTES,
    private readonly smallBatchBytes = SMALL_BATCH_BYTES,
    private readonly recent?: RecentHistory,
  ) {
    this.holdBytes = 2 * batchBytes;
  }

  /**
   * Backpressure for the device sockets, asked by the fast lane after each decrypted record: true when
   * the batch being filled holds twice `batchBytes`, because the previous batch is still being
   * written (the database is slower than the devices). The reader then stops reading its socket
   * (TCP holds the device back) and `resume` is called once a flush has taken the batch. Without
   * it a batch grew with whatever came during the previous write, which grew that write in turn:
   * half a gigabyte in one batch was seen in bench:mqtt.
   */
  hold(resume: () => void): boolean {
    if (this.bytes < this.holdBytes) return false;
    this.held.push(resume);
    return true;
  }

  private release(): void {
    if (this.held.length === 0) return;
    const held = this.held;
    this.held = [];
    for (const resume of held) resume();
  }

  start(): void {
    this.started = true;
    if (this.pending.size) this.arm();
  }

  async stop(): Promise<void> {
    this.started = false;
    clearTimeout(this.timer);
    this.timer = undefined;
    clearTimeout(this.gatherTimer);
    this.gatherTimer = undefined;
    await this.flush();
    this.release();
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

  /** The number of the batch being filled: it changes when a flush takes the batch (the fast lane registers one waiter per connection and batch). */
  get batch(): number {
    return this.taken;
  }

  /**
   * Calls `done(true)` once everything the thing has sent up to now is stored (committed: its
   * history row, or its latest values when there is no history), `done(false)` when some of it was
   * given up (the database refused the row or was away): what a QoS 1 PUBACK waits for, so a
   * message a device got a PUBACK for survives a kill -9 of the gateway. Waiters of one batch are
   * called in the order they came, when its write is done. A waiter asks for a flush at the end of
   * this event-loop turn instead of the timer (group commit: what arrives while a batch is written
   * goes in the next, so a batch takes about one commit's time, not FLUSH_MS).
   */
  whenStored(thingId: string, done: (stored: boolean) => void): void {
    let entry = this.pending.get(thingId);
    if (!entry) {
      const writing = this.writing?.get(thingId);
      if (writing) {
        (writing.waiters ??= []).push(done);
        return;
      }
      entry = { at: Date.now() };
      this.add(thingId, entry);
    }
    if (!entry.waiters) this.waitingThings += 1;
    (entry.waiters ??= []).push(done);
    this.commitSoon();
  }

  /**
   * For a message that stores nothing (a heartbeat, an OTA status): `done(true)` at once, unless
   * earlier messages of the thing still wait to be stored; then after them (PUBACKs go in order).
   */
  afterEarlier(thingId: string, done: (stored: boolean) => void): void {
    const entry = this.pending.get(thingId)?.waiters ? this.pending.get(thingId) : this.writing?.get(thingId);
    if (entry?.waiters) entry.waiters.push(done);
    else done(true);
  }

  /**
   * Group commit: the batch is flushed at the end of this turn once as many things wait in it as
   * were answered in the last window of ANSWERED_WINDOW_MS (devices waiting for their PUBACKs send
   * again when they get them), else at most GATHER_MS later. (The last batch's count is no
   * estimate: one small batch would keep every later one as small.) Flushing at the first waiter made batches of one or two messages
   * with devices that keep one message in flight: every message paid a statement and a commit.
   */
  private commitSoon(): void {
    if (this.waitingThings >= this.expected) {
      if (this.commitQueued) return;
      this.commitQueued = true;
      setImmediate(this.onCommit);
    } else {
      this.gatherTimer ??= setTimeout(this.onCommit, GATHER_MS);
    }
  }

  private readonly onCommit = (): void => {
    this.commitQueued = false;
    clearTimeout(this.gatherTimer);
    this.gatherTimer = undefined;
    this.flushSoon(false);
  };
  /** things with waiters in the batch being filled (see commitSoon) */
  private waitingThings = 0;
  /** the things whose waiters were answered in the last ANSWERED_WINDOW_MS: how many a batch gathers before it is flushed */
  private expected = 0;
  /** the things answered in the current window, since `answeredSince` */
  private answered = new Set<string>();
  private answeredSince = 0;
  private gatherTimer?: NodeJS.Timeout;

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
    const point = this.arena.append(now, json);
    const entry = this.pending.get(thingId);
    if (entry) {
      entry.at = now;
      if (entry.telemetry) entry.telemetry.add(this.arena, now, point, keys);
      else entry.telemetry = new ThingTelemetry(now, point, keys);
    } else this.add(thingId, { at: now, telemetry: new ThingTelemetry(now, point, keys) });
    this.bytes += json.length;
    if (++this.messages >= MAX_MESSAGES || this.bytes >= this.batchBytes) this.flushSoon();
  }

  private add(thingId: string, entry: Entry): void {
    this.pending.set(thingId, entry);
    this.arm();
    if (this.pending.size >= MAX_PENDING) this.flushSoon();
  }

  /**
   * A batch reached a limit: one flush is queued for it. While the previous batch is still being
   * written, every further message is over the limit too; a flush per message would queue
   * thousands, and after the write each would take the few messages that came since: small
   * batches, more statements, and arenas that shrink and grow again.
   */
  private flushSoon(latestNow = true): void {
    if (latestNow) this.latestAsked = true;
    if (this.flushQueued) return;
    this.flushQueued = true;
    void this.flush(latestNow);
  }

  /**
   * Writes what is pending; batches never overlap (the next waits for the previous). The record
   * of a message (its history row; its latest values when there is no history) is written first
   * and the batch's waiters are answered as soon as it is committed. Last-seen and latest values
   * are derived from it and coalesced: a group commit (`latestNow` false) adds them to
   * `latestPending`, written with the next flush of the timer, a limit or a reader (every FLUSH_MS
   * at most, on a chain of their own, in order); with devices that wait for their PUBACKs a batch
   * every few milliseconds would otherwise rewrite each device's rows every few milliseconds. The
   * promise returned settles once what was pending is written, latest values included when asked.
   */
  flush(latestNow = true): Promise<void> {
    if (latestNow) this.latestAsked = true;
    this.flushing = this.flushing.then(async () => {
      this.flushQueued = false;
      const withLatest = this.latestAsked || !this.history;
      this.latestAsked = false;
      if (this.pending.size > 0) await this.writeBatch(withLatest);
      else if (withLatest) this.latest = this.latest.then(() => this.writeLatest());
    });
    return this.flushing.then(() => this.latest);
  }

  private async writeBatch(latestNow: boolean): Promise<void> {
    const batch = this.pending;
    const arena = this.arena;
    this.pending = new Map();
    this.writing = batch;
    this.taken += 1;
    this.written.batches += 1;
    this.written.messages += this.messages;
    this.waitingThings = 0;
    [this.arena, this.spare] = [this.spare, arena];
    this.messages = 0;
    this.bytes = 0;
    this.release();
    /** things whose record was not stored; undefined once the waiters are answered */
    let failed: Set<string> | undefined = new Set();
    try {
      if (this.history) {
        const written = this.writeHistory(this.history, batch, arena, failed);
        if (this.recent?.wanted) this.recent.track(written);
        await written;
        this.answer(batch, failed);
        failed = undefined;
        this.addLatest(batch, arena);
        if (latestNow) this.latest = this.latest.then(() => this.writeLatest());
      } else {
        this.addLatest(batch, arena);
        const latest = (this.latest = this.latest.then(() => this.writeLatest(failed)));
        await latest;
        this.answer(batch, failed);
        failed = undefined;
      }
    } finally {
      arena.reset();
      // (an unexpected throw: nothing of the batch is known to be stored)
      if (failed) this.answer(batch, new Set(batch.keys()));
    }
  }

  /** last-seen and latest-values writes, one after another (see flush) */
  private latest: Promise<void> = Promise.resolve();
  /** a flush that writes the latest values too was asked for (the queued flush does it) */
  private latestAsked = false;
  /** per thing, its last-seen and latest values of the batches written since the last latest write */
  private latestPending = new Map<string, LatestValues>();

  /** Adds a batch's last-seen and latest values to `latestPending` (as text: the arena is reused after the batch). */
  private addLatest(batch: Map<string, Entry>, arena: PointArena): void {
    for (const [thingId, entry] of batch) {
      let latest = this.latestPending.get(thingId);
      if (!latest) this.latestPending.set(thingId, (latest = { at: entry.at, values: [], keys: 0, mixed: false }));
      latest.at = entry.at;
      const t = entry.telemetry;
      if (!t) continue;
      const values = t.mixedKeys ? mergedValues(arena, t) : arena.json(t.tail);
      // the same keys as before: the last values are the latest; otherwise they are merged when written
      if (latest.mixed || t.mixedKeys || (latest.values.length > 0 && latest.keys !== t.keys)) {
        latest.mixed = true;
        latest.values.push(values);
      } else {
        latest.values = [values];
      }
      latest.keys = t.keys;
    }
  }

  /** Writes `latestPending` (taken whole): last-seen, then the latest values in statements of about CHUNK_BYTES. */
  private writeLatest(failed?: Set<string>): Promise<void> {
    const pending = this.latestPending;
    this.latestPending = new Map();
    const seen: SeenRow[] = [];
    const chunks: TelemetryRow[][] = [];
    let telemetry: TelemetryRow[] = [];
    let bytes = 0;
    for (const [thing_id, latest] of pending) {
      seen.push({ thing_id, at: latest.at });
      if (latest.values.length === 0) continue;
      const values = latest.values.length === 1 ? latest.values[0] : mergedTexts(latest.values);
      telemetry.push({ thing_id, telemetry: values, at: latest.at });
      bytes += values.length;
      if (bytes >= CHUNK_BYTES) {
        chunks.push(telemetry);
        [telemetry, bytes] = [[], 0];
      }
    }
    if (telemetry.length) chunks.push(telemetry);
    return this.writeRows(seen, chunks, failed);
  }

  /** Never rejects (the chain goes on): `write` drops and counts what the database refuses; anything else is logged and the batch counted as not stored. */
  private async writeRows(seen: SeenRow[], chunks: TelemetryRow[][], failed?: Set<string>): Promise<void> {
    try {
      await this.write('last_seen', seen, (rows) => this.repo.writeSeen(rows));
      for (const rows of chunks) await this.write('telemetry', rows, (r) => this.repo.writeTelemetry(r), failed);
    } catch (err) {
      for (const row of seen) failed?.add(row.thing_id);
      this.log.error({ err }, 'latest values of an ingest batch not written');
    }
  }

  /** Answers the batch's waiters (in the order they came); from now on a waiter of its things waits for the next batch. */
  private answer(batch: Map<string, Entry>, failed: Set<string>): void {
    if (this.writing === batch) this.writing = undefined;
    // (before the waiters: one of them may lead to the next publish at once)
    for (const [thingId, entry] of batch) if (entry.waiters) this.answered.add(thingId);
    const now = Date.now();
    if (now - this.answeredSince >= ANSWERED_WINDOW_MS) {
      this.expected = this.answered.size;
      this.answered = new Set();
      this.answeredSince = now;
    }
    for (const [thingId, entry] of batch) {
      const waiters = entry.waiters;
      if (!waiters) continue;
      entry.waiters = undefined;
      const stored = !failed.has(thingId);
      for (const done of waiters) {
        try {
          done(stored);
        } catch (err) {
          this.log.error({ err, thingId }, 'ingest waiter failed');
        }
      }
    }
  }

  /**
   * The batch's history, a row per thing, by one COPY from the arena's bytes. When the COPY fails
   * (a refused row fails it whole, or the database is away), the rows go again as statements of
   * about CHUNK_BYTES through `write`, which isolates refused rows and counts what is dropped.
   */
  private async writeHistory(history: TelemetryHistoryRepo, batch: Map<string, Entry>, arena: PointArena, failed: Set<string>): Promise<void> {
    // a small batch (devices waiting for their PUBACKs send one message each) in one statement:
    // the COPY's transaction takes four round trips (reserve, begin, copy, commit) for what one insert does
    const copied = arena.used > this.smallBatchBytes && await history.copy(async (rows) => {
      for (const [thing_id, { telemetry: t }] of batch) {
        if (!t) continue;
        rows.beginRow(thing_id, t.first, t.last, t.messages, arena.chainBytes(t.head));
        for (let p = t.head; p !== -1; p = arena.next[p]) {
          if (rows.point(arena.buf, arena.start[p], arena.end[p], p === t.head)) await rows.send();
        }
        if (rows.endRow()) await rows.send();
      }
    });
    if (copied) {
      if (this.recent?.wanted) this.keepCopied(this.recent, copied, batch, arena);
      return;
    }
    let rows: HistoryRow[] = [];
    let bytes = 0;
    const insert = async (r: HistoryRow[]) => {
      const tx = await history.insert(r);
      if (this.recent?.wanted) for (const row of r) this.recent.add(tx, row.thing_id, Buffer.byteLength(row.points), (target, at) => void target.write(row.points, at));
    };
    for (const [thing_id, { telemetry: t }] of batch) {
      if (!t) continue;
      const points = arena.points(t.head);
      rows.push({ thing_id, first: t.first, last: t.last, messages: t.messages, points });
      bytes += points.length;
      if (bytes >= CHUNK_BYTES) {
        await this.write('history', rows, insert, failed);
        [rows, bytes] = [[], 0];
      }
    }
    await this.write('history', rows, insert, failed);
  }

  /** Keeps the rows of a committed COPY (transaction `tx`) in `recent`, their points copied from the arena as the COPY sent them. */
  private keepCopied(recent: RecentHistory, tx: string, batch: Map<string, Entry>, arena: PointArena): void {
    for (const [thingId, { telemetry: t }] of batch) {
      if (!t) continue;
      recent.add(tx, thingId, arena.chainBytes(t.head), (target, at) => {
        target[at++] = 0x5b; // [
        for (let p = t.head; p !== -1; p = arena.next[p]) {
          if (p !== t.head) target[at++] = 0x2c; // ,
          at += arena.buf.copy(target, at, arena.start[p], arena.end[p]);
        }
        target[at] = 0x5d; // ]
      });
    }
  }

  /**
   * One statement for the batch. When the database refuses some row's data, the batch is halved
   * and each half written again until the refused rows stand alone: every other device's row is
   * stored, and only the refused ones are dropped (and logged once, with their thing id). The
   * things of dropped rows are added to `failed`.
   */
  private async write<T extends { thing_id: string }>(table: IngestTable, rows: T[], insert: (rows: T[]) => Promise<void>, failed?: Set<string>): Promise<void> {
    if (rows.length === 0) return;
    try {
      await insert(rows);
    } catch (err) {
      if (!refusedData(err)) {
        for (const row of rows) failed?.add(row.thing_id);
        this.dropped[table] += rows.length;
        this.log.error({ err, table, things: rows.length }, 'ingest batch could not be written; dropped');
      } else if (rows.length === 1) {
        failed?.add(rows[0].thing_id);
        this.dropped[table] += 1;
        // the message and code only: the error's detail may quote the whole row
        const { code, message } = err as postgres.PostgresError;
        this.log.error({ table, thingId: rows[0].thing_id, code, reason: message }, 'ingest row refused by the database; dropped');
      } else {
        const half = rows.length >> 1;
        await this.write(table, rows.slice(0, half), insert, failed);
        await this.write(table, rows.slice(half), insert, failed);
      }
    }
  }
}

/** A thing's last-seen and latest values coalesced over batches (see IngestBuffer.addLatest). */
interface LatestValues {
  at: number;
  /** JSON texts of its values, oldest first: one unless their keys differ */
  values: string[];
  /** the key signature of the last (scanJsonObject) */
  keys: number;
  /** the texts have different keys: merged in order when written */
  mixed: boolean;
}

/** JSON objects' texts merged in order (the later values win), as JSON text (null prototype: a `__proto__` key is data). */
function mergedTexts(texts: string[]): string {
  const merged = Object.create(null) as Record<string, unknown>;
  for (const text of texts) {
    const values = JSON.parse(text) as Record<string, unknown>;
    for (const key of Object.keys(values)) merged[key] = values[key];
  }
  return JSON.stringify(merged);
}

/** The latest values of a batch's messages with different keys: merged in order (mergedTexts). */
function mergedValues(arena: PointArena, t: ThingTelemetry): string {
  const texts: string[] = [];
  for (let p = t.head; p !== -1; p = arena.next[p]) texts.push(arena.json(p));
  return mergedTexts(texts);
}

/** one thing's telemetry of a batch: its points in the arena (a chain from head to tail) and whether all had the same keys */
class ThingTelemetry {
  head: number;
  tail: number;
  last: number;
  /** the messages' top-level keys differ (signatures from scanJsonObject) */
  mixedKeys = false;
  /** how many messages (history points) */
  messages = 1;

  constructor(readonly first: number, point: number, public keys: number) {
    this.head = this.tail = point;
    this.last = first;
  }

  add(arena: PointArena, at: number, point: number, keys: number): void {
    if (keys !== this.keys) this.mixedKeys = true;
    this.keys = keys;
    this.last = at;
    this.messages += 1;
    arena.next[this.tail] = point;
    this.tail = point;
  }
}

const INITIAL_ARENA_BYTES = 256 * 1024;
const INITIAL_ARENA_POINTS = 4096;
/** small batches in a row before a grown arena gives half back (two arenas alternate: about 8 s of 250 ms flushes) */
const SHRINK_AFTER = 16;

/**
 * The telemetry of one batch: every message copied once as a history point `[epoch ms,{values}]`
 * into one buffer, with where each point and its values start and end and the next point of the
 * same thing (-1: its last). It is kept for the batch after next (two alternate: one fills while
 * the other is written), so a busy broker allocates nothing per message that outlives it: its
 * batches do not grow V8's old generation, whose collections cost more than the ingest itself.
 */
class PointArena {
  buf = Buffer.allocUnsafeSlow(INITIAL_ARENA_BYTES);
  used = 0;
  start = new Int32Array(INITIAL_ARENA_POINTS);
  /** where the point's values start (after `[epoch ms,`) */
  values = new Int32Array(INITIAL_ARENA_POINTS);
  /** one past the point's closing `]` */
  end = new Int32Array(INITIAL_ARENA_POINTS);
  next = new Int32Array(INITIAL_ARENA_POINTS);
  count = 0;
  /** batches in a row that used under a quarter of a grown buffer (or index) */
  private smallBatches = 0;

  /** Copies a message in as a point; returns its index. */
  append(at: number, json: Uint8Array): number {
    if (this.count === this.start.length) this.growIndex();
    if (this.used + json.length + 24 > this.buf.length) this.growBuffer(json.length + 24);
    const buf = this.buf;
    const p = this.count++;
    let i = this.used;
    this.start[p] = i;
    buf[i++] = 0x5b; // [
    i = writeDigits(buf, i, at);
    buf[i++] = 0x2c; // ,
    this.values[p] = i;
    buf.set(json, i);
    i += json.length;
    buf[i++] = 0x5d; // ]
    this.end[p] = i;
    this.next[p] = -1;
    this.used = i;
    return p;
  }

  /** the point's values as text */
  json(p: number): string {
    return this.buf.toString('utf8', this.values[p], this.end[p] - 1);
  }

  /** the length of `points(head)` in bytes */
  chainBytes(head: number): number {
    let bytes = 1;
    for (let p = head; p !== -1; p = this.next[p]) bytes += this.end[p] - this.start[p] + 1;
    return bytes;
  }

  /** the chain of points from `head` as JSON text `[[epoch ms,{values}],...]` (the COPY's fallback) */
  points(head: number): string {
    let text = '[';
    for (let p = head; p !== -1; p = this.next[p]) text += (p === head ? '' : ',') + this.buf.toString('utf8', this.start[p], this.end[p]);
    return text + ']';
  }

  /**
   * Empties it for another batch. A grown buffer is kept while batches need it: it is given back
   * (halved) only after SHRINK_AFTER batches in a row used under a quarter of it. Halving at the
   * first small batch made a busy broker grow it again from the start at the next large one: every
   * growth a new mapping, page faults on each of its pages and a copy of what it held (a tenth of
   * the gateway's CPU with 1 KiB messages, docs/benchmarks.md).
   */
  reset(): void {
    const bufLarge = this.buf.length > 4 * INITIAL_ARENA_BYTES;
    const indexLarge = this.start.length > 4 * INITIAL_ARENA_POINTS;
    const small = (!bufLarge || this.used < this.buf.length / 4) && (!indexLarge || this.count < this.start.length / 4);
    this.smallBatches = (bufLarge || indexLarge) && small ? this.smallBatches + 1 : 0;
    if (this.smallBatches >= SHRINK_AFTER) {
      this.smallBatches = 0;
      if (bufLarge) this.buf = Buffer.allocUnsafeSlow(this.buf.length >>> 1);
      if (indexLarge) this.resizeIndex(this.start.length >>> 1);
    }
    this.used = 0;
    this.count = 0;
  }

  private growBuffer(need: number): void {
    const grown = Buffer.allocUnsafeSlow(Math.max(2 * this.buf.length, this.used + need));
    this.buf.copy(grown, 0, 0, this.used);
    this.buf = grown;
  }

  private growIndex(): void {
    this.resizeIndex(2 * this.start.length);
  }

  private resizeIndex(size: number): void {
    const resize = (a: Int32Array) => {
      const b = new Int32Array(size);
      b.set(a.subarray(0, Math.min(this.count, size)));
      return b;
    };
    this.start = resize(this.start);
    this.values = resize(this.values);
    this.end = resize(this.end);
    this.next = resize(this.next);
  }
}

/** the last epoch ms written by writeDigits, and its decimal digits */
let digitsOf = -1;
const lastDigits = new Uint8Array(20);
let lastDigitCount = 0;

/**
 * Writes a non-negative integer (epoch ms) in decimal at `i`; returns the end (no string per
 * message). A busy broker writes the same millisecond for tens of messages: its digits are kept
 * (the divisions of a 13-digit double cost about as much as copying a 1 KiB payload).
 */
function writeDigits(buf: Buffer, i: number, n: number): number {
  if (n !== digitsOf) {
    let digits = 1;
    for (let d = n; d >= 10; d = Math.floor(d / 10)) digits++;
    for (let k = digits - 1, v = n; k >= 0; k--) {
      lastDigits[k] = 0x30 + (v % 10);
      v = Math.floor(v / 10);
    }
    digitsOf = n;
    lastDigitCount = digits;
  }
  for (let k = 0; k < lastDigitCount; k++) buf[i + k] = lastDigits[k];
  return i + lastDigitCount;
}
