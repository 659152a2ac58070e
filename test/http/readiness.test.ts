import postgres from 'postgres';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Sql } from '../../src/db/client.js';
import { DatabaseProbe } from '../../src/db/readiness.js';
import { adminUrl } from '../helpers/db.js';
import { startTestGateway, type TestGateway } from '../helpers/gateway.js';
import { waitFor } from '../helpers/wait.js';

/**
 * /readyz is HAProxy's health check of a node: it must answer from the database while the node's
 * main pool is saturated (a reconnect storm's connect bookkeeping), and still say when the
 * database is down. docs/decisions.md, "Listeners for scale" (readiness).
 */
let gw: TestGateway;

beforeAll(async () => {
  gw = await startTestGateway();
});
afterAll(() => gw?.close());

// an advisory lock key of this file's own (pg_locks.objid is its low 32 bits)
const LOCK = 7_211_321;

describe('/readyz', () => {
  it('answers 200 while every connection of the main pool is busy, before their statements finish', async () => {
    expect((await gw.http.get('/readyz')).status).toBe(200);
    const poolSize = gw.gw.config.DATABASE_POOL_SIZE;
    // a connection of the test holds the lock; one statement per pool connection of the gateway waits on it
    const holder = await gw.db.sql.reserve();
    await holder`select pg_advisory_lock(${LOCK})`;
    let released = false;
    const release = async () => {
      if (released) return;
      released = true;
      await holder`select pg_advisory_unlock(${LOCK})`;
    };
    const order: string[] = [];
    const busy = Array.from({ length: poolSize }, () => gw.gw.sql`select pg_advisory_xact_lock(${LOCK})`.then(() => void order.push('pool statement')));
    try {
      await waitFor(async () => {
        const [row] = await gw.db.sql<{ n: number }[]>`
          select count(*)::int as n from pg_locks
          where locktype = 'advisory' and objid = ${LOCK} and not granted and database = (select oid from pg_database where datname = current_database())`;
        return row.n === poolSize;
      }, 20_000, 'every connection of the main pool waiting on the lock');

      // Only so that code which queues /readyz behind the pool fails on the order below instead of
      // the test's timeout: the lock is released when /readyz has answered.
      const fallback = setTimeout(() => void release(), 15_000);
      const ready = await gw.http.get('/readyz');
      order.push('readyz');
      clearTimeout(fallback);
      await release();
      await Promise.all(busy);

      expect(order).toEqual(['readyz', ...Array(poolSize).fill('pool statement')]);
      expect(ready.status).toBe(200);
      expect(ready.body.checks).toMatchObject({ database: true, broker: true });
    } finally {
      await release();
      holder.release();
      await Promise.allSettled(busy);
    }
  });

  it('answers 503 naming the database while it refuses connections, and 200 once it is back', async () => {
    const name = new URL(gw.db.url).pathname.slice(1);
    const admin = postgres(adminUrl(), { max: 1, onnotice: () => {} });
    try {
      await admin.unsafe(`alter database ${name} allow_connections false`);
      await admin`select pg_terminate_backend(pid) from pg_stat_activity where datname = ${name}`;
      const down = await gw.http.get('/readyz');
      expect(down.status).toBe(503);
      expect(down.headers.get('content-type')).toMatch(/^application\/problem\+json/);
      expect(down.body.detail).toMatch(/not ready: database/);
      expect(down.body.checks).toMatchObject({ database: false, broker: true });
    } finally {
      await admin.unsafe(`alter database ${name} allow_connections true`);
      await admin.end();
    }
    await waitFor(async () => (await gw.http.get('/readyz')).status === 200, 20_000, '/readyz 200 once the database is back', 200);
  });
});

describe('DatabaseProbe', () => {
  /** a stand-in for the probe's connection: counts statements, each settles when the test says */
  function fakeSql() {
    const pending: ((ok: boolean) => void)[] = [];
    const sql = Object.assign(() => new Promise((resolve, reject) => pending.push((ok) => (ok ? resolve([]) : reject(new Error('down'))))), { end: async () => {} });
    return { sql: sql as unknown as Sql, pending };
  }

  it('concurrent checks share the statement in flight; the next check sends a new one', async () => {
    const { sql, pending } = fakeSql();
    const probe = new DatabaseProbe(sql, 60_000);
    const checks = Array.from({ length: 5 }, () => probe.check());
    expect(pending).toHaveLength(1);
    pending[0](true);
    expect(await Promise.all(checks)).toEqual([true, true, true, true, true]);
    const next = probe.check();
    expect(pending).toHaveLength(2);
    pending[1](false);
    expect(await next).toBe(false);
  });

  it('reports the database down when the statement does not settle in time, and sends no second one meanwhile', async () => {
    const { sql, pending } = fakeSql();
    const probe = new DatabaseProbe(sql, 1);
    expect(await probe.check()).toBe(false);
    expect(await probe.check()).toBe(false);
    expect(pending).toHaveLength(1);
    // once the late statement settles, the next check sends a new one
    pending[0](true);
    await new Promise((r) => setImmediate(r));
    const again = probe.check();
    expect(pending).toHaveLength(2);
    pending[1](true);
    expect(await again).toBe(true);
  });
});
