import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ManualClock } from '../../src/lib/clock.js';
import { startTestGateway, expectProblem, type TestGateway } from '../helpers/gateway.js';
import { waitFor } from '../helpers/wait.js';
import { P, batch, createPartner, envelope, product, stock, type Partner } from './helpers.js';

let gw: TestGateway;
let partner: Partner;
const clock = new ManualClock('2026-11-23T10:00:00Z');
/** while set, a job waits after each committed chunk (fault point `ingest.job.chunk`) */
let gate: Promise<void> | undefined;

beforeAll(async () => {
  gw = await startTestGateway({}, { clock, faults: async (point) => { if (point === 'ingest.job.chunk' && gate) await gate; } });
  partner = await createPartner(gw);
});
afterAll(() => gw?.close());

const job = (body: unknown, token = partner.operator) => gw.http.post(`${P}/jobs`, body, { token });
const jobState = async (id: string) => (await gw.http.get(`${P}/jobs/${id}`, { token: partner.viewer })).body;
const finished = (id: string) => waitFor(async () => {
  const j = await jobState(id);
  return j.state.startsWith('COMPLETED') ? j : undefined;
}, 60_000, `job ${id} to complete`);

describe('bulk jobs', () => {
  it('a 100,000-item job completes with errors, and its errors page through with no gap', async () => {
    const N = 100_000;
    const expected: number[] = [];
    const items = Array.from({ length: N }, (_, i) => {
      if (i % 7 === 3) { expected.push(i); return stock(i, { quantity: 'many' }); }
      if (i % 11 === 5) { expected.push(i); return stock(i, { quantity: -1 }); }
      return stock(i);
    });
    const res = await job(envelope(partner, items, { resource: 'stock' }));
    expect(res.status).toBe(202);
    expect(res.headers.get('location')).toBe(`${P}/jobs/${res.body.job_id}`);
    expect(res.body).toMatchObject({ state: 'QUEUED', total_items: N });

    const done = await finished(res.body.job_id);
    const rejected = expected.filter((i) => i % 7 === 3).length;
    expect(done).toMatchObject({ state: 'COMPLETED_WITH_ERRORS', processed_items: N, rejected, quarantined: expected.length - rejected, accepted: N - expected.length });
    expect(done.errors_url).toBe(`${gw.httpUrl}${P}/jobs/${res.body.job_id}/errors`);

    const seen: number[] = [];
    let url = `${P}/jobs/${res.body.job_id}/errors?limit=1000`;
    for (;;) {
      const page = await gw.http.get(url, { token: partner.viewer });
      expect(page.status).toBe(200);
      for (const e of page.body.items) {
        expect(e.status).toBe(e.index % 7 === 3 ? 'REJECTED' : 'QUARANTINED');
        expect(e.source_id).toBe(`S-${e.index}`);
        seen.push(e.index);
      }
      if (!page.body.has_more) {
        expect(page.body.next_page_token).toBeNull();
        break;
      }
      url = `${P}/jobs/${res.body.job_id}/errors?limit=1000&page_token=${page.body.next_page_token}`;
    }
    expect(seen).toEqual(expected);
    const [{ n }] = await gw.db.sql<{ n: number }[]>`select count(*)::int as n from ingest_records where account_id = ${partner.id} and resource = 'stock'`;
    expect(n).toBe(N - expected.length);
    expect((await gw.db.sql`select 1 from ingest_job_items where job_id = ${res.body.job_id}`).length).toBe(0);
  }, 60_000);

  it('409 for a FULL_REFRESH (or any job, or a batch) while a FULL_REFRESH is in flight; the refresh deletes what it does not name', async () => {
    const p = await createPartner(gw, 'WH-FR');
    const seeded = await batch(gw, p, 'products', envelope(p, [1, 2, 3, 4, 5].map((n) => product(n))));
    expect(seeded.body.summary.accepted).toBe(5);

    let open!: () => void;
    gate = new Promise((r) => (open = r));
    try {
      const refresh = await job(envelope(p, [1, 2, 3].map((n) => product(n, { source_version: 2 })), { resource: 'products', mode: 'FULL_REFRESH' }), p.operator);
      expect(refresh.status).toBe(202);
      await waitFor(async () => (await gw.http.get(`${P}/jobs/${refresh.body.job_id}`, { token: p.viewer })).body.processed_items === 3, 30_000, 'first chunk');
      for (const mode of ['FULL_REFRESH', 'DELTA']) {
        const res = await job(envelope(p, [product(9)], { resource: 'products', mode }), p.operator);
        expect(expectProblem(res, 409).job_id).toBe(refresh.body.job_id);
      }
      expectProblem(await batch(gw, p, 'products', envelope(p, [product(9)])), 409);
      // another resource of the warehouse is not affected
      expect((await batch(gw, p, 'stock', envelope(p, [stock(1)]))).status).toBe(200);
      open();
      const done = await waitFor(async () => {
        const j = (await gw.http.get(`${P}/jobs/${refresh.body.job_id}`, { token: p.viewer })).body;
        return j.state === 'COMPLETED' ? j : undefined;
      }, 30_000, 'refresh');
      expect(done).toMatchObject({ accepted: 3, deleted: 2 });
      expect(done.errors_url).toBeUndefined();
    } finally {
      gate = undefined;
      open?.();
    }
    const left = await gw.db.sql<{ source_id: string }[]>`select source_id from ingest_records where account_id = ${p.id} and resource = 'products' order by source_id`;
    expect(left.map((r) => r.source_id)).toEqual(['P-1', 'P-2', 'P-3']);
    expect((await batch(gw, p, 'products', envelope(p, [product(9)]))).status).toBe(200);
  });

  it('a retried job submission returns the first answer; errors expire 30 days after completion', async () => {
    const body = envelope(partner, [product(1, { gtin: '12345678' })], { resource: 'products' });
    const [a, b] = await Promise.all([job(body), job(body)]);
    expect([a.status, b.status]).toEqual([202, 202]);
    expect(b.body.job_id).toBe(a.body.job_id);
    expect([a, b].filter((r) => r.headers.get('idempotent-replayed') === 'true').length).toBe(1);
    const done = await finished(a.body.job_id);
    expect(done.state).toBe('COMPLETED_WITH_ERRORS');
    const errors = await gw.http.get(`${P}/jobs/${a.body.job_id}/errors`, { token: partner.viewer });
    expect(errors.body.items).toMatchObject([{ index: 0, source_id: 'P-1', status: 'QUARANTINED', code: 'GTIN_CHECK_DIGIT' }]);
    // another job's page token is not a cursor of this one
    expectProblem(await gw.http.get(`${P}/jobs/${a.body.job_id}/errors?page_token=${Buffer.from(JSON.stringify({ l: 'job:x', s: 1 })).toString('base64url')}`, { token: partner.viewer }), 404);

    clock.advance(31 * 86_400_000);
    try {
      expectProblem(await gw.http.get(`${P}/jobs/${a.body.job_id}/errors`, { token: partner.viewer }), 404);
      await gw.testHooks.ingest.sweep();
      expect((await gw.db.sql`select 1 from ingest_job_errors where job_id = ${a.body.job_id}`).length).toBe(0);
      expect((await gw.http.get(`${P}/jobs/${a.body.job_id}`, { token: partner.viewer })).status).toBe(200);
    } finally {
      clock.advance(-31 * 86_400_000);
    }
  });

  it("another partner's job is 404; a job of a warehouse the user is not scoped to is 403", async () => {
    const res = await job(envelope(partner, [product(77)], { resource: 'products' }));
    const other = await createPartner(gw, 'WH-X');
    expectProblem(await gw.http.get(`${P}/jobs/${res.body.job_id}`, { token: other.viewer }), 404);
    await gw.http.put(`${P}/warehouses/${partner.warehouse}`, { name: 'closed', principals: ['nobody'] }, { token: partner.admin });
    try {
      expectProblem(await gw.http.get(`${P}/jobs/${res.body.job_id}`, { token: partner.viewer }), 403);
    } finally {
      await gw.http.put(`${P}/warehouses/${partner.warehouse}`, { name: 'open', principals: null }, { token: partner.admin });
    }
    await finished(res.body.job_id);
  });

  it("lists a warehouse's jobs newest first, in pages, by state", async () => {
    const p = await createPartner(gw, 'WH-LIST');
    const ids: string[] = [];
    for (let i = 0; i < 3; i++) {
      const res = await job(envelope(p, [product(i)], { resource: 'products' }), p.operator);
      ids.push(res.body.job_id);
    }
    const seen: string[] = [];
    let url = `${P}/jobs?warehouse_id=WH-LIST&limit=2`;
    for (;;) {
      const page = await gw.http.get(url, { token: p.viewer });
      expect(page.status).toBe(200);
      seen.push(...page.body.items.map((j: any) => j.job_id));
      if (!page.body.has_more) break;
      url = `${P}/jobs?warehouse_id=WH-LIST&limit=2&page_token=${page.body.next_page_token}`;
    }
    expect(seen).toEqual([...ids].reverse());
    await waitFor(async () => (await gw.http.get(`${P}/jobs?warehouse_id=WH-LIST&state=COMPLETED`, { token: p.viewer })).body.items.length === 3, 30_000, 'jobs completed');
    expect((await gw.http.get(`${P}/jobs?warehouse_id=WH-LIST&state=QUEUED`, { token: p.viewer })).body.items).toEqual([]);
    expectProblem(await gw.http.get(`${P}/jobs?warehouse_id=${partner.warehouse}`, { token: p.viewer }), 403);
  });
});
