import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { MqttClient } from 'mqtt';
import { startTestGateway, expectProblem, type TestGateway } from '../helpers/gateway.js';
import { createAccount, type TestAccount } from '../helpers/accounts.js';
import { waitFor } from '../helpers/wait.js';
import { enrollDevice, createClaimGroup } from '../helpers/devices.js';
import { connectDevice, metric, type TestDevice } from './fixtures.js';
import crypto from 'node:crypto';
import { TelemetryHistoryRepo, TelemetryLog, type TelemetryLogPackedRead, type TelemetryLogRow, type TelemetryPosition } from '../../src/broker/telemetryHistory.js';
import { RecentHistory } from '../../src/broker/recentHistory.js';
import { IngestBuffer } from '../../src/broker/ingest.js';
import { telemetry } from '../helpers/telemetry.js';
import { BrokerRepo } from '../../src/broker/repo.js';
import { createLogger } from '../../src/log.js';

let gw: TestGateway;
let account: TestAccount;
let other: TestAccount;
let claimSecret: string;

beforeAll(async () => {
  gw = await startTestGateway();
  account = await createAccount(gw);
  other = await createAccount(gw);
  claimSecret = (await createClaimGroup(gw, account)).sharedSecret;
});
afterAll(async () => gw?.close());

const history = (thingId: string, query: string, token = account.viewer) => gw.http.get(`/api/v1/things/${thingId}/telemetry?${query}`, { token });

/** A device of `account`, connected over MQTT 5 with its certificate, that published `messages` (QoS 1) and whose history is stored. */
async function publishing(messages: Record<string, unknown>[]): Promise<{ device: TestDevice; client: MqttClient }> {
  const device = await enrollDevice(gw, account, { claimSecret });
  const client = await connectDevice(gw.mqttPort!, device);
  for (const m of messages) await client.publishAsync(`devices/${device.thingId}/telemetry`, JSON.stringify(m), { qos: 1 });
  await waitFor(async () => {
    const [{ n }] = await gw.db.sql<{ n: number }[]>`select coalesce(sum(json_array_length(points)), 0)::int as n from telemetry_history where thing_id = ${device.thingId}`;
    return n === messages.length;
  }, 10_000, 'history rows written');
  return { device, client };
}

describe('telemetry history over MQTT', () => {
  it('stores every message (not only the latest), raw points oldest first, non-numeric values as sent', async () => {
    // a string with tab, newline, backslash and quotes (escaped in JSON, in the array parameter)
    const tricky = 'tab\there "quoted" back\\slash\nline \\N';
    const { device, client } = await publishing([{ temp: 20, mode: tricky }, { temp: 21.5 }, { temp: 0, mode: { fan: true } }]);
    await client.endAsync();
    const temp = await history(device.thingId, 'key=temp');
    expect(temp.status).toBe(200);
    expect(temp.body.points.map((p: { value: unknown }) => p.value)).toEqual([20, 21.5, 0]);
    expect(temp.body).toMatchObject({ thingId: device.thingId, key: 'temp', bucket: null, nextFrom: null });
    const ats = temp.body.points.map((p: { at: string }) => Date.parse(p.at));
    expect([...ats].sort((a, b) => a - b)).toEqual(ats);
    const mode = await history(device.thingId, 'key=mode');
    expect(mode.body.points.map((p: { value: unknown }) => p.value)).toEqual([tricky, { fan: true }]);
    // without history parameters the route still answers the latest values
    const latest = await gw.http.get(`/api/v1/things/${device.thingId}/telemetry`, { token: account.viewer });
    expect(latest.body.telemetry).toEqual({ temp: 0, mode: { fan: true } });
  });

  it('downsamples into buckets: avg, min, max and count per bucket', async () => {
    const { device, client } = await publishing([{ t: 1 }, { t: 2 }, { t: 6 }, { t: 'n/a' }]);
    await client.endAsync();
    const res = await history(device.thingId, 'key=t&bucket=1d');
    expect(res.status).toBe(200);
    const buckets = res.body.buckets as { start: string; avg: number; min: number; max: number; count: number }[];
    // the four messages fall into one day, or two when the test runs across midnight UTC
    expect(buckets.reduce((s, b) => s + b.count, 0)).toBe(3);
    if (buckets.length === 1) expect(buckets[0]).toMatchObject({ avg: 3, min: 1, max: 6, count: 3 });
    for (const b of buckets) expect(Date.parse(b.start) % 86_400_000).toBe(0);
  });

  it('pages raw points with a bounded page size: every point once, in order', async () => {
    const values = Array.from({ length: 25 }, (_, i) => ({ n: i }));
    const { device, client } = await publishing(values);
    await client.endAsync();
    const seen: number[] = [];
    let query = 'key=n&limit=7';
    for (let page = 0; page < 10; page++) {
      const res = await history(device.thingId, query);
      expect(res.status).toBe(200);
      const points = res.body.points as { at: string }[];
      // at most the limit, unless the page is one millisecond whole (a page never splits one; the
      // device's messages can share a millisecond)
      if (points.length > 7) expect(new Set(points.map((p) => p.at)).size).toBe(1);
      seen.push(...res.body.points.map((p: { value: number }) => p.value));
      if (!res.body.nextFrom) break;
      query = `key=n&limit=7&from=${encodeURIComponent(res.body.nextFrom)}`;
    }
    expect(seen).toEqual(values.map((v) => v.n));
    expectProblem(await history(device.thingId, 'key=n&limit=1001'), 400);
  });

  it("404 for another account's thing; 400 for bad ranges, buckets and a missing key", async () => {
    const { device, client } = await publishing([{ x: 1 }]);
    await client.endAsync();
    expect(expectProblem(await history(device.thingId, 'key=x', other.viewer), 404).detail).toMatch(/not found/);
    const now = new Date().toISOString();
    const earlier = new Date(Date.now() - 60_000).toISOString();
    const bad = [
      `key=x&from=${now}&to=${earlier}`,
      `key=x&from=${now}&to=${now}`,
      'key=x&from=yesterday',
      'key=x&bucket=5w',
      'key=x&bucket=0m',
      `key=x&bucket=1s&from=${encodeURIComponent(new Date(Date.now() - 86_400_000).toISOString())}`,
      'from=2026-01-01T00:00:00Z',
    ];
    for (const q of bad) {
      const problem = expectProblem(await history(device.thingId, q.replaceAll('+', '%2B')), 400);
      expect(problem.detail.length).toBeGreaterThan(0);
    }
  });
});

describe('partitions and retention', () => {
  it('creates daily partitions ahead and drops only those wholly past TELEMETRY_RETENTION_DAYS', async () => {
    const repo = new TelemetryHistoryRepo(gw.db.sql);
    const now = new Date();
    const day = (offset: number) => new Date(Date.UTC(now.getUTCFullYear(), now.getUTCMonth(), now.getUTCDate() + offset));
    const name = (d: Date) => `telemetry_history_p${d.toISOString().slice(0, 10).replaceAll('-', '')}`;
    // an old partition with a row in it, as if written 40 days ago
    await gw.db.sql`select telemetry_history_ensure_partitions(${day(-40).toISOString().slice(0, 10)}::date, 1)`;
    await gw.db.sql`insert into telemetry_history (thing_id, first_at, last_at, points) values ('old', ${new Date(day(-40).getTime() + 3_600_000)}, ${new Date(day(-40).getTime() + 3_600_000)}, '[[0, {"k": 1}]]')`;
    const { dropped } = await repo.maintain(30, now);
    expect(dropped).toContain(name(day(-40)));
    const parts = (await gw.db.sql<{ name: string }[]>`
      select c.relname as name from pg_inherits i join pg_class c on c.oid = i.inhrelid where i.inhparent = 'telemetry_history'::regclass`).map((r) => r.name);
    expect(parts).not.toContain(name(day(-40)));
    for (const offset of [0, 1, 2, 3]) expect(parts).toContain(name(day(offset)));
    const [{ n }] = await gw.db.sql<{ n: number }[]>`select count(*)::int as n from telemetry_history where thing_id = 'old'`;
    expect(n).toBe(0);
    // a partition still inside the retention is kept
    await gw.db.sql`select telemetry_history_ensure_partitions(${day(-5).toISOString().slice(0, 10)}::date, 1)`;
    expect((await repo.maintain(30, now)).dropped).toEqual([]);
  });
});

describe('history pages and points of one millisecond', () => {
  it('a millisecond with more points than the page comes whole in one page; nothing is skipped or repeated', async () => {
    const device = await enrollDevice(gw, account, { claimSecret });
    const t0 = Date.now() - 60_000;
    // 2 points, then 10 in one millisecond, then 3: as a device publishing faster than 1 per ms
    const times = [t0, t0 + 1, ...Array(10).fill(t0 + 2), t0 + 3, t0 + 3, t0 + 4];
    const points = JSON.stringify(times.map((at, n) => [at, { n }]));
    await new TelemetryHistoryRepo(gw.db.sql).insert([{ thing_id: device.thingId, first: t0, last: t0 + 4, messages: times.length, points }]);
    const seen: number[] = [];
    const sizes: number[] = [];
    let query = `key=n&limit=3&from=${encodeURIComponent(new Date(t0 - 1).toISOString())}`;
    for (let page = 0; page < 20; page++) {
      const res = await history(device.thingId, query);
      expect(res.status).toBe(200);
      seen.push(...res.body.points.map((p: { value: number }) => p.value));
      sizes.push(res.body.points.length);
      if (!res.body.nextFrom) break;
      query = `key=n&limit=3&from=${encodeURIComponent(res.body.nextFrom)}`;
    }
    expect(seen).toEqual(times.map((_, n) => n));
    // the two points before it (the page stops short of the millisecond), the millisecond whole, the rest
    expect(sizes).toEqual([2, 10, 3]);
  });
});

describe('batched history writes', () => {
  it('a history row the database refuses costs only that thing: the rest of the batch and its latest values are stored', async () => {
    // a cap the broker does not know: at most 3 messages per thing per batch (for this test's things)
    await gw.db.sql`alter table telemetry_history add constraint history_capped check (thing_id not like 'capped-%' or json_array_length(points) <= 3)`;
    try {
      const logs: Record<string, unknown>[] = [];
      const log = createLogger('error', false, { write: (line: string) => void logs.push(JSON.parse(line)) });
      const ingest = new IngestBuffer(new BrokerRepo(gw.db.sql), log, new TelemetryHistoryRepo(gw.db.sql), undefined, 0);
      const things = Array.from({ length: 9 }, () => `capped-${crypto.randomUUID()}`);
      const chatty = things[4];
      for (const t of things) for (let i = 0; i < (t === chatty ? 5 : 2); i++) ingest.addTelemetry(t, ...telemetry({ i }));
      await ingest.flush();
      const rows = await gw.db.sql<{ thing_id: string; n: number }[]>`
        select thing_id, json_array_length(points) as n from telemetry_history where thing_id in ${gw.db.sql(things)}`;
      expect(rows.map((r) => r.thing_id).sort()).toEqual(things.filter((t) => t !== chatty).sort());
      for (const r of rows) expect(r.n).toBe(2);
      const [{ latest }] = await gw.db.sql<{ latest: number }[]>`select count(*)::int as latest from device_telemetry_latest where thing_id in ${gw.db.sql(things)}`;
      expect(latest).toBe(9);
      expect(ingest.dropped).toEqual({ telemetry: 0, last_seen: 0, history: 1 });
      expect(logs).toMatchObject([{ table: 'history', thingId: chatty, code: '23514' }]);
      // the refused COPY left nothing behind: the next batch is copied whole, the chatty thing's too
      for (const t of [things[0], chatty]) ingest.addTelemetry(t, ...telemetry({ after: true }));
      await ingest.flush();
      const [{ n }] = await gw.db.sql<{ n: number }[]>`
        select count(*)::int as n from telemetry_history where thing_id in ${gw.db.sql([things[0], chatty])} and points::text like '%"after"%'`;
      expect(n).toBe(2);
      expect(ingest.dropped.history).toBe(1);
    } finally {
      await gw.db.sql`alter table telemetry_history drop constraint history_capped`;
    }
  });

  /** A history repo that records what each COPY answered (true: the batch went by COPY, not by the fallback's inserts). */
  function watchedHistory() {
    const repo = new TelemetryHistoryRepo(gw.db.sql);
    const copies: boolean[] = [];
    const copy = repo.copy.bind(repo);
    repo.copy = async (fill) => {
      const ok = await copy(fill);
      copies.push(ok !== false);
      return ok;
    };
    return { repo, copies };
  }

  it('stores each payload as sent, byte for byte, though the buffer it came in is reused: many points, multi-byte text', async () => {
    const history = watchedHistory();
    const ingest = new IngestBuffer(new BrokerRepo(gw.db.sql), createLogger('error', false), history.repo, undefined, 0);
    const thing = `bytes-${crypto.randomUUID()}`;
    // one receive buffer reused for every message, as the TLS records are
    const record = Buffer.alloc(2048);
    const sent: string[] = [];
    for (let i = 0; i < 150; i++) {
      // the first message: 3 UTF-8 bytes per character
      const name = i === 0 ? '☃'.repeat(300) : `température ☃ 🌡 ${'é'.repeat(i % 40)}`;
      const text = JSON.stringify({ i, name, list: [i, -i / 3, null, true] });
      const length = record.write(text, 7);
      ingest.addTelemetry(thing, ...telemetry(record.subarray(7, 7 + length)));
      record.fill(0x7b); // the bytes under the views are overwritten before the flush
      sent.push(text);
    }
    await ingest.flush();
    const [row] = await gw.db.sql<{ points: string }[]>`select points::text as points from telemetry_history where thing_id = ${thing}`;
    const points = JSON.parse(row.points) as [number, unknown][];
    expect(points).toHaveLength(150);
    expect(points.map(([, v]) => JSON.stringify(v))).toEqual(sent);
    expect(points.every(([at]) => Number.isInteger(at) && at > 0)).toBe(true);
    expect(history.copies).toEqual([true]);
  });

  it('a history table that is away: the batch is dropped whole, counted and logged once; the next batch is copied', async () => {
    const logs: Record<string, unknown>[] = [];
    const log = createLogger('error', false, { write: (line: string) => void logs.push(JSON.parse(line)) });
    const ingest = new IngestBuffer(new BrokerRepo(gw.db.sql), log, new TelemetryHistoryRepo(gw.db.sql), undefined, 0);
    const things = Array.from({ length: 4 }, () => `away-${crypto.randomUUID()}`);
    await gw.db.sql`alter table telemetry_history rename to telemetry_history_away`;
    try {
      for (const t of things) ingest.addTelemetry(t, ...telemetry({ v: 1 }));
      await ingest.flush();
    } finally {
      await gw.db.sql`alter table telemetry_history_away rename to telemetry_history`;
    }
    expect(ingest.dropped).toEqual({ telemetry: 0, last_seen: 0, history: 4 });
    expect(logs).toMatchObject([{ table: 'history', things: 4 }]);
    for (const t of things) ingest.addTelemetry(t, ...telemetry({ v: 2 }));
    await ingest.flush();
    const rows = await gw.db.sql<{ points: [number, { v: number }][] }[]>`select points from telemetry_history where thing_id in ${gw.db.sql(things)}`;
    expect(rows.map((r) => r.points.map(([, p]) => p.v))).toEqual([[2], [2], [2], [2]]);
    expect(ingest.dropped.history).toBe(4);
  });

  it('batches of very different sizes, things interleaved, reuse the batch buffers: every point lands in its own thing, in order', async () => {
    const history = watchedHistory();
    const ingest = new IngestBuffer(new BrokerRepo(gw.db.sql), createLogger('error', false), history.repo, undefined, 0);
    const things = Array.from({ length: 7 }, () => `arena-${crypto.randomUUID()}`);
    const sent = new Map<string, number[]>(things.map((t) => [t, []]));
    const pad = 'p'.repeat(900);
    // small, large (beyond the buffers' first size: they grow, and the index too), a mid-size one
    // (the grown buffers are kept), enough small ones in a row for the grown arena to give half back
    // (16 of its own: two arenas alternate), then large again (grown again)
    let seq = 0;
    for (const messages of [5, 5000, 2, 1500, 3, ...Array<number>(34).fill(2), 2000, 3000]) {
      for (let i = 0; i < messages; i++) {
        const thing = things[(i * 5 + messages) % things.length];
        ingest.addTelemetry(thing, ...telemetry({ seq, pad: i % 3 === 0 ? pad : 'short' }));
        sent.get(thing)!.push(seq++);
      }
      await ingest.flush();
    }
    // in the order the batches were written (their transactions): two batches can begin in the same millisecond
    const rows = await gw.db.sql<{ thing_id: string; points: [number, { seq: number }][]; messages: number }[]>`
      select thing_id, points, messages from telemetry_history where thing_id in ${gw.db.sql(things)} order by tx, thing_id`;
    const stored = new Map<string, number[]>(things.map((t) => [t, []]));
    for (const r of rows) for (const [, v] of r.points) stored.get(r.thing_id)!.push(v.seq);
    // each row counts its messages (what a bridge rule's lag sums)
    for (const r of rows) expect(r.messages).toBe(r.points.length);
    for (const t of things) expect(stored.get(t)).toEqual(sent.get(t));
    expect(ingest.dropped).toEqual({ telemetry: 0, last_seen: 0, history: 0 });
    // every batch by COPY, rows of hundreds of KiB (several chunks each) included
    expect(history.copies).toHaveLength(41);
    expect(history.copies.every(Boolean)).toBe(true);
    expect(Math.max(...rows.map((r) => JSON.stringify(r.points).length))).toBeGreaterThan(200_000);
  });

  it('a small batch (one insert, not a COPY) counts each row\'s messages too', async () => {
    const history = watchedHistory();
    const ingest = new IngestBuffer(new BrokerRepo(gw.db.sql), createLogger('error', false), history.repo);
    const [a, b] = [`small-${crypto.randomUUID()}`, `small-${crypto.randomUUID()}`];
    for (let seq = 0; seq < 3; seq++) ingest.addTelemetry(a, ...telemetry({ seq }));
    ingest.addTelemetry(b, ...telemetry({ seq: 3 }));
    await ingest.flush();
    expect(history.copies).toEqual([]);
    const rows = await gw.db.sql<{ thing_id: string; messages: number; n: number }[]>`
      select thing_id, messages, json_array_length(points) as n from telemetry_history where thing_id in ${gw.db.sql([a, b])}`;
    expect(Object.fromEntries(rows.map((r) => [r.thing_id, [r.messages, r.n]]))).toEqual({ [a]: [3, 3], [b]: [1, 1] });
  });

  it('two nodes maintaining the partitions at once: no error, each partition once', async () => {
    const repo = new TelemetryHistoryRepo(gw.db.sql);
    const future = new Date(Date.now() + 20 * 86_400_000);
    await Promise.all([repo.maintain(30, future), repo.maintain(30, future), repo.maintain(30, future)]);
    const [{ n }] = await gw.db.sql<{ n: number }[]>`
      select count(*)::int as n from pg_inherits i join pg_class c on c.oid = i.inhrelid
      where i.inhparent = 'telemetry_history'::regclass and c.relname = ${`telemetry_history_p${future.toISOString().slice(0, 10).replaceAll('-', '')}`}`;
    expect(n).toBe(1);
  });
});

describe('the history as a log (what data bridge rules read)', () => {
  it('a read scans at most its limit, every account\'s rows, returns only the account\'s own and the position past the last scanned', async () => {
    const otherSecret = (await createClaimGroup(gw, other)).sharedSecret;
    const [mine1, mine2, theirs] = await Promise.all([
      enrollDevice(gw, account, { claimSecret }), enrollDevice(gw, account, { claimSecret }), enrollDevice(gw, other, { claimSecret: otherSecret }),
    ]);
    const log = new TelemetryLog(gw.db.sql);
    const start = await log.head();
    // one transaction per row, so each has its own tx: a run of the other account's rows (and a row of no thing) between the account's
    // (and a 36-character id with the dashes elsewhere, and one with the dashes in place but letters beyond hex: no uuid, so no cast error)
    const order = [mine1.thingId, theirs.thingId, theirs.thingId, 'not-a-thing', '0123456789-abcdef-0123-4567-89abcdef', theirs.thingId, mine2.thingId, theirs.thingId, mine1.thingId, 'ghijklmn-0000-0000-0000-000000000000'];
    for (const [i, thing] of order.entries()) {
      await gw.db.sql`insert into telemetry_history (thing_id, first_at, last_at, messages, points)
        values (${thing}, now(), now(), 1, ${`[[${Date.now()},{"i":${i}}]]`}::text::json)`;
    }
    // the log shows rows below the horizon, which another test file's open transaction (any database of
    // the server) holds back: wait until all nine are below it
    await waitFor(async () => (await log.read(other.id, start, 100)).scanned === 10, 30_000, 'the ten rows below the horizon');
    const own: TelemetryLogRow[] = [];
    let at: TelemetryPosition = start;
    let reads = 0;
    for (;;) {
      const read = await log.read(account.id, at, 2);
      if (!read.last) break;
      reads++;
      expect(read.scanned).toBeLessThanOrEqual(2);
      expect(read.rows.every((r) => r.thingId === mine1.thingId || r.thingId === mine2.thingId)).toBe(true);
      own.push(...read.rows);
      at = read.last;
    }
    expect(reads).toBe(5); // 10 rows, 2 per read: the other rows are passed, not returned
    expect(own.map((r) => [r.thingId, JSON.parse(r.points)[0][1].i])).toEqual([[mine1.thingId, 0], [mine2.thingId, 6], [mine1.thingId, 8]]);
    expect(own.map((r) => r.messages)).toEqual([1, 1, 1]);
    // the other account reads its own rows from the same log
    const theirsRead = await log.read(other.id, start, 100);
    expect(theirsRead.scanned).toBe(10);
    expect(theirsRead.rows.map((r) => JSON.parse(r.points)[0][1].i)).toEqual([1, 2, 5, 7]);
    // the packed form (points as bytes in one buffer of its own, for the delivery thread) holds the same
    const packed = await log.readPacked(other.id, start, 100);
    expect(packed.scanned).toBe(10);
    expect(packed.last).toEqual(theirsRead.last);
    expect(packed.points.byteOffset).toBe(0); // the start of memory of its own (transferable)
    expect(packed.points.buffer.byteLength).toBeGreaterThanOrEqual(packed.points.length);
    expect(packed.rows.map((r) => ({ tx: r.tx, thingId: r.thingId, messages: r.messages, points: packed.points.toString('utf8', r.start, r.end) })))
      .toEqual(theirsRead.rows.map((r) => ({ tx: r.tx, thingId: r.thingId, messages: r.messages, points: r.points })));
    // and the lag a rule shows counts only its account's messages (the ids that are no uuid skipped, no cast error)
    expect((await log.behind(account.id, start)).messages).toBe(3);
    expect((await log.behind(other.id, start)).messages).toBe(4);
    expect((await log.behind(account.id, at)).messages).toBe(0);
  });

  it('a packed read larger than its first buffer moves to a larger one and gives the smaller back', async () => {
    const thing = (await enrollDevice(gw, account, { claimSecret })).thingId;
    const log = new TelemetryLog(gw.db.sql);
    const start = await log.head();
    const big = (i: number) => `[[${Date.now()},{"i":${i},"fill":"${String(i).repeat(40_000)}"}]]`;
    for (const i of [1, 2, 3, 4]) await gw.db.sql`insert into telemetry_history (thing_id, first_at, last_at, messages, points) values (${thing}, now(), now(), 1, ${big(i)}::text::json)`;
    await waitFor(async () => (await log.read(account.id, start, 100)).rows.length === 4, 30_000, 'the four rows below the horizon');
    const taken: number[] = [];
    const given: number[] = [];
    // as a pool does: a view of the bytes asked, its memory twice as long (the rows go on past the view)
    const packed = await log.readPacked(account.id, start, 100, {
      take: (bytes) => (taken.push(bytes), Buffer.from(new ArrayBuffer(2 * bytes), 0, bytes)),
      give: (b) => void given.push(b.buffer.byteLength),
    });
    expect(packed.rows.map((r) => packed.points.toString('utf8', r.start, r.end))).toEqual((await log.read(account.id, start, 100)).rows.map((r) => r.points));
    expect(taken[0]).toBe(64 * 1024);
    expect(taken.length).toBe(2); // 160 KB of points: it grew once, from 128 KiB of memory
    expect(given).toEqual([2 * 64 * 1024]); // and gave the first back
  });
});

describe('a reader at the head of the log (RecentHistory)', () => {
  it('reads the points of the rows this node wrote from memory, the same bytes as PostgreSQL holds, and the rows of another node from PostgreSQL, in the log\'s order', async () => {
    const things = (await Promise.all([1, 2, 3].map(() => enrollDevice(gw, account, { claimSecret })))).map((d) => d.thingId);
    const recent = new RecentHistory(8 * 1024 * 1024);
    const fromMemory: string[] = [];
    const get = recent.get.bind(recent);
    recent.get = (tx, thing) => {
      const p = get(tx, thing);
      if (p) fromMemory.push(thing);
      return p;
    };
    const log = new TelemetryLog(gw.db.sql, recent);
    const plain = new TelemetryLog(gw.db.sql);
    const start = await log.head();
    await log.readPacked(account.id, start, 10); // a reader: the node keeps what it writes from now on
    const repo = new BrokerRepo(gw.db.sql);
    const quiet = createLogger('error', false);
    // by COPY (any batch) and by insert (small batches, the default)
    const copying = new IngestBuffer(repo, quiet, new TelemetryHistoryRepo(gw.db.sql), undefined, 0, recent);
    const inserting = new IngestBuffer(repo, quiet, new TelemetryHistoryRepo(gw.db.sql), undefined, undefined, recent);
    const payload = (i: number) => ({ i, name: `température ☃ 🌡 ${'é'.repeat(i)}`, v: [i, -i / 3, null] });
    for (let i = 0; i < 5; i++) for (const t of [things[0], things[1]]) copying.addTelemetry(t, ...telemetry(payload(i)));
    await copying.flush();
    // another node's row: in the log, not in this node's memory
    await gw.db.sql`insert into telemetry_history (thing_id, first_at, last_at, messages, points) values (${things[2]}, now(), now(), 1, ${'[[1, {"other":  "node"}]]'}::text::json)`;
    for (let i = 5; i < 8; i++) for (const t of [things[2], things[0]]) inserting.addTelemetry(t, ...telemetry(payload(i)));
    await inserting.flush();
    await waitFor(async () => (await plain.read(account.id, start, 100)).rows.length === 5, 30_000, 'the five rows below the horizon');
    const memory = await log.readPacked(account.id, start, 100);
    const stored = await plain.readPacked(account.id, start, 100);
    const shown = (r: TelemetryLogPackedRead) => r.rows.map((row) => ({ tx: row.tx, thingId: row.thingId, messages: row.messages, points: r.points.toString('utf8', row.start, row.end) }));
    expect(shown(memory)).toEqual(shown(stored));
    expect(shown(memory).map((r) => r.messages)).toEqual([5, 5, 1, 3, 3]);
    expect(memory.scanned).toBe(stored.scanned);
    expect(memory.last).toEqual(stored.last);
    expect(fromMemory).toHaveLength(4); // the copied and the inserted rows; the other node's came from PostgreSQL
  });

  it('a row found in memory only after the writes under way settled, beside another node\'s row: both in the read, in order', async () => {
    const things = (await Promise.all([1, 2].map(() => enrollDevice(gw, account, { claimSecret })))).map((d) => d.thingId);
    const recent = new RecentHistory(8 * 1024 * 1024);
    const log = new TelemetryLog(gw.db.sql, recent);
    const plain = new TelemetryLog(gw.db.sql);
    const start = await log.head();
    await log.readPacked(account.id, start, 10);
    const ingest = new IngestBuffer(new BrokerRepo(gw.db.sql), createLogger('error', false), new TelemetryHistoryRepo(gw.db.sql), undefined, 0, recent);
    for (let i = 0; i < 3; i++) ingest.addTelemetry(things[0], ...telemetry({ i }));
    await ingest.flush();
    // another node's row, in a later transaction
    await gw.db.sql`insert into telemetry_history (thing_id, first_at, last_at, messages, points) values (${things[1]}, now(), now(), 1, ${'[[1,{"other":1}]]'}::text::json)`;
    await waitFor(async () => (await plain.read(account.id, start, 100)).rows.length === 2, 30_000, 'the two rows below the horizon');
    // this node's row is not found at the first look (as when the read sees the commit before the node hears of it)
    const get = recent.get.bind(recent);
    let looks = 0;
    recent.get = (tx, thing) => (thing === things[0] && looks++ === 0 ? undefined : get(tx, thing));
    const memory = await log.readPacked(account.id, start, 100);
    const stored = await plain.readPacked(account.id, start, 100);
    const shown = (r: TelemetryLogPackedRead) => r.rows.map((row) => [row.thingId, row.messages, r.points.toString('utf8', row.start, row.end)]);
    expect(looks).toBe(2);
    expect(shown(memory)).toEqual(shown(stored));
    expect(shown(memory).map(([thing]) => thing)).toEqual(things);
  });
});

describe('TELEMETRY_HISTORY=false', () => {
  it('keeps the latest values only', async () => {
    const off = await startTestGateway({ TELEMETRY_HISTORY: 'false' });
    try {
      const acc = await createAccount(off);
      const secret = (await createClaimGroup(off, acc)).sharedSecret;
      const device = await enrollDevice(off, acc, { claimSecret: secret });
      const client = await connectDevice(off.mqttPort!, device);
      await client.publishAsync(`devices/${device.thingId}/telemetry`, JSON.stringify({ v: 7 }), { qos: 1 });
      await client.endAsync();
      await waitFor(async () => (await off.http.get(`/api/v1/things/${device.thingId}/telemetry`, { token: acc.viewer })).body.telemetry?.v === 7, 10_000, 'latest stored');
      const [{ n }] = await off.db.sql<{ n: number }[]>`select count(*)::int as n from telemetry_history where thing_id = ${device.thingId}`;
      expect(n).toBe(0);
    } finally {
      await off.close();
    }
  });
});

describe('backpressure when the database falls behind (TELEMETRY_BATCH_BYTES)', () => {
  it('stops reading devices while a batch waits for the database, then stores every message', async () => {
    const small = await startTestGateway({ TELEMETRY_BATCH_BYTES: String(64 * 1024) });
    const lock = await small.db.sql.reserve();
    try {
      const acc = await createAccount(small);
      const device = await enrollDevice(small, acc, { claimSecret: (await createClaimGroup(small, acc)).sharedSecret });
      const client = await connectDevice(small.mqttPort!, device);
      const received = () => metric(small, 'mqtt_messages_received_total');
      const before = await received();
      // the history table locked: the first flush's COPY waits, and the batch after it fills up
      await lock`begin`;
      await lock`lock table telemetry_history in access exclusive mode`;
      const pad = 'x'.repeat(1000);
      const total = 600; // about 600 KiB: beyond the batch being written (64 KiB) and the one held (128 KiB)
      for (let seq = 0; seq < total; seq++) client.publish(`devices/${device.thingId}/telemetry`, JSON.stringify({ seq, pad }), { qos: 0 });
      // the broker takes messages until the held batch is full, then reads no further
      let taken = -1;
      await waitFor(async () => {
        const now = (await received()) - before;
        const steady = now > 0 && now === taken;
        taken = now;
        await new Promise((r) => setTimeout(r, 300));
        return steady;
      }, 20_000, 'reads stopped');
      // about 1 KiB each: the batch being written (64 KiB), the held one (128 KiB) and what was read with its last records
      expect(taken).toBeGreaterThan(128);
      expect(taken).toBeLessThan(total / 2);
      await lock`rollback`;
      // the database caught up: the rest is read, and every message is stored, in order
      const seqs = await waitFor(async () => {
        const rows = await small.db.sql<{ points: [number, { seq: number }][] }[]>`
          select points from telemetry_history where thing_id = ${device.thingId} order by tx`;
        const all = rows.flatMap((r) => r.points.map(([, p]) => p.seq));
        return all.length === total ? all : undefined;
      }, 30_000, 'every message stored');
      expect(seqs).toEqual(Array.from({ length: total }, (_, k) => k));
      expect((await received()) - before).toBe(total);
      expect(client.connected).toBe(true);
      await client.endAsync();
    } finally {
      await lock`rollback`.catch(() => {});
      lock.release();
      await small.close();
    }
  });
});
