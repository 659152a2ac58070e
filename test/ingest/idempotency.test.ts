import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestGateway, expectProblem, type TestGateway } from '../helpers/gateway.js';
import { P, batch, createPartner, envelope, product, stock, type Partner } from './helpers.js';

let gw: TestGateway;
let node2: TestGateway;
let partner: Partner;
/** when set, the fault hook throws after a batch was processed, before its transaction commits */
let failBatches = false;

beforeAll(async () => {
  // two nodes behind one public address (one token issuer), sharing the database
  const env = { PUBLIC_BASE_URL: 'http://ingest.test' };
  gw = await startTestGateway({ ...env, NODE_ID: 'ingest-1' }, { faults: (point) => { if (point === 'ingest.batch.processed' && failBatches) throw new Error('injected fault'); } });
  node2 = await startTestGateway({ ...env, NODE_ID: 'ingest-2', JOBS: 'false' }, { db: gw.db });
  partner = await createPartner(gw);
});
afterAll(async () => {
  await node2?.close();
  await gw?.close();
});

describe('request-level idempotency (partner_id, correlation_id)', () => {
  it('identical requests at once, on two nodes, process once and all get the first answer', async () => {
    const body = envelope(partner, [stock(1), stock(2, { quantity: -5 }), { source_id: 'S-3' }]);
    const responses = await Promise.all(Array.from({ length: 8 }, (_, i) => batch(i % 2 ? node2 : gw, partner, 'stock', body)));
    expect(responses.map((r) => r.status)).toEqual(Array(8).fill(200));
    expect(responses.filter((r) => r.headers.get('idempotent-replayed') !== 'true')).toHaveLength(1);
    for (const r of responses) expect(r.body).toEqual(responses[0].body);
    expect(responses[0].body.results.map((r: any) => r.status)).toEqual(['ACCEPTED', 'QUARANTINED', 'REJECTED']);
    const [{ n }] = await gw.db.sql<{ n: number }[]>`select count(*)::int as n from ingest_quarantine where account_id = ${partner.id} and correlation_id = ${body.correlation_id as string}`;
    expect(n).toBe(1);
  });

  it('a retry later returns the first answer even though the record moved on; other content under the same key is 409', async () => {
    const body = envelope(partner, [product(10, { source_version: 1 })]);
    const first = await batch(gw, partner, 'products', body);
    expect(first.body.results[0].status).toBe('ACCEPTED');
    expect((await batch(gw, partner, 'products', envelope(partner, [product(10, { source_version: 2 })]))).body.results[0].status).toBe('ACCEPTED');
    const retry = await batch(node2, partner, 'products', body);
    expect(retry.status).toBe(200);
    expect(retry.headers.get('idempotent-replayed')).toBe('true');
    expect(retry.body).toEqual(first.body);
    // a fresh correlation_id with the same item is a new request: the item is now a REPLAY (older)
    expect((await batch(gw, partner, 'products', { ...body, correlation_id: `${body.correlation_id}-b` })).body.results[0]).toMatchObject({ status: 'REPLAY', code: 'STALE' });
    const changed = await batch(gw, partner, 'products', { ...body, items: [product(11)] });
    expect(expectProblem(changed, 409).detail).toMatch(/correlation_id/);
  });

  it('the same correlation_id in another partner is another request', async () => {
    const other = await createPartner(gw);
    const body = envelope(partner, [product(20)]);
    expect((await batch(gw, partner, 'products', body)).status).toBe(200);
    const res = await batch(gw, other, 'products', { ...body, partner_id: other.id, warehouse_id: other.warehouse }, other.operator);
    expect(res.status).toBe(200);
    expect(res.headers.get('idempotent-replayed')).toBeNull();
  });
});

describe('500', () => {
  it('a platform failure is a 500 problem with the trace id, writes nothing, and a retry with the same correlation_id processes', async () => {
    const body = envelope(partner, [product(30), product(31, { gtin: '00000001' })]);
    const traceId = 'aaaabbbbccccddddeeeeffff00001111';
    failBatches = true;
    try {
      const res = await batch(gw, partner, 'products', body);
      const p = expectProblem(await gw.http.post(`${P}/products/batch`, body, { token: partner.operator, headers: { traceparent: `00-${traceId}-1111222233334444-01` } }), 500);
      expect(p.trace_id).toBe(traceId);
      expectProblem(res, 500);
    } finally {
      failBatches = false;
    }
    const none = await gw.db.sql`
      select 1 from ingest_records where account_id = ${partner.id} and source_id in ('P-30', 'P-31')
      union all select 1 from ingest_quarantine where correlation_id = ${body.correlation_id as string}
      union all select 1 from ingest_requests where correlation_id = ${body.correlation_id as string}`;
    expect(none.length).toBe(0);
    const retry = await batch(gw, partner, 'products', body);
    expect(retry.status).toBe(200);
    expect(retry.headers.get('idempotent-replayed')).toBeNull();
    expect(retry.body.summary).toMatchObject({ accepted: 1, quarantined: 1 });
  });
});
