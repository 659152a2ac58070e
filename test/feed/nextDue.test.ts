import crypto from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createTestDatabase, type TestDatabase } from '../helpers/db.js';
import { nextDueInMs } from '../../src/feed/repo.js';

/**
 * When the delivery worker looks again after finding nothing to claim (src/feed/delivery.ts): the
 * next delivery the claim could take, or nothing pending. An empty queue once read as "due now",
 * and an idle gateway claimed every 5 ms (issue 19, bench:idle).
 */
let db: TestDatabase;
const account = crypto.randomUUID();

async function subscription(status: 'ACTIVE' | 'SUSPENDED'): Promise<string> {
  const id = crypto.randomUUID();
  await db.sql`
    insert into state_change_subscriptions (id, account_id, target_url, secret_sealed, status, created_by, created_at, updated_at)
    values (${id}, ${account}, 'https://example.com/hook', '\\x00', ${status}, 'test', now(), now())`;
  return id;
}

async function delivery(subscriptionId: string, inMs: number, leasedForMs?: number): Promise<void> {
  await db.sql`
    insert into webhook_deliveries (id, subscription_id, event_seq, body, next_attempt_at, lease_until)
    values (${crypto.randomUUID()}, ${subscriptionId}, ${Math.floor(Math.random() * 1e9)}, '{}',
      now() + ${inMs} * interval '1 millisecond',
      ${leasedForMs === undefined ? null : new Date(Date.now() + leasedForMs)})`;
}

beforeAll(async () => {
  db = await createTestDatabase();
  await db.sql`insert into accounts (id, name) values (${account}, 'a')`;
});
afterAll(async () => {
  await db?.drop();
});

describe('nextDueInMs', () => {
  it('is undefined with no delivery pending (not 0: that read as due now)', async () => {
    expect(await nextDueInMs(db.sql)).toBeUndefined();
  });

  it('ignores deliveries the claim would not take: a SUSPENDED subscription, a row whose lease is held', async () => {
    await delivery(await subscription('SUSPENDED'), -1000);
    const active = await subscription('ACTIVE');
    await delivery(active, -1000, 60_000);
    expect(await nextDueInMs(db.sql)).toBeUndefined();
  });

  it('is the wait until the earliest unleased delivery of an ACTIVE subscription, 0 when already due', async () => {
    const active = await subscription('ACTIVE');
    await delivery(active, 60_000);
    await delivery(active, 30_000);
    const ms = await nextDueInMs(db.sql);
    expect(ms).toBeGreaterThan(20_000);
    expect(ms).toBeLessThanOrEqual(30_000);
    await delivery(active, -5000);
    expect(await nextDueInMs(db.sql)).toBe(0);
  });

  it('a row whose lease lapsed (its node crashed) is due: the claim takes it again', async () => {
    await db.sql`delete from webhook_deliveries`;
    await delivery(await subscription('ACTIVE'), -60_000, -1000);
    expect(await nextDueInMs(db.sql)).toBe(0);
  });
});

