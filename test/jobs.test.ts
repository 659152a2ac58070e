import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Jobs } from '../src/jobs.js';
import { createLogger } from '../src/log.js';
import { createTestDatabase, type TestDatabase } from './helpers/db.js';

let db: TestDatabase;
let jobs: Jobs;
const attempts: { n: number; at: number }[] = [];
const batchedRuns: number[] = [];
const batchedIds = new Map<number, string>();
const elsewhereRuns: number[] = [];
const delayedRuns: { n: number; at: number }[] = [];

beforeAll(async () => {
  db = await createTestDatabase();
  jobs = new Jobs(db.url, createLogger('silent', false));
  jobs.define<{ n: number }>('flaky', async ({ n }) => {
    attempts.push({ n, at: Date.now() });
    if (attempts.length < 3) throw new Error('transient failure');
  }, { retryLimit: 4, retryDelay: 1 });
  jobs.define<{ n: number }>('batched', async ({ n }) => {
    batchedRuns.push(n);
    if (n === 13) throw new Error('bad job');
  }, { retryLimit: 0, batchSize: 20 });
  jobs.define<{ n: number }>('elsewhere', async ({ n }) => { elsewhereRuns.push(n); });
  jobs.define<{ n: number }>('delayed', async ({ n }) => { delayedRuns.push({ n, at: Date.now() }); });
  await jobs.start(false);
  // the batch test queues its jobs before the worker starts, so they come in one fetch
  for (let n = 1; n <= 15; n++) batchedIds.set(n, (await jobs.send('batched', { n }))!);
  await jobs.stop();
  await jobs.start();
});
afterAll(async () => {
  await jobs.stop();
  await db.drop();
});

describe('durable jobs (pg-boss)', () => {
  it('retries a failing job with backoff until it succeeds, and records it in Postgres', async () => {
    const id = await jobs.send('flaky', { n: 7 });
    expect(id).toBeTruthy();
    await expect.poll(() => attempts.length, { timeout: 30_000, interval: 250 }).toBe(3);
    expect(attempts.every((a) => a.n === 7)).toBe(true);
    // backoff: the second wait is longer than the first
    const gap1 = attempts[1].at - attempts[0].at;
    const gap2 = attempts[2].at - attempts[1].at;
    expect(gap2).toBeGreaterThan(gap1);
    await expect.poll(async () => {
      const [row] = await db.sql<{ state: string; retry_count: number }[]>`select state, retry_count from pgboss.job where id = ${id}`;
      return row?.state;
    }, { timeout: 10_000 }).toBe('completed');
  });

  it('a failing job of a batch fails alone; the others of its batch complete', async () => {
    await expect.poll(() => batchedRuns.length, { timeout: 20_000, interval: 100 }).toBe(15);
    await expect.poll(async () => {
      const rows = await db.sql<{ id: string; state: string }[]>`select id, state from pgboss.job where name = 'batched'`;
      return rows.filter((r) => r.state === 'completed' || r.state === 'failed').length;
    }, { timeout: 10_000 }).toBe(15);
    const states = new Map((await db.sql<{ id: string; state: string }[]>`select id, state from pgboss.job where name = 'batched'`).map((r) => [r.id, r.state]));
    for (const [n, id] of batchedIds) expect(states.get(id), `job ${n}`).toBe(n === 13 ? 'failed' : 'completed');
  });

  it("a job sent by another node (no local wake-up) is run by this node's worker: the due poll wakes it, not the minute-long fallback poll", async () => {
    const other = new Jobs(db.url, createLogger('silent', false));
    other.define('elsewhere', async () => {});
    await other.start(false);
    try {
      await other.send('elsewhere', { n: 1 });
      await expect.poll(() => elsewhereRuns, { timeout: 15_000, interval: 100 }).toEqual([1]);
    } finally {
      await other.stop();
    }
  });

  it('a delayed job sent by another node runs when it falls due: the due query is timed by the next start_after, not the 30 s idle fallback', async () => {
    const other = new Jobs(db.url, createLogger('silent', false));
    other.define('delayed', async () => {});
    await other.start(false);
    try {
      await other.send('delayed', { n: 1 }, { startAfter: 2 });
      await expect.poll(() => delayedRuns.map((r) => r.n), { timeout: 15_000, interval: 100 }).toEqual([1]);
    } finally {
      await other.stop();
    }
  });
});
