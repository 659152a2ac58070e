import { z } from 'zod';
import type { Sql } from '../db/client.js';
import { invalid } from '../lib/errors.js';
import { MAX_JSON_BYTES } from './payload.js';
import type { Logger } from '../log.js';
import type { RecentHistory } from './recentHistory.js';

/** The messages of one thing in one ingest batch: a history row. */
export interface HistoryRow {
  thing_id: string;
  /** epoch ms of its first and last message */
  first: number;
  last: number;
  /** JSON text `[[epoch ms, {values}], ...]`, oldest first */
  points: string;
  /** how many points it holds */
  messages: number;
}

/** partitions kept ready ahead of today (UTC), so a write never lands where no partition is */
const DAYS_AHEAD = 3;
/** one maintenance at a time across the cluster (pg advisory lock key) */
const MAINTENANCE_LOCK = 1110_0001;
const DAY_MS = 86_400_000;

export const MAX_POINTS = 1000;
export const MAX_BUCKETS = 2000;
/** most points of one millisecond a page holds (a page never splits a millisecond: see TelemetryHistory.read) */
export const MAX_SAME_MS_POINTS = 10_000;
const BUCKET_UNITS = { s: 1_000, m: 60_000, h: 3_600_000, d: DAY_MS } as const;
const DEFAULT_SPAN_MS = DAY_MS;

export const historyQuery = z.object({
  key: z.string().min(1).max(256).optional().describe('telemetry key (required for history; without any history parameter the latest values are answered)'),
  from: z.iso.datetime({ offset: true }).optional().describe('start of the range, inclusive (default: `to` minus 24 hours)'),
  to: z.iso.datetime({ offset: true }).optional().describe('end of the range, exclusive (default: now)'),
  bucket: z.string().regex(/^[1-9]\d{0,4}[smhd]$/, 'a bucket is a whole number and a unit s, m, h or d (e.g. 1m, 1h, 1d)').optional()
    .describe('downsample into buckets of this width (avg/min/max/count of the numeric values); without it the raw points'),
  limit: z.coerce.number().int().min(1).max(MAX_POINTS).optional().describe(`raw points per page (default and most ${MAX_POINTS}); a page never splits a millisecond: one that holds more points than this comes whole (up to 10,000)`),
});
export type HistoryQuery = z.infer<typeof historyQuery>;

/** True when the request asks for history rather than the latest values. */
export const wantsHistory = (q: HistoryQuery) => q.key !== undefined || q.from !== undefined || q.to !== undefined || q.bucket !== undefined || q.limit !== undefined;

const point = z.object({ at: z.string(), value: z.unknown().describe('the value the device sent') });
const bucketSchema = z.object({
  start: z.string().describe('start of the bucket (buckets are aligned on 2000-01-01T00:00:00Z)'),
  avg: z.number().nullable(), min: z.number().nullable(), max: z.number().nullable(),
  count: z.number().int().describe('numeric values in the bucket'),
});
export const historySchema = z.object({
  thingId: z.string(),
  key: z.string(),
  from: z.string(),
  to: z.string(),
  bucket: z.string().nullable(),
  points: z.array(point).optional().describe('raw values, oldest first (without `bucket`)'),
  buckets: z.array(bucketSchema).optional().describe('non-empty buckets, oldest first (with `bucket`)'),
  nextFrom: z.string().nullable().describe('more raw points remain: ask again with this `from`'),
});

/** The checked range and bucket width of a query (400 on a bad one). */
export function historyRange(q: HistoryQuery, now = Date.now()): { key: string; from: Date; to: Date; bucketMs?: number; limit: number } {
  if (!q.key) throw invalid('`key` is required to read telemetry history');
  const to = q.to ? new Date(q.to) : new Date(now);
  const from = q.from ? new Date(q.from) : new Date(to.getTime() - DEFAULT_SPAN_MS);
  if (from.getTime() >= to.getTime()) throw invalid('`from` must be before `to`');
  let bucketMs: number | undefined;
  if (q.bucket) {
    bucketMs = Number(q.bucket.slice(0, -1)) * BUCKET_UNITS[q.bucket.slice(-1) as keyof typeof BUCKET_UNITS];
    if (bucketMs > 366 * DAY_MS) throw invalid('`bucket` is at most 366d');
    const buckets = Math.ceil((to.getTime() - from.getTime()) / bucketMs);
    if (buckets > MAX_BUCKETS) throw invalid(`the range spans ${buckets} buckets of ${q.bucket}; at most ${MAX_BUCKETS}: use a wider bucket or a shorter range`);
  }
  return { key: q.key, from, to, bucketMs, limit: q.limit ?? MAX_POINTS };
}

/** PostgreSQL's binary timestamps count microseconds from 2000-01-01 UTC */
const PG_EPOCH_MS = 946_684_800_000;
/**
 * COPY data sent per CopyData message (the buffer is reused once the socket took it). Below the
 * 64 KiB from which malloc maps memory of its own (MALLOC_MMAP_THRESHOLD_, docs/decisions.md):
 * postgres.js copies each chunk into a message of its own, which would otherwise cost a mapping
 * and its page faults every time.
 */
const COPY_CHUNK_BYTES = 60 * 1024;
const COPY_SIGNATURE = Buffer.from('PGCOPY\n\xff\r\n\0', 'latin1');

/** room for a row's fields before its points, and for one point: at most MAX_JSON_BYTES of values and its `[epoch ms,` `]` and comma */
const ROW_ROOM = MAX_JSON_BYTES + 1024;

/**
 * Rows of telemetry_history in COPY's binary format (header, per row 5 fields each with its
 * length, trailer), encoded into one buffer kept from batch to batch and sent a chunk at a time.
 * A row's points field is written point by point (`beginRow` with the field's length, known from
 * the arena's index, then `point` for each and `endRow`), so a row larger than a chunk goes in
 * several chunks and the buffer never grows: it holds a chunk and one point more. `point` and
 * `endRow` return true when a chunk is full; the caller then awaits `send` before going on.
 */
export class HistoryCopy {
  private readonly buf = Buffer.allocUnsafeSlow(COPY_CHUNK_BYTES + ROW_ROOM);
  private length = 0;
  /** what is left of the current row's points field (checked by endRow) */
  private rowLeft = 0;
  private sendChunk: (chunk: Buffer) => Promise<void> = async () => {};

  start(send: (chunk: Buffer) => Promise<void>): this {
    this.sendChunk = send;
    COPY_SIGNATURE.copy(this.buf, 0);
    this.buf.writeInt32BE(0, 11); // flags
    this.buf.writeInt32BE(0, 15); // header extension length
    this.length = 19;
    return this;
  }

  /** Starts a row; `pointsLength`: the bytes of its points field, `[` + the points joined by `,` + `]`; `messages`: how many points. */
  beginRow(thingId: string, first: number, last: number, messages: number, pointsLength: number): void {
    const buf = this.buf;
    const idLength = Buffer.byteLength(thingId);
    // (thing ids are UUIDs; the COPY is given up, and the batch inserted, rather than the buffer grown)
    if (idLength > 256) throw new Error('thing id too long for the history copy');
    buf.writeInt16BE(5, this.length);
    buf.write(thingId, this.length + 6);
    buf.writeInt32BE(idLength, this.length + 2);
    this.length += 6 + idLength;
    this.timestamp(first);
    this.timestamp(last);
    buf.writeInt32BE(4, this.length);
    buf.writeInt32BE(messages, this.length + 4);
    this.length += 8;
    buf.writeInt32BE(pointsLength, this.length);
    buf[this.length + 4] = 0x5b; // [
    this.length += 5;
    this.rowLeft = pointsLength - 1;
  }

  /** Appends `src[start, end)`, a point, after a comma unless it is the row's first; true: await `send()` before the next. */
  point(src: Uint8Array, start: number, end: number, first: boolean): boolean {
    // (room for its comma, the row's `]` and the COPY's trailer too; never short for a point the gateway took)
    if (end - start + 4 > this.buf.length - this.length) throw new Error('history point larger than the copy buffer');
    if (!first) this.buf[this.length++] = 0x2c; // ,
    this.buf.set(src.subarray(start, end), this.length);
    this.length += end - start;
    this.rowLeft -= end - start + (first ? 0 : 1);
    return this.length >= COPY_CHUNK_BYTES;
  }

  /** Ends the row; true: await `send()` before the next. */
  endRow(): boolean {
    this.buf[this.length++] = 0x5d; // ]
    // a length announced wrong would make the server read the next row into this one
    if (this.rowLeft !== 1) throw new Error(`history row of the wrong length (${this.rowLeft - 1} bytes off)`);
    return this.length >= COPY_CHUNK_BYTES;
  }

  async end(): Promise<void> {
    this.buf.writeInt16BE(-1, this.length);
    this.length += 2;
    await this.send();
  }

  /** Sends what is encoded. The chunk is written as it is (patches/postgres+3.4.9.patch: no copy); once the write's callback has come, the socket no longer needs it and the buffer is free again. */
  async send(): Promise<void> {
    const chunk = this.buf.subarray(0, this.length);
    this.length = 0;
    await this.sendChunk(chunk);
  }

  /** epoch ms as binary timestamptz: 8 bytes of microseconds, written as two 32-bit halves (no BigInt) */
  private timestamp(ms: number): void {
    const us = (ms - PG_EPOCH_MS) * 1000;
    const high = Math.floor(us / 4294967296);
    this.buf.writeInt32BE(8, this.length);
    this.buf.writeInt32BE(high, this.length + 4);
    this.buf.writeUInt32BE(us - high * 4294967296, this.length + 8);
    this.length += 12;
  }
}

/** SQL of the telemetry history: batched appends, range reads, daily partitions. */
export class TelemetryHistoryRepo {
  constructor(private readonly sql: Sql) {}

  /**
   * One insert of the batch's rows, given as one JSON text (each row's points inserted as they are,
   * already JSON): the fallback of `copy` (a refused COPY names no row, a statement per half of the
   * rows finds it) and the path of small batches. One statement text whatever the number of rows,
   * so it is prepared once: a text that changed with the number of things was sent unprepared,
   * which postgres.js does in two round trips (describe, then execute) and PostgreSQL planned every
   * time, about 1.7 ms of its CPU per batch of 25 (docs/benchmarks.md). Times go as epoch ms.
   */
  async insert(rows: HistoryRow[]): Promise<string> {
    let json = '';
    for (const r of rows) json += `${json === '' ? '[' : ','}{"t":${JSON.stringify(r.thing_id)},"f":${r.first},"l":${r.last},"n":${r.messages},"p":${r.points}}`;
    // the transaction's id comes back with it: the rows' position in the log (RecentHistory keeps them under it;
    // a data-modifying WITH runs whole whether or not it is read)
    const [{ tx }] = await this.sql<{ tx: string }[]>`
      with i as (
        insert into telemetry_history (thing_id, first_at, last_at, messages, points)
        select x.t, to_timestamp(x.f / 1000), to_timestamp(x.l / 1000), x.n, x.p from json_to_recordset(${json + ']'}::text::json) as x(t text, f float8, l float8, n integer, p json)
)
      select pg_current_xact_id()::text as tx`;
    return tx;
  }

  /**
   * Appends the rows `fill` encodes with one COPY FROM STDIN in PostgreSQL's binary format: the
   * points reach the server as the bytes the devices sent (no text decode on the gateway, no
   * escaping, no statement to parse), from a buffer reused across batches. True when the server
   * took them all; false when the COPY failed (a refused row fails it whole and names no row: the
   * caller writes the rows again with `insert`, which isolates it). What it returns when they were
   * taken: the transaction's id (the rows' position in the log).
   */
  async copy(fill: (rows: HistoryCopy) => Promise<void>): Promise<string | false> {
    const reserved = await this.sql.reserve();
    try {
      // In a transaction because postgres.js (3.4) does not report a COPY the server refuses after
      // its stream ended (the query settled with the stream): the refusal aborts the transaction,
      // and its COMMIT then answers ROLLBACK.
      await reserved`begin`;
      const stream = await reserved.unsafe('copy telemetry_history (thing_id, first_at, last_at, messages, points) from stdin (format binary)').writable();
      stream.on('error', () => {}); // a refusal before the end: the COMMIT tells
      const send = (chunk: Buffer) => new Promise<void>((resolve, reject) => stream.write(chunk, (err) => (err ? reject(err) : resolve())));
      try {
        await fill(this.encoder.start(send));
        await this.encoder.end();
        stream.end();
      } catch {
        if (!stream.destroyed) stream.destroy(new Error('history copy aborted'));
      }
      // the transaction's id asked with the commit (one round trip, as the commit alone)
      const [id, done] = await Promise.all([reserved<{ tx: string }[]>`select pg_current_xact_id()::text as tx`.catch(() => undefined), reserved`commit`]);
      return done.command === 'COMMIT' && id !== undefined ? id[0].tx : false;
    } catch {
      await reserved`rollback`.catch(() => {});
      return false;
    } finally {
      reserved.release();
    }
  }

  /** kept from batch to batch; one COPY at a time (its one caller, the ingest buffer, never overlaps its flushes) */
  private readonly encoder = new HistoryCopy();

  /** Raw values of `key` in [from, to), oldest first; one more than `limit` tells that more remain. */
  async points(thingId: string, key: string, from: Date, to: Date, limit: number): Promise<{ at: Date; value: unknown }[]> {
    return this.sql<{ at: Date; value: unknown }[]>`
      select at, value from (${this.messages(thingId, key, from, to)}) m
      where value is not null
      order by at, first_at, tx, ord limit ${limit + 1}`;
  }

  /** Non-empty buckets of the numeric values of `key` in [from, to). */
  async buckets(thingId: string, key: string, from: Date, to: Date, bucketMs: number) {
    return this.sql<{ start: Date; avg: number | null; min: number | null; max: number | null; count: number }[]>`
      select date_bin(make_interval(secs => ${bucketMs / 1000}), at, timestamptz '2000-01-01 00:00:00+00') as start,
        avg(v) as avg, min(v) as min, max(v) as max, count(v)::int as count
      from (
        select at, case when json_typeof(value) = 'number' then (value #>> '{}')::float8 end as v
        from (${this.messages(thingId, key, from, to)}) m
        where value is not null
      ) p
      group by 1 order by 1`;
  }

  /**
   * The messages of a thing in [from, to), each with its value of `key` (null when it has none); `tx`
   * orders two rows that began in the same millisecond (consecutive batches can).
   */
  private messages(thingId: string, key: string, from: Date, to: Date) {
    return this.sql`
      select at, value, first_at, tx, ord from (
        select timestamptz 'epoch' + (e ->> 0)::bigint * interval '1 millisecond' as at, e -> 1 -> ${key} as value, h.first_at, h.tx, x.ord
        from telemetry_history h, json_array_elements(h.points) with ordinality as x(e, ord)
        where h.thing_id = ${thingId} and h.first_at < ${to} and h.last_at >= ${from}
      ) m0 where at >= ${from} and at < ${to}`;
  }

  /**
   * Creates the partitions from yesterday to DAYS_AHEAD days ahead and drops those wholly older
   * than `retentionDays`. One node at a time (advisory lock); a drop waits at most a moment for
   * its lock so it never stalls ingest (it is tried again at the next run).
   */
  async maintain(retentionDays: number, now = new Date()): Promise<{ dropped: string[] }> {
    const today = new Date(Math.floor(now.getTime() / DAY_MS) * DAY_MS);
    const cutoff = new Date(today.getTime() - retentionDays * DAY_MS);
    const dropped: string[] = [];
    await this.sql.begin(async (tx) => {
      const [{ locked }] = await tx<{ locked: boolean }[]>`select pg_try_advisory_xact_lock(${MAINTENANCE_LOCK}) as locked`;
      if (!locked) return;
      await tx`set local lock_timeout = '5s'`;
      const first = new Date(Math.max(today.getTime() - DAY_MS, cutoff.getTime()));
      const days = Math.round((today.getTime() - first.getTime()) / DAY_MS) + DAYS_AHEAD + 1;
      await tx`select telemetry_history_ensure_partitions(${first.toISOString().slice(0, 10)}::date, ${days})`;
      const parts = await tx<{ name: string }[]>`
        select c.relname as name from pg_inherits i join pg_class c on c.oid = i.inhrelid
        where i.inhparent = 'telemetry_history'::regclass and c.relname ~ '^telemetry_history_p[0-9]{8}$'`;
      for (const { name } of parts) {
        const d = name.slice(-8);
        const end = Date.UTC(Number(d.slice(0, 4)), Number(d.slice(4, 6)) - 1, Number(d.slice(6, 8))) + DAY_MS;
        if (end > cutoff.getTime()) continue;
        await tx`drop table ${tx(name)}`;
        dropped.push(name);
      }
    });
    return { dropped };
  }
}

/** Reads of the history for the tenant route. */
export class TelemetryHistory {
  constructor(private readonly repo: TelemetryHistoryRepo, private readonly retentionDays: number, private readonly log: Logger) {}

  async read(thingId: string, q: HistoryQuery): Promise<z.infer<typeof historySchema>> {
    const { key, from, to, bucketMs, limit } = historyRange(q);
    const base = { thingId, key, from: from.toISOString(), to: to.toISOString(), bucket: q.bucket ?? null };
    if (bucketMs) {
      const rows = await this.repo.buckets(thingId, key, from, to, bucketMs);
      return {
        ...base, nextFrom: null,
        buckets: rows.map((r) => ({ start: r.start.toISOString(), avg: r.avg, min: r.min, max: r.max, count: r.count })),
      };
    }
    let rows = await this.repo.points(thingId, key, from, to, limit);
    let nextFrom: string | null = null;
    if (rows.length > limit) {
      // the page ends before the first timestamp it cannot hold whole, so the next page (from it)
      // neither skips nor repeats a point
      const next = rows[limit].at;
      let end = limit;
      while (end > 0 && rows[end - 1].at.getTime() === next.getTime()) end--;
      if (end > 0) {
        rows.length = end;
        nextFrom = next.toISOString();
      } else {
        // one millisecond holds more points than the page (a device publishing fast): the page
        // takes the whole millisecond, beyond `limit`, rather than split it (`from` has no finer
        // position) or skip the rest of it; the next page starts 1 ms later
        const after = new Date(next.getTime() + 1);
        rows = await this.repo.points(thingId, key, next, after < to ? after : to, MAX_SAME_MS_POINTS - 1);
        rows.length = Math.min(rows.length, MAX_SAME_MS_POINTS);
        if (after < to && (await this.repo.points(thingId, key, after, to, 0)).length > 0) nextFrom = after.toISOString();
      }
    }
    return { ...base, nextFrom, points: rows.map((r) => ({ at: r.at.toISOString(), value: r.value })) };
  }

  async maintain(now?: Date): Promise<void> {
    const { dropped } = await this.repo.maintain(this.retentionDays, now);
    if (dropped.length) this.log.info({ dropped }, 'telemetry history partitions past retention dropped');
  }
}

/** A place in the telemetry log: everything at or before it was read. `thingId` null: all of transaction `tx`. */
export interface TelemetryPosition {
  /** xid8 as decimal text */
  tx: string;
  thingId: string | null;
}

/** One history row in the log's order: a thing's messages of one ingest batch. */
export interface TelemetryLogRow {
  tx: string;
  thingId: string;
  firstAt: Date;
  /** how many messages (points) the row holds */
  messages: number;
  /** JSON text `[[epoch ms, {values as sent}], ...]`, oldest first */
  points: string;
}

/** One read of the log (TelemetryLog.read). */
export interface TelemetryLogRead {
  /** the account's rows among those scanned, in the log's order */
  rows: TelemetryLogRow[];
  /** rows scanned, every account's: fewer than the limit means the reader is at the head */
  scanned: number;
  /** the position of the last row scanned (undefined: none) */
  last?: TelemetryPosition;
}

/** A row of TelemetryLog.readPacked: its points are `points.subarray(start, end)` of the read (UTF-8 JSON text). */
export interface TelemetryLogPackedRow {
  tx: string;
  thingId: string;
  messages: number;
  start: number;
  end: number;
}

/**
 * Where TelemetryLog.readPacked puts the points: `take` a buffer of at least `bytes` bytes that owns its
 * memory (one of Buffer's pool shares it, and a transfer would take the pool along), `give` one back.
 */
export interface PackedMemory {
  take(bytes: number): Buffer;
  give(buffer: Buffer): void;
}
/** buffers of their own, each new (no pool) */
export const OWN_MEMORY: PackedMemory = { take: (bytes) => Buffer.allocUnsafeSlow(bytes), give: () => {} };

/**
 * The points of a packed read, copied in as they come into memory from `memory` that grows (a
 * larger buffer, what it held copied, the smaller one given back). All of a buffer's memory is used:
 * a pool's buffer may be longer than asked.
 */
class PackedPoints {
  private points: Buffer;
  private at = 0;

  constructor(private readonly memory: PackedMemory) {
    this.points = PackedPoints.whole(memory.take(64 * 1024));
  }

  private static whole(b: Buffer): Buffer {
    return Buffer.from(b.buffer, b.byteOffset, b.buffer.byteLength - b.byteOffset);
  }

  /** Copies `p` in; returns where it starts. */
  put(p: Uint8Array): number {
    if (this.at + p.length > this.points.length) {
      const larger = PackedPoints.whole(this.memory.take(2 * (this.at + p.length)));
      this.points.copy(larger, 0, 0, this.at);
      this.memory.give(this.points);
      this.points = larger;
    }
    const start = this.at;
    this.points.set(p, start);
    this.at += p.length;
    return start;
  }

  /** The points copied in. */
  done(): Buffer {
    return this.points.subarray(0, this.at);
  }

  /** Gives the memory back (the read is not used). */
  release(): void {
    this.memory.give(this.points);
  }
}

/** TelemetryLog.readPacked: `read` with the account's rows' points in one buffer. */
export interface TelemetryLogPackedRead {
  rows: TelemetryLogPackedRow[];
  points: Buffer;
  scanned: number;
  last?: TelemetryPosition;
}

/**
 * The thing id of the history row aliased `t` as uuid, null when it is not one in its canonical
 * `8-4-4-4-12` form (thing ids are uuids; a row of another id joins no thing). Without a regular
 * expression: PostgreSQL's regex cost about 4 µs a row, most of a read of a thousand rows. From
 * PostgreSQL 16, `pg_input_is_valid` (0.4 µs a row, embedded PostgreSQL 18); before, `translate`
 * (2.4 µs: it compares each character with each of the set's, through the multibyte path).
 */
const uuidOfThingId = (validInput: boolean) => `case when length(t.thing_id) = 36
  and substr(t.thing_id, 9, 1) || substr(t.thing_id, 14, 1) || substr(t.thing_id, 19, 1) || substr(t.thing_id, 24, 1) = '----'
  and ${validInput ? "pg_input_is_valid(t.thing_id, 'uuid')" : "translate(t.thing_id, '0123456789abcdefABCDEF', '') = '----'"}
  then t.thing_id::uuid end`;

/** longest a packed read that missed rows in RecentHistory waits for this node's history writes under way */
const SETTLE_WAIT_MS = 1_000;
/** packed reads made without RecentHistory after one that missed more rows there than it found */
const DIRECT_READS_AFTER_MISSES = 16;

/**
 * The telemetry history as a durable log, for readers that resume from a position (data bridges,
 * src/bridges/): rows in (tx, thing_id) order, only those written by transactions below the
 * snapshot's xmin (every transaction there has ended, so no row can appear behind a position
 * later; migration 1800). An account sees only its own things' rows (trust's thing_directory).
 */
export class TelemetryLog {
  /** `recent`: the rows this node wrote last, in memory (their points are read from there when it has them) */
  constructor(private readonly sql: Sql, private readonly recent?: RecentHistory) {}

  /**
   * packed reads to make without `recent`: after one that found fewer of its rows there than it missed
   * (the rows are written by other nodes), its two queries cost more than the one
   */
  private directReads = 0;

  /** the uuid test of the server's version (asked once) */
  private uuidTest?: Promise<string>;

  private uuidOfThingId(): Promise<string> {
    this.uuidTest ??= this.sql<{ v: number }[]>`select current_setting('server_version_num')::int as v`
      .then(([{ v }]) => uuidOfThingId(v >= 160000), (err) => {
        this.uuidTest = undefined;
        throw err;
      });
    return this.uuidTest;
  }

  /** rows of the account's taken by packed reads, by where their points came from (/metrics) */
  readonly rowsRead = { memory: 0, database: 0 };

  /** The position after everything committed so far (where a new reader starts). */
  async head(): Promise<TelemetryPosition> {
    const [{ xmin }] = await this.sql<{ xmin: string }[]>`select pg_snapshot_xmin(pg_current_snapshot())::text as xmin`;
    return { tx: (BigInt(xmin) - 1n).toString(), thingId: null };
  }

  /**
   * The next `limit` rows of the log after `after`, every account's (so a read costs its limit,
   * never the backlog behind it): the account's own rows with their points, and the position of the
   * last row scanned, past which the reader moves even where no row of its account was among them.
   * The rows are taken in index order and stop at the limit (Merge Append over the partitions'
   * (tx, thing_id) indexes); joined to the account's things only then. The previous form joined
   * first and sorted: it read and joined every row after the position, 15 ms per read at a backlog
   * of 1,200 rows (docs/benchmarks.md, "The rule's read").
   */
  async read(accountId: string, after: TelemetryPosition, limit: number): Promise<TelemetryLogRead> {
    const scanned = await this.scan(await this.uuidOfThingId(), accountId, after, limit);
    const rows: TelemetryLogRow[] = [];
    for (const r of scanned) if (r.points !== null) rows.push({ tx: r.tx, thingId: r.thing_id, firstAt: r.first_at, messages: r.messages!, points: r.points });
    const last = scanned.at(-1);
    return { rows, scanned: scanned.length, last: last && { tx: last.tx, thingId: last.thing_id } };
  }

  /**
   * `read`, with the rows' points as bytes in one buffer of its own: for a reader that hands them
   * to another thread (a transfer, not a copy; the data bridges' delivery thread). The bytes are
   * never decoded on this thread (postgres.js's raw rows). Each row is copied as it arrives (postgres.js's
   * forEach): a read of 1 KiB payloads held thousands of row views until its last row came, long enough for
   * V8 to move them to the old generation, which then took a full collection about every second.
   * `memory` gives the buffers (a reader's pool: each a view of an ArrayBuffer of its own, perhaps longer).
   */
  async readPacked(accountId: string, after: TelemetryPosition, limit: number, memory: PackedMemory = OWN_MEMORY): Promise<TelemetryLogPackedRead> {
    this.recent?.touch(after.tx);
    if (this.recent?.covers(after.tx)) {
      if (this.directReads > 0) this.directReads--;
      else return this.readPackedRecent(this.recent, accountId, after, limit, memory);
    }
    return this.readPackedDirect(accountId, after, limit, memory);
  }

  /** `readPacked` in one query, the points from PostgreSQL. */
  private async readPackedDirect(accountId: string, after: TelemetryPosition, limit: number, memory: PackedMemory): Promise<TelemetryLogPackedRead> {
    const rows: TelemetryLogPackedRow[] = [];
    const points = new PackedPoints(memory);
    let scanned = 0;
    let last: (Buffer | null)[] | undefined;
    await this.scan(await this.uuidOfThingId(), accountId, after, limit).raw().forEach((row) => {
      const [tx, thing, , messages, p] = row as unknown as (Buffer | null)[];
      scanned++;
      last = row as unknown as (Buffer | null)[];
      if (p === null) return;
      const start = points.put(p);
      rows.push({ tx: tx!.toString('latin1'), thingId: thing!.toString('utf8'), messages: Number(messages!.toString('latin1')), start, end: start + p.length });
    });
    this.rowsRead.database += rows.length;
    return { rows, points: points.done(), scanned, last: last && { tx: last[0]!.toString('latin1'), thingId: last[1]!.toString('utf8') } };
  }

  /**
   * `readPacked` of a reader at the head: the rows' keys from PostgreSQL (the same scan, without the
   * points), their points from `recent`; the points of rows it does not hold (another node's, or gone
   * from memory) by a second query, by key.
   */
  private async readPackedRecent(recent: RecentHistory, accountId: string, after: TelemetryPosition, limit: number, memory: PackedMemory): Promise<TelemetryLogPackedRead> {
    const scanned = await this.scan(await this.uuidOfThingId(), accountId, after, limit, false);
    const rows: TelemetryLogPackedRow[] = [];
    /** by `tx/thing`: rows whose points are not in memory, with their first_at (text) for the lookup by key */
    const missing = new Map<string, { row: TelemetryLogPackedRow; firstAt: string }>();
    const points = new PackedPoints(memory);
    const place = (row: TelemetryLogPackedRow, p: Uint8Array) => {
      row.start = points.put(p);
      row.end = row.start + p.length;
    };
    let hits = 0;
    for (const r of scanned) {
      if (r.messages === null) continue;
      const row: TelemetryLogPackedRow = { tx: r.tx, thingId: r.thing_id, messages: r.messages, start: -1, end: -1 };
      rows.push(row);
      const p = recent.get(r.tx, r.thing_id);
      if (p) {
        hits++;
        place(row, p);
      } else missing.set(`${r.tx}/${r.thing_id}`, { row, firstAt: r.first_at_text });
    }
    if (missing.size > 0) {
      // rows of this node's writes may be committed before the node heard of it: those are here once the writes under way
      // settle (waited for at most SETTLE_WAIT_MS: a write held up by the database leaves the rest to the query by key)
      let waited: NodeJS.Timeout | undefined;
      await Promise.race([recent.settled(), new Promise<void>((resolve) => (waited = setTimeout(resolve, SETTLE_WAIT_MS)))]);
      clearTimeout(waited);
      for (const [key, { row }] of missing) {
        const p = recent.get(row.tx, row.thingId);
        if (!p) continue;
        hits++;
        place(row, p);
        missing.delete(key);
      }
    }
    if (missing.size > 0) {
      const keys = [...missing.values()];
      // by key, with the row's first_at so that each lookup goes to its partition only
      await this.sql`
        select k.tx, k.thing_id, t.points::text as points
        from unnest(${keys.map((k) => k.row.tx)}::text[], ${keys.map((k) => k.row.thingId)}::text[], ${keys.map((k) => k.firstAt)}::text[]) as k(tx, thing_id, first_at)
        join lateral (
          select h.points from telemetry_history h
          where h.tx = k.tx::xid8 and h.thing_id = k.thing_id and h.first_at = k.first_at::timestamptz limit 1) t on true`.raw().forEach((found) => {
        const [tx, thing, p] = found as unknown as Buffer[];
        const m = missing.get(`${tx.toString('latin1')}/${thing.toString('utf8')}`);
        if (m) place(m.row, p);
      });
      if (rows.some((r) => r.start < 0)) {
        // a row the scan saw and the lookup did not find (its partition dropped in between, past retention): the read is
        // made again the one-query way rather than pass over anything
        points.release();
        this.directReads = DIRECT_READS_AFTER_MISSES;
        return this.readPackedDirect(accountId, after, limit, memory);
      }
      if (missing.size > hits) this.directReads = DIRECT_READS_AFTER_MISSES;
    }
    this.rowsRead.memory += hits;
    this.rowsRead.database += rows.length - hits;
    const last = scanned.at(-1);
    return { rows, points: points.done(), scanned: scanned.length, last: last && { tx: last.tx, thingId: last.thing_id } };
  }

  /**
   * The scan behind `read` and `readPacked`: the next `limit` rows of the log after `after`, every account's, each with
   * tx, thing_id, first_at, messages, points, first_at_text (first_at as text: the exact value, microseconds included,
   * for a lookup by key); messages and points null for another account's row, points null too without `points`.
   */
  private scan(uuidOf: string, accountId: string, after: TelemetryPosition, limit: number, points = true) {
    return this.sql<{ tx: string; thing_id: string; first_at: Date; messages: number | null; points: string | null; first_at_text: string }[]>`
      with h as materialized (select pg_snapshot_xmin(pg_current_snapshot()) as xmin),
      scan as materialized (
        select t.tx, t.thing_id, t.first_at, t.messages, ${points ? this.sql`t.points` : this.sql`null::json as points`},
          ${this.sql.unsafe(uuidOf)} as thing_uuid,
          -- (rows older than the messages column: counted from their points, which only such rows read)
          ${points ? this.sql`null::int` : this.sql`case when t.messages is null then json_array_length(t.points) end`} as counted
        from h, telemetry_history t
        where t.tx >= ${after.tx}::xid8 and t.tx < h.xmin
          and (t.tx > ${after.tx}::xid8 or (${after.thingId}::text is not null and t.thing_id > ${after.thingId}::text))
        order by t.tx, t.thing_id
        limit ${limit})
      select s.tx::text as tx, s.thing_id, s.first_at,
        case when d.account_id = ${accountId} then coalesce(s.messages, s.counted, json_array_length(s.points)) end as messages,
        case when d.account_id = ${accountId} then s.points::text end as points,
        s.first_at::text as first_at_text
      from scan s
      -- one primary-key lookup per row scanned, whatever the number of things (as a join the planner
      -- compared every row with every thing of the account, or hashed every thing; the limit keeps
      -- the subquery from being flattened into such a join)
      left join lateral (select d.account_id from thing_directory d where d.id = s.thing_uuid limit 1) d on true
      order by s.tx, s.thing_id`;
  }

  /** What the account's log holds after `after` (at most `bound` rows counted: a lower bound beyond): messages and the oldest row's time. */
  async behind(accountId: string, after: TelemetryPosition, bound = 2_000): Promise<{ messages: number; oldest: Date | null }> {
    const uuidOf = await this.uuidOfThingId();
    const [r] = await this.sql<{ messages: number; oldest: Date | null }[]>`
      with h as materialized (select pg_snapshot_xmin(pg_current_snapshot()) as xmin)
      select coalesce(sum(coalesce(x.messages, json_array_length(x.points))), 0)::int as messages, min(x.first_at) as oldest from (
        select t.messages, t.points, t.first_at
        from h, telemetry_history t
        join thing_directory d on d.id = ${this.sql.unsafe(uuidOf)}
        where t.tx >= ${after.tx}::xid8
          and (t.tx > ${after.tx}::xid8 or (${after.thingId}::text is not null and t.thing_id > ${after.thingId}::text))
          and d.account_id = ${accountId}
        limit ${bound}) x`;
    return r;
  }
}
