import crypto from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createLogger } from '../../src/log.js';
import { IngestBuffer } from '../../src/broker/ingest.js';
import { BrokerRepo } from '../../src/broker/repo.js';
import { telemetry } from '../helpers/telemetry.js';
import { createTestDatabase, type TestDatabase } from '../helpers/db.js';
import { waitFor } from '../helpers/wait.js';

let db: TestDatabase;

beforeAll(async () => {
  db = await createTestDatabase();
});
afterAll(async () => db?.drop());

/** An ingest buffer on the real database whose error logs are collected. */
function buffer() {
  const logs: Record<string, unknown>[] = [];
  const log = createLogger('error', false, { write: (line: string) => void logs.push(JSON.parse(line)) });
  return { ingest: new IngestBuffer(new BrokerRepo(db.sql), log), logs };
}

describe('batched telemetry writes', () => {
  it('a row the database refuses (validation could not know) costs only that device: the rest of its batch is stored', async () => {
    // a storage cap the broker does not check: an operator's constraint on the latest-values table
    await db.sql`alter table device_telemetry_latest add constraint telemetry_capped check (pg_column_size(telemetry) < 1024)`;
    try {
      const { ingest, logs } = buffer();
      const things: string[] = Array.from({ length: 40 }, () => crypto.randomUUID());
      const big = things[17];
      // one batch: nothing is flushed until flush() (the timer is not started)
      for (const [i, thingId] of things.entries()) {
        ingest.addTelemetry(thingId, ...telemetry(thingId === big ? { blob: crypto.randomBytes(2048).toString('base64') } : { n: i }));
      }
      await ingest.flush();

      const rows = await db.sql<{ thing_id: string; telemetry: { n?: number } }[]>`
        select thing_id, telemetry from device_telemetry_latest where thing_id in ${db.sql(things)}`;
      expect(rows).toHaveLength(39);
      expect(rows.map((r) => r.thing_id).sort()).toEqual(things.filter((t) => t !== big).sort());
      for (const r of rows) expect(r.telemetry).toEqual({ n: things.indexOf(r.thing_id) });
      // last seen is its own batch: the refused device was still seen
      const [{ count }] = await db.sql<{ count: number }[]>`
        select count(*)::int as count from device_connectivity where thing_id in ${db.sql(things)} and last_seen is not null`;
      expect(count).toBe(40);
      expect(ingest.dropped).toEqual({ telemetry: 1, last_seen: 0, history: 0 });
      // logged once, with the device, without the row's values
      expect(logs).toHaveLength(1);
      expect(logs[0]).toMatchObject({ table: 'telemetry', thingId: big, code: '23514' });
      expect(JSON.stringify(logs[0])).not.toContain('blob');
    } finally {
      await db.sql`alter table device_telemetry_latest drop constraint telemetry_capped`;
    }
  });

  it('a batch that fails as a whole (not a refused row) is dropped whole and logged once, and the next batch is written', async () => {
    const { ingest, logs } = buffer();
    const things = Array.from({ length: 5 }, () => crypto.randomUUID());
    await db.sql`alter table device_telemetry_latest rename to device_telemetry_latest_away`;
    try {
      for (const t of things) ingest.addTelemetry(t, ...telemetry({ a: 1 }));
      await ingest.flush();
    } finally {
      await db.sql`alter table device_telemetry_latest_away rename to device_telemetry_latest`;
    }
    expect(ingest.dropped).toEqual({ telemetry: 5, last_seen: 0, history: 0 });
    expect(logs).toHaveLength(1);
    expect(logs[0]).toMatchObject({ table: 'telemetry', things: 5 });
    ingest.addTelemetry(things[0], ...telemetry({ a: 2 }));
    await ingest.flush();
    const [row] = await db.sql<{ telemetry: unknown }[]>`select telemetry from device_telemetry_latest where thing_id = ${things[0]}`;
    expect(row.telemetry).toEqual({ a: 2 });
  });
});

describe('latest values of a batch', () => {
  it('are the last message when a thing sent the same keys, and the messages merged in order when the keys differ', async () => {
    const { ingest } = buffer();
    const [same, mixed, proto, reordered] = Array.from({ length: 4 }, () => crypto.randomUUID());
    ingest.addTelemetry(mixed, ...telemetry({ kept: 'from an earlier batch', a: 0 }));
    await ingest.flush();
    ingest.addTelemetry(same, ...telemetry({ a: 1, b: 'one' }));
    ingest.addTelemetry(same, ...telemetry({ a: 2, b: 'two' }));
    ingest.addTelemetry(mixed, ...telemetry({ a: 1 }));
    ingest.addTelemetry(mixed, ...telemetry({ b: { deep: [1, 2] } }));
    ingest.addTelemetry(mixed, ...telemetry({ a: 3 }));
    // a key named __proto__ is data, whether merged by PostgreSQL or here
    ingest.addTelemetry(proto, ...telemetry(Buffer.from('{"__proto__":{"polluted":true},"n":1}')));
    ingest.addTelemetry(proto, ...telemetry({ m: 2 }));
    ingest.addTelemetry(reordered, ...telemetry({ x: 1, y: 1 }));
    ingest.addTelemetry(reordered, ...telemetry({ y: 2, x: 2 }));
    await ingest.flush();
    const rows = await db.sql<{ thing_id: string; telemetry: unknown }[]>`
      select thing_id, telemetry::text::json as telemetry from device_telemetry_latest where thing_id in ${db.sql([same, mixed, proto, reordered])}`;
    const latest = Object.fromEntries(rows.map((r) => [r.thing_id, r.telemetry]));
    expect(latest[same]).toEqual({ a: 2, b: 'two' });
    expect(latest[mixed]).toEqual({ kept: 'from an earlier batch', a: 3, b: { deep: [1, 2] } });
    expect(latest[reordered]).toEqual({ x: 2, y: 2 });
    const [{ text }] = await db.sql<{ text: string }[]>`select telemetry::text as text from device_telemetry_latest where thing_id = ${proto}`;
    expect(JSON.parse(text)).toEqual(JSON.parse('{"__proto__":{"polluted":true},"n":1,"m":2}'));
    expect(({} as Record<string, unknown>).polluted).toBeUndefined();
  });

  it('a started buffer writes a batch by itself (its timer is armed by the first thing), again for a later batch, and stop writes what waits', async () => {
    const { ingest } = buffer();
    const seen = async (things: string[]) => (await db.sql<{ count: number }[]>`
      select count(*)::int as count from device_connectivity where thing_id in ${db.sql(things)} and last_seen is not null`)[0].count;
    ingest.start();
    const first = [crypto.randomUUID(), crypto.randomUUID()];
    for (const t of first) ingest.seenNow(t);
    await expect.poll(() => seen(first), { timeout: 10_000, interval: 50 }).toBe(2);
    // after a flush the buffer is idle: the next thing arms the timer again
    const second = [crypto.randomUUID()];
    ingest.addTelemetry(second[0], ...telemetry({ b: 1 }));
    await expect.poll(() => seen(second), { timeout: 10_000, interval: 50 }).toBe(1);
    const third = [crypto.randomUUID()];
    ingest.seenNow(third[0]);
    await ingest.stop();
    expect(await seen(third)).toBe(1);
  });
});


describe('whenStored (what a durable PUBACK waits for)', () => {
  it("answers after the batch is committed, each thing's in the order asked; one asked during a write of the thing waits for that write; a refused row answers false for its thing only", async () => {
    const { ingest } = buffer();
    const [x, y] = [crypto.randomUUID(), crypto.randomUUID()];
    const answers: string[] = [];
    const stored = (label: string) => (ok: boolean) => void answers.push(`${label}:${ok}`);
    const committed = async (thingId: string) =>
      (await db.sql<{ telemetry: { n: number } }[]>`select telemetry from device_telemetry_latest where thing_id = ${thingId}`)[0]?.telemetry;

    ingest.addTelemetry(x, ...telemetry({ n: 1 }));
    ingest.whenStored(x, stored('x1'));
    ingest.addTelemetry(y, ...telemetry({ n: 1 }));
    ingest.whenStored(y, stored('y1'));
    ingest.whenStored(x, stored('x2'));
    const batch = ingest.batch;
    // asked for a flush at the end of this turn (not FLUSH_MS: the buffer's timer is not started)
    const first = waitFor(() => answers.length >= 3, 5000, 'first answers');
    await new Promise((r) => setImmediate(r));
    expect(ingest.batch).toBe(batch + 1);
    // the batch is being written: a waiter of x now waits for it, one of a thing not in it for the next
    ingest.whenStored(x, stored('x3'));
    await first;
    expect(await committed(x)).toEqual({ n: 1 });
    await waitFor(() => answers.length >= 4, 5000, 'x3');
    expect(answers.filter((a) => a.startsWith('x'))).toEqual(['x1:true', 'x2:true', 'x3:true']);
    expect(answers).toContain('y1:true');

    await db.sql`alter table device_telemetry_latest add constraint no_poison check (telemetry::text not like '%poison%')`;
    try {
      ingest.addTelemetry(x, ...telemetry({ poison: 1 }));
      ingest.whenStored(x, stored('x4'));
      ingest.addTelemetry(y, ...telemetry({ n: 2 }));
      ingest.whenStored(y, stored('y2'));
      await waitFor(() => answers.length >= 6, 5000, 'answers of the refused batch');
      expect(answers.slice(4).sort()).toEqual(['x4:false', 'y2:true']);
      expect(await committed(y)).toEqual({ n: 2 });
    } finally {
      await db.sql`alter table device_telemetry_latest drop constraint no_poison`;
    }
  });
});
