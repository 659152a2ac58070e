import postgres from 'postgres';
import { waitFor } from '../helpers/wait.js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { adminUrl } from '../helpers/db.js';
import { startTestGateway, expectProblem, type TestGateway } from '../helpers/gateway.js';
import { P, batch, createPartner, envelope, product, type Partner } from './helpers.js';

let gw: TestGateway;
let partner: Partner;

beforeAll(async () => {
  gw = await startTestGateway();
  partner = await createPartner(gw);
});
afterAll(() => gw?.close());

describe('503', () => {
  it('while ingest is not accepting on this node (starting, stopping): 503 with Retry-After', async () => {
    gw.testHooks.ingest.setAccepting(false);
    try {
      const res = await batch(gw, partner, 'products', envelope(partner, [product(1)]));
      expectProblem(res, 503);
      expect(Number(res.headers.get('retry-after'))).toBeGreaterThan(0);
    } finally {
      gw.testHooks.ingest.setAccepting(true);
    }
    expect((await batch(gw, partner, 'products', envelope(partner, [product(1)]))).status).toBe(200);
  });

  it('while the database is unreachable: 503 with Retry-After (not 500); then the same request goes through', async () => {
    const name = new URL(gw.db.url).pathname.slice(1);
    const admin = postgres(adminUrl(), { max: 1, onnotice: () => {} });
    const body = envelope(partner, [product(2)]);
    try {
      await admin.unsafe(`alter database ${name} allow_connections false`);
      await admin`select pg_terminate_backend(pid) from pg_stat_activity where datname = ${name}`;
      const res = await batch(gw, partner, 'products', body);
      const p = expectProblem(res, 503);
      expect(p.detail).toMatch(/unreachable/);
      expect(res.headers.get('retry-after')).toBe('5');
    } finally {
      await admin.unsafe(`alter database ${name} allow_connections true`);
      await admin.end();
    }
    // as a client honouring Retry-After would: a connection attempt begun while connections were
    // refused may still fail the first retry; the database back, the same request goes through
    const retry = await waitFor(async () => {
      const r = await batch(gw, partner, 'products', body);
      if (r.status === 503) return undefined;
      return r;
    }, 20_000, 'the batch accepted once the database is back', 500);
    expect(retry.status).toBe(200);
    expect(retry.body.results[0].status).toBe('ACCEPTED');
  });
});
