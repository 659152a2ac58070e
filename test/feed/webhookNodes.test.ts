import fs from 'node:fs';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestGateway, type TestGateway } from '../helpers/gateway.js';
import { createTestDatabase } from '../helpers/db.js';
import { createAccount, type TestAccount } from '../helpers/accounts.js';
import { waitFor } from '../helpers/wait.js';
import { bornThings, createTestCa, startReceiver, verifyStandardWebhook, type TestCa } from './helpers.js';

/**
 * Webhook delivery across gateway nodes and restarts, and the trust of OUTBOUND_CA_FILE: an HTTPS
 * receiver inside the test (certificate from a CA of the test) records every request.
 */
let ca: TestCa;
let receiver: Awaited<ReturnType<typeof startReceiver>>;
let gw: TestGateway;

const settings = (ca: TestCa) => ({
  ALLOW_PRIVATE_TARGETS: 'true', OUTBOUND_CA_FILE: ca.caFile, WEBHOOK_RETRY_BASE_MS: '50', WEBHOOK_MAX_ATTEMPTS: '3', WEBHOOK_SUSPEND_AFTER: '2', WEBHOOK_TIMEOUT_MS: '5000',
});

beforeAll(async () => {
  ca = await createTestCa();
  receiver = await startReceiver(ca);
  gw = await startTestGateway(settings(ca));
});
afterAll(async () => {
  await receiver?.close();
  await gw?.close();
  fs.rmSync(ca.dir, { recursive: true, force: true });
});

const PATH = '/provisioning/v1/state-change-subscriptions';

async function subscribe(path: string, account: TestAccount): Promise<{ id: string; secret: string }> {
  const res = await gw.http.post(PATH, { target_url: receiver.url(path), acknowledge_polling_still_mandatory: true }, { token: account.admin });
  expect(res.status, res.text).toBe(201);
  return res.body;
}

describe('two nodes', () => {
  it('both dispatch and deliver from one queue: every change reaches the receiver once', async () => {
    const second = await startTestGateway(settings(ca), { db: gw.db });
    try {
      const account = await createAccount(gw);
      await subscribe('/both', account);
      const ids = (await Promise.all([bornThings(gw, account.id, 60, { perTx: 5 }), bornThings(second, account.id, 60, { perTx: 5 })])).flat();
      await waitFor(() => new Set(receiver.at('/both').map((r) => r.headers['webhook-id'])).size === ids.length, 30_000, 'a delivery of every change');
      const delivered = receiver.at('/both');
      expect(delivered).toHaveLength(ids.length);
      expect(delivered.map((r) => JSON.parse(r.body).data.thing_id).sort()).toEqual([...ids].sort());
    } finally {
      await second.close();
    }
  });
});

describe('restarts and the trust of OUTBOUND_CA_FILE', () => {
  it('a delivery that failed before the gateway stopped is retried by the restarted gateway, with the same webhook-id', async () => {
    const db = await createTestDatabase();
    // a first retry 2 to 4 s away: the gateway stops before it
    const env = { ...settings(ca), WEBHOOK_RETRY_BASE_MS: '4000', WEBHOOK_MAX_ATTEMPTS: '5' };
    let node = await startTestGateway(env, { db });
    try {
      const account = await createAccount(node);
      receiver.on('/restart', (n) => (n === 1 ? 503 : 204));
      const res = await node.http.post(PATH, { target_url: receiver.url('/restart'), acknowledge_polling_still_mandatory: true }, { token: account.admin });
      const secret = res.body.secret;
      await bornThings(node, account.id, 1);
      await waitFor(() => receiver.at('/restart').length === 1, 20_000, 'the first attempt');
      await node.close();
      const [pending] = await db.sql<{ attempts: number; last_status: number }[]>`select attempts, last_status from webhook_deliveries`;
      expect(pending).toMatchObject({ attempts: 1, last_status: 503 });

      node = await startTestGateway(env, { db });
      const [first, second] = await waitFor(() => (receiver.at('/restart').length === 2 ? receiver.at('/restart') : undefined), 20_000, 'the retry after the restart');
      expect(second.status).toBe(204);
      expect(second.headers['webhook-id']).toBe(first.headers['webhook-id']);
      expect(verifyStandardWebhook(secret, second.headers, second.body)).toBe(true);
      await waitFor(async () => (await db.sql`select 1 from webhook_deliveries`).length === 0, 10_000, 'the delivered row to go');
    } finally {
      await node.close();
      await db.drop();
    }
  });

  it("without OUTBOUND_CA_FILE the test CA is not trusted: the attempt fails in the TLS handshake and the receiver sees nothing", async () => {
    const node = await startTestGateway({ ALLOW_PRIVATE_TARGETS: 'true', WEBHOOK_RETRY_BASE_MS: '60000' });
    try {
      const account = await createAccount(node);
      const res = await node.http.post(PATH, { target_url: receiver.url('/untrusted'), acknowledge_polling_still_mandatory: true }, { token: account.admin });
      expect(res.status, res.text).toBe(201);
      await bornThings(node, account.id, 1);
      const [row] = await waitFor(async () => {
        const rows = await node.db.sql<{ attempts: number; last_error: string | null; last_status: number | null }[]>`select attempts, last_error, last_status from webhook_deliveries`;
        return rows.length && rows[0].last_error ? rows : undefined;
      }, 20_000, 'the failed attempt');
      expect(row).toMatchObject({ attempts: 1, last_status: null });
      expect(row.last_error).toMatch(/certificate|UNABLE_TO_VERIFY|SELF_SIGNED/i);
      expect(receiver.at('/untrusted')).toHaveLength(0);
    } finally {
      await node.close();
    }
  });
});
