import postgres from 'postgres';
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
    const retry = await batch(gw, partner, 'products', body);
    expect(retry.status).toBe(200);
    expect(retry.body.results[0].status).toBe('ACCEPTED');
  });
});
