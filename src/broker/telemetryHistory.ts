import { z } from 'zod';
import type { Sql } from '../db/client.js';
import { invalid } from '../lib/errors.js';
import type { Logger } from '../log.js';

/** The messages of one thing in one ingest batch: a history row. */
export interface HistoryRow {
  thing_id: string;
  /** epoch ms of its first and last message */
  first: number;
  last: number;
  /** JSON text `[[epoch ms, {values}], ...]`, oldest first */
  points: string;
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

/** SQL of the telemetry history: batched appends, range reads, daily partitions. */
export class TelemetryHistoryRepo {
  constructor(private readonly sql: Sql) {}

  /**
   * One multi-row insert per batch, a row per thing, each value its own text parameter: the
   * points go to the server as they are (an array parameter would escape every quote of them on
   * the gateway's CPU). Not COPY: postgres.js never settles a COPY FROM STDIN the server refuses.
   * Unprepared: the statement's text changes with the number of things. Times go as epoch ms.
   */
  async insert(rows: HistoryRow[]): Promise<void> {
    const params: (string | number)[] = [];
    let values = '';
    for (const r of rows) {
      const i = params.length;
      values += `${i === 0 ? '' : ', '}($${i + 1}::text, to_timestamp($${i + 2}::float8 / 1000), to_timestamp($${i + 3}::float8 / 1000), $${i + 4}::text::json)`;
      params.push(r.thing_id, r.first, r.last, r.points);
    }
    await this.sql.unsafe(`insert into telemetry_history (thing_id, first_at, last_at, points) values ${values}`, params, { prepare: false });
  }

  /** Raw values of `key` in [from, to), oldest first; one more than `limit` tells that more remain. */
  async points(thingId: string, key: string, from: Date, to: Date, limit: number): Promise<{ at: Date; value: unknown }[]> {
    return this.sql<{ at: Date; value: unknown }[]>`
      select at, value from (${this.messages(thingId, key, from, to)}) m
      where value is not null
      order by at, first_at, ord limit ${limit + 1}`;
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

  /** The messages of a thing in [from, to), each with its value of `key` (null when it has none). */
  private messages(thingId: string, key: string, from: Date, to: Date) {
    return this.sql`
      select at, value, first_at, ord from (
        select timestamptz 'epoch' + (e ->> 0)::bigint * interval '1 millisecond' as at, e -> 1 -> ${key} as value, h.first_at, x.ord
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
