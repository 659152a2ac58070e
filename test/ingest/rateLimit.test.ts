import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestGateway, expectProblem, type TestGateway, type HttpResponse } from '../helpers/gateway.js';
import { REDIS_URL, redisReachable } from '../helpers/redis.js';
import { batch, createPartner, envelope, product, type Partner } from './helpers.js';

/** A client that honours Retry-After: on 429 it waits that long and tries once more. */
async function politely(send: () => Promise<HttpResponse>): Promise<{ first: HttpResponse; final: HttpResponse }> {
  const first = await send();
  if (first.status !== 429) return { first, final: first };
  const seconds = Number(first.headers.get('retry-after'));
  await new Promise((r) => setTimeout(r, seconds * 1000));
  return { first, final: await send() };
}

describe('per-partner rate limits, in process', () => {
  let gw: TestGateway;
  let a: Partner;
  let b: Partner;
  beforeAll(async () => {
    gw = await startTestGateway({ INGEST_RATE_LIMIT: '3', INGEST_RATE_WINDOW_SECONDS: '2' });
    a = await createPartner(gw);
    b = await createPartner(gw);
  });
  afterAll(() => gw?.close());

  it('429 problem with Retry-After beyond the limit; another partner is not affected; a client honouring Retry-After gets through', async () => {
    const send = (p: Partner) => batch(gw, p, 'products', envelope(p, [product(1)]));
    const statuses: number[] = [];
    let limited: HttpResponse | undefined;
    for (let i = 0; i < 10 && !limited; i++) {
      const res = await send(a);
      statuses.push(res.status);
      if (res.status === 429) limited = res;
    }
    expect(statuses.filter((s) => s === 200).length).toBeGreaterThanOrEqual(1);
    const p = expectProblem(limited!, 429);
    expect(p.detail).toMatch(/rate limit/);
    const retryAfter = Number(limited!.headers.get('retry-after'));
    expect(retryAfter).toBeGreaterThanOrEqual(1);
    expect(retryAfter).toBeLessThanOrEqual(2);
    expect((await send(b)).status).toBe(200);
    const { first, final } = await politely(() => send(a));
    expect(first.status).toBe(429);
    expect(final.status).toBe(200);
  });
});

describe('per-partner rate limits across nodes (REDIS_URL: cluster mode)', async () => {
  const reachable = await redisReachable();
  if (!reachable) console.warn(`Redis at ${REDIS_URL} is not reachable: the cluster rate-limit test is skipped`);
  let n1: TestGateway;
  let n2: TestGateway;
  let partner: Partner;
  beforeAll(async () => {
    if (!reachable) return;
    const env = { PUBLIC_BASE_URL: 'http://ingest-rl.test', REDIS_URL, INGEST_RATE_LIMIT: '6', INGEST_RATE_WINDOW_SECONDS: '60' };
    n1 = await startTestGateway({ ...env, NODE_ID: 'rl-1' });
    n2 = await startTestGateway({ ...env, NODE_ID: 'rl-2', JOBS: 'false' }, { db: n1.db });
    partner = await createPartner(n1);
  });
  afterAll(async () => {
    await n2?.close();
    await n1?.close();
  });

  it.skipIf(!reachable)('one counter for both nodes: the limit holds for requests spread over them', async () => {
    const statuses: number[] = [];
    for (let i = 0; i < 10; i++) {
      const node = i % 2 ? n2 : n1;
      statuses.push((await batch(node, partner, 'products', envelope(partner, [product(i)]))).status);
    }
    // 6 per minute for the partner in all, the PUT of its warehouse included: 5 batches pass,
    // alternating nodes; each node counting alone would have let all 10 through
    expect(statuses).toEqual([200, 200, 200, 200, 200, 429, 429, 429, 429, 429]);
    const limited = await batch(n1, partner, 'products', envelope(partner, [product(99)]));
    expectProblem(limited, 429);
    expect(Number(limited.headers.get('retry-after'))).toBeGreaterThan(0);
    expect(Number(limited.headers.get('retry-after'))).toBeLessThanOrEqual(60);
  });
});
