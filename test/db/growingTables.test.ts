import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { GrowingTables } from '../../src/db/growingTables.js';
import { createLogger } from '../../src/log.js';
import { createTestDatabase, type TestDatabase } from '../helpers/db.js';
import { waitFor } from '../helpers/wait.js';

let db: TestDatabase;
let tables: GrowingTables;

beforeAll(async () => {
  db = await createTestDatabase();
  tables = new GrowingTables(db.sql, createLogger('silent', false));
  await db.sql`create table growth (id int primary key, note text) with (autovacuum_enabled = false)`; // only GrowingTables analyzes it here
});
afterAll(async () => {
  await tables.stop();
  await db.drop();
});

const reltuples = async () => (await db.sql<{ n: number }[]>`select reltuples::int as n from pg_class where relname = 'growth'`)[0].n;
const insert = (from: number, to: number) => db.sql`insert into growth select i, 'x' from generate_series(${from}::int, ${to}::int) i`;
/** the statistics collector reports a backend's counts within about a second: poll until the table shows up */
const analyzedOnce = () => waitFor(async () => (await tables.check()).includes('public.growth'), 20_000, 'growth to be analyzed');

describe('GrowingTables', () => {
  it('leaves a table below 1,000 rows alone, analyzes it once it has 1,000 never analyzed', async () => {
    await insert(1, 900);
    await new Promise((r) => setTimeout(r, 1500));
    expect(await tables.check()).not.toContain('public.growth');
    expect(await reltuples()).toBeLessThan(0); // never analyzed
    await insert(901, 1500);
    await analyzedOnce();
    expect(await reltuples()).toBe(1500);
    expect(await tables.check()).not.toContain('public.growth');
  });

  it('does not analyze again for updates, only once the rows have more than doubled', async () => {
    await db.sql`update growth set note = 'y'`;
    await db.sql`update growth set note = 'z'`;
    await new Promise((r) => setTimeout(r, 1500));
    expect(await tables.check()).not.toContain('public.growth');
    expect(await reltuples()).toBe(1500);
    await insert(1501, 3100);
    await analyzedOnce();
    expect(await reltuples()).toBe(3100);
  });

  it('leaves the table to the node that holds the lock', async () => {
    await insert(3101, 7000);
    await new Promise((r) => setTimeout(r, 1500));
    await db.sql.begin(async (tx) => {
      await tx`select pg_advisory_xact_lock(${0x7461626c})`;
      expect(await tables.check()).toEqual([]);
    });
    expect(await reltuples()).toBe(3100);
    await analyzedOnce();
    expect(await reltuples()).toBe(7000);
  });
});
