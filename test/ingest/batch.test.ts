import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestGateway, expectProblem, type TestGateway } from '../helpers/gateway.js';
import { svcHeaders, userWithCredential } from '../iam/helpers.js';
import { P, batch, createPartner, envelope, product, stock, type Partner } from './helpers.js';

let gw: TestGateway;
let partner: Partner;

beforeAll(async () => {
  gw = await startTestGateway();
  partner = await createPartner(gw);
});
afterAll(() => gw?.close());

describe('batch outcomes', () => {
  it('reports ACCEPTED, REPLAY, QUARANTINED and REJECTED per item, and the other items still process', async () => {
    const items = [
      product(1, { gtin: '4006381333931' }), // valid GS1 check digit
      product(2, { gtin: '4006381333932' }), // wrong check digit: business rule
      { source_id: 'P-3', source_version: 1 }, // sku missing: schema
      'not an object',
      product(4, { sku: '  lower ' }),
    ];
    const res = await batch(gw, partner, 'products', envelope(partner, items));
    expect(res.status).toBe(200);
    expect(res.body.results.map((r: any) => r.status)).toEqual(['ACCEPTED', 'QUARANTINED', 'REJECTED', 'REJECTED', 'ACCEPTED']);
    expect(res.body.summary).toEqual({ accepted: 2, replayed: 0, quarantined: 1, rejected: 2 });
    const [a, q, r] = res.body.results;
    expect(a.internal_id).toMatch(/^[0-9a-f-]{36}$/);
    expect(q).toMatchObject({ code: 'GTIN_CHECK_DIGIT', source_id: 'P-2' });
    expect(r.reason).toMatch(/sku/);
    // normalized and stored
    const rows = await gw.db.sql<{ source_id: string; data: any; internal_id: string }[]>`
      select source_id, data, internal_id from ingest_records where account_id = ${partner.id} order by source_id`;
    expect(rows.map((x) => x.source_id)).toEqual(['P-1', 'P-4']);
    expect(rows[1].data.sku).toBe('LOWER');
    expect(rows[0].internal_id).toBe(a.internal_id);
  });

  it('REPLAY for the stored source_version and older ones; a newer version updates the same record', async () => {
    const first = await batch(gw, partner, 'stock', envelope(partner, [stock(1, { source_version: 5 })]));
    const id = first.body.results[0].internal_id;
    const again = await batch(gw, partner, 'stock', envelope(partner, [stock(1, { source_version: 5 }), stock(1, { source_version: 4 }), stock(1, { source_version: 6, quantity: 3 })]));
    expect(again.body.results.map((r: any) => [r.status, r.code])).toEqual([['REPLAY', undefined], ['REPLAY', 'STALE'], ['ACCEPTED', undefined]]);
    expect(again.body.results[2].internal_id).toBe(id);
    const [row] = await gw.db.sql<{ source_version: number; data: any }[]>`select source_version, data from ingest_records where internal_id = ${id}`;
    expect(row.source_version).toBe(6);
    expect(row.data.quantity).toBe(3);
  });

  it('items of one source_id in one batch apply in order; only the newest is stored', async () => {
    const res = await batch(gw, partner, 'stock', envelope(partner, [stock(20, { source_version: 1 }), stock(20, { source_version: 2, quantity: 7 }), stock(20, { source_version: 1 })]));
    expect(res.body.results.map((r: any) => [r.status, r.code])).toEqual([['ACCEPTED', undefined], ['ACCEPTED', undefined], ['REPLAY', 'STALE']]);
    expect(new Set(res.body.results.map((r: any) => r.internal_id)).size).toBe(1);
    const [row] = await gw.db.sql<{ source_version: number; data: any }[]>`select source_version, data from ingest_records where account_id = ${partner.id} and source_id = 'S-20'`;
    expect([row.source_version, row.data.quantity]).toEqual([2, 7]);
  });

  it('two requests racing to store the same new version: one ACCEPTED, the other REPLAY, one record', async () => {
    for (let round = 0; round < 5; round++) {
      const item = stock(100 + round, { source_version: 3 });
      const [a, b] = await Promise.all([1, 2].map(() => batch(gw, partner, 'stock', envelope(partner, [item]))));
      const statuses = [a.body.results[0].status, b.body.results[0].status].sort();
      expect(statuses).toEqual(['ACCEPTED', 'REPLAY']);
      const rows = await gw.db.sql<{ internal_id: string }[]>`select internal_id from ingest_records where account_id = ${partner.id} and source_id = ${item.source_id as string}`;
      expect(rows).toHaveLength(1);
      expect([a, b].find((r) => r.body.results[0].status === 'ACCEPTED')!.body.results[0].internal_id).toBe(rows[0].internal_id);
    }
  });

  it('quarantined items can be listed, released (stored) and discarded', async () => {
    const res = await batch(gw, partner, 'stock', envelope(partner, [stock(50, { quantity: -2 }), stock(51, { quantity: -1 })]));
    const [q1, q2] = res.body.results;
    expect(q1).toMatchObject({ status: 'QUARANTINED', code: 'NEGATIVE_QUANTITY' });
    const list = await gw.http.get(`${P}/quarantine?warehouse_id=${partner.warehouse}&resource=stock&limit=1`, { token: partner.viewer });
    expect(list.status).toBe(200);
    expect(list.body.has_more).toBe(true);
    const next = await gw.http.get(`${P}/quarantine?warehouse_id=${partner.warehouse}&resource=stock&limit=1&page_token=${list.body.next_page_token}`, { token: partner.viewer });
    expect([list.body.items[0].quarantine_id, next.body.items[0].quarantine_id]).toEqual([q1.quarantine_id, q2.quarantine_id]);
    expect(next.body.has_more).toBe(false);

    // two releases at once: one stores the item, the other finds the entry gone
    const releases = await Promise.all([1, 2].map(() => gw.http.post(`${P}/quarantine/${q1.quarantine_id}/release`, undefined, { token: partner.operator })));
    expect(releases.map((r) => r.status).sort()).toEqual([200, 404]);
    const released = releases.find((r) => r.status === 200)!;
    expect(released.body).toMatchObject({ status: 'ACCEPTED', source_id: 'S-50', quarantine_id: q1.quarantine_id });
    const [row] = await gw.db.sql<{ data: any }[]>`select data from ingest_records where internal_id = ${released.body.internal_id}`;
    expect(row.data.quantity).toBe(-2);

    expect((await gw.http.delete(`${P}/quarantine/${q2.quarantine_id}`, { token: partner.operator })).status).toBe(204);
    expectProblem(await gw.http.get(`${P}/quarantine/${q2.quarantine_id}`, { token: partner.viewer }), 404);
    expect((await gw.db.sql`select 1 from ingest_records where account_id = ${partner.id} and source_id = 'S-51'`).length).toBe(0);
  });
});

describe("the spec's error table", () => {
  it('400: malformed JSON, missing envelope fields, unknown mode, missing partner_id, unknown path; no items processed', async () => {
    const cases: [string, unknown, RegExp][] = [
      ['{"partner_id": ', undefined, /not valid JSON/],
      ['', envelope(partner, [product(900)], { partner_id: undefined }), /partner_id/],
      ['', envelope(partner, [product(901)], { correlation_id: undefined }), /correlation_id/],
      ['', envelope(partner, [product(902)], { mode: 'SOMETIMES' }), /mode/],
      ['', envelope(partner, [product(903)], { items: 'x' }), /items/],
      ['', { ...envelope(partner, [product(904)]), extra: 1 }, /extra/],
    ];
    for (const [raw, body, detail] of cases) {
      const res = raw ? await gw.http.post(`${P}/products/batch`, undefined, { token: partner.operator, raw }) : await batch(gw, partner, 'products', body);
      const p = expectProblem(res, 400);
      expect(p.detail).toMatch(detail);
      expect(res.body.results).toBeUndefined();
    }
    expect((await gw.db.sql`select 1 from ingest_records where account_id = ${partner.id} and source_id like 'P-90%'`).length).toBe(0);
    for (const [method, path] of [['POST', `${P}/shipments/batch`], ['GET', `${P}/products/batch`], ['GET', P]]) {
      const p = expectProblem(await gw.http.request(method, path, method === 'POST' ? {} : undefined, { token: partner.operator }), 400);
      expect(p.detail).toMatch(/unknown endpoint/);
    }
  });

  it('401 without or with a bad credential, also on unknown paths', async () => {
    expectProblem(await gw.http.post(`${P}/products/batch`, envelope(partner, [])), 401);
    expectProblem(await gw.http.get(`${P}/nothing-here`), 401);
    expectProblem(await gw.http.post(`${P}/products/batch`, envelope(partner, []), { token: 'not-a-jwt' }), 401);
  });

  it('403: another partner, an unregistered warehouse, a warehouse the user is not scoped to, a role without ingest', async () => {
    const other = await createPartner(gw, 'WH-OTHER');
    expectProblem(await batch(gw, partner, 'products', envelope(other, [product(1)])), 403);
    expectProblem(await batch(gw, partner, 'products', envelope(partner, [product(1)], { warehouse_id: 'WH-OTHER' })), 403);
    const scoped = await gw.http.put(`${P}/warehouses/WH-SCOPED`, { name: 'scoped', principals: [`admin-${partner.id.slice(0, 8)}`] }, { token: partner.admin });
    expect(scoped.status).toBe(201);
    const p = expectProblem(await batch(gw, partner, 'products', envelope(partner, [product(1)], { warehouse_id: 'WH-SCOPED' })), 403);
    expect(p.detail).toMatch(/not scoped/);
    expect((await batch(gw, partner, 'products', envelope(partner, [product(1)], { warehouse_id: 'WH-SCOPED' }), partner.admin)).status).toBe(200);
    expectProblem(await batch(gw, partner, 'products', envelope(partner, [product(1)]), partner.viewer), 403);
  });

  it('404: unknown job, quarantine entry, page token', async () => {
    expectProblem(await gw.http.get(`${P}/jobs/00000000-0000-4000-8000-000000000000`, { token: partner.viewer }), 404);
    expectProblem(await gw.http.get(`${P}/jobs/not-a-job`, { token: partner.viewer }), 404);
    expectProblem(await gw.http.get(`${P}/quarantine/00000000-0000-4000-8000-000000000000`, { token: partner.viewer }), 404);
    expectProblem(await gw.http.get(`${P}/quarantine?warehouse_id=${partner.warehouse}&page_token=bogus`, { token: partner.viewer }), 404);
  });

  it('422: schema-valid but business-invalid envelope', async () => {
    for (const over of [{ partner_id: 'ACME' }, { correlation_id: 'has spaces' }, { warehouse_id: 'WH 1' }, { mode: 'FULL_REFRESH' }]) {
      const res = await batch(gw, partner, 'products', envelope(partner, [product(1)], over));
      expectProblem(res, 422);
      expect(res.body.results).toBeUndefined();
    }
    const many = Array.from({ length: 1001 }, (_, i) => product(i));
    expect(expectProblem(await batch(gw, partner, 'products', envelope(partner, many)), 422).detail).toMatch(/bulk job/);
  });

  it('every problem carries the trace id of the incoming traceparent, or a new one', async () => {
    const traceId = '4bf92f3577b34da6a3ce929d0e0e4736';
    const res = await gw.http.post(`${P}/products/batch`, envelope(partner, [], { partner_id: 'x' }), { token: partner.operator, headers: { traceparent: `00-${traceId}-00f067aa0ba902b7-01` } });
    expect(expectProblem(res, 422).trace_id).toBe(traceId);
    expect(res.headers.get('traceparent')).toContain(traceId);
    const fresh = expectProblem(await gw.http.get(`${P}/nope`), 401);
    expect(fresh.trace_id).toMatch(/^[0-9a-f]{32}$/);
  });
});

describe('partner credentials', () => {
  it("a partner integration uses its user's access key (SVC); warehouse scoping follows the user", async () => {
    const { credential } = await userWithCredential(gw, partner, 'wms-bot', ['operator']);
    const headers = svcHeaders(credential);
    const ok = await gw.http.post(`${P}/products/batch`, envelope(partner, [product(300)]), { headers });
    expect(ok.status).toBe(200);
    expect(ok.body.results[0].status).toBe('ACCEPTED');
    await gw.http.put(`${P}/warehouses/WH-BOT`, { name: 'bot only', principals: ['wms-bot'] }, { token: partner.admin });
    expect((await gw.http.post(`${P}/products/batch`, envelope(partner, [product(301)], { warehouse_id: 'WH-BOT' }), { headers })).status).toBe(200);
    expectProblem(await batch(gw, partner, 'products', envelope(partner, [product(301)], { warehouse_id: 'WH-BOT' })), 403);
    expectProblem(await gw.http.post(`${P}/products/batch`, envelope(partner, [product(302)]), { headers: svcHeaders({ ...credential, secret_key: 'wrong' }) }), 401);
  });
});

describe('OpenAPI', () => {
  it('documents the ingest operations with their schemas (not the unknown-path catch-all)', async () => {
    const doc = (await gw.http.get('/docs/json')).body;
    const paths = Object.keys(doc.paths).filter((p) => p.startsWith(P));
    expect(paths).toEqual(expect.arrayContaining([`${P}/products/batch`, `${P}/stock/batch`, `${P}/jobs`, `${P}/jobs/{job_id}`, `${P}/jobs/{job_id}/errors`, `${P}/quarantine`, `${P}/quarantine/{quarantine_id}/release`, `${P}/warehouses/{warehouse_id}`]));
    expect(paths.some((p) => p.includes('*'))).toBe(false);
    const errors = doc.paths[`${P}/jobs/{job_id}/errors`].get;
    // the answer is the named IngestJobErrorPage component (issue 39)
    expect(errors.responses['200'].content['application/json'].schema).toEqual({ $ref: '#/components/schemas/IngestJobErrorPage' });
    expect(Object.keys(doc.components.schemas.IngestJobErrorPage.properties)).toEqual(['items', 'next_page_token', 'has_more']);
  });
});

describe('warehouses', () => {
  it('admins register and list them; operators may not', async () => {
    expectProblem(await gw.http.put(`${P}/warehouses/WH-2`, { name: 'x' }, { token: partner.operator }), 403);
    const again = await gw.http.put(`${P}/warehouses/${partner.warehouse}`, { name: 'renamed' }, { token: partner.admin });
    expect(again.status).toBe(200);
    const list = await gw.http.get(`${P}/warehouses`, { token: partner.viewer });
    expect(list.body.items.find((w: any) => w.warehouse_id === partner.warehouse).name).toBe('renamed');
  });
});

