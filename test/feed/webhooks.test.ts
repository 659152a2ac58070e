import fs from 'node:fs';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestGateway, type TestGateway } from '../helpers/gateway.js';
import { createAccount, type TestAccount } from '../helpers/accounts.js';
import { enrollDevice } from '../helpers/devices.js';
import { waitFor } from '../helpers/wait.js';
import crypto from 'node:crypto';
import { ManualClock } from '../../src/lib/clock.js';
import { bornThings, createModel, createTestCa, registerFactoryService, signed, startReceiver, step, verifyStandardWebhook, type TestCa, approvedRegistrar } from './helpers.js';

/**
 * Webhook delivery end to end: an HTTPS receiver inside the test (its certificate from a CA of
 * the test, trusted through OUTBOUND_CA_FILE) verifies every delivery with an independent
 * Standard Webhooks implementation; retries after 500s keep their webhook-id; the failure rule
 * and a 410 suspend the subscription; deliveries never hold up the change (nodes and restarts:
 * webhookNodes.test.ts).
 * Retry timing is shortened by settings (50 ms backoff, 3 attempts, 2 dropped deliveries suspend).
 */
let ca: TestCa;
let receiver: Awaited<ReturnType<typeof startReceiver>>;
let gw: TestGateway;
let a: TestAccount;

const settings = (ca: TestCa) => ({
  ALLOW_PRIVATE_TARGETS: 'true', OUTBOUND_CA_FILE: ca.caFile, WEBHOOK_RETRY_BASE_MS: '50', WEBHOOK_MAX_ATTEMPTS: '3', WEBHOOK_SUSPEND_AFTER: '2', WEBHOOK_TIMEOUT_MS: '5000',
});

beforeAll(async () => {
  ca = await createTestCa();
  receiver = await startReceiver(ca);
  gw = await startTestGateway(settings(ca));
  a = await createAccount(gw);
});
afterAll(async () => {
  await receiver?.close();
  await gw?.close();
  fs.rmSync(ca.dir, { recursive: true, force: true });
});

const PATH = '/provisioning/v1/state-change-subscriptions';

async function subscribe(path: string, extra: Record<string, unknown> = {}, account = a): Promise<{ id: string; secret: string }> {
  const res = await gw.http.post(PATH, { target_url: receiver.url(path), acknowledge_polling_still_mandatory: true, ...extra }, { token: account.admin });
  expect(res.status, res.text).toBe(201);
  return res.body;
}

const subscription = async (id: string) => (await gw.http.get(`${PATH}/${id}`, { token: a.viewer })).body;

describe('webhook deliveries', () => {
  it('each matching change is POSTed, signed with the subscription secret; an independent verifier accepts it; the body is the feed item', async () => {
    const account = await createAccount(gw);
    const all = await subscribe('/all', {}, account);
    const ends = await subscribe('/ends', { event_filter: { new_states: ['ANNIHILATED'] } }, account);
    const device = await enrollDevice(gw, account);
    expect((await gw.http.post(`/api/v1/things/${device.thingId}/annihilate`, undefined, { token: account.admin })).status).toBe(200);

    await waitFor(() => receiver.at('/all').length === 2 && receiver.at('/ends').length === 1, 20_000, 'two deliveries to /all and one to /ends');
    const feed = (await gw.http.get('/provisioning/v1/state-changes', { token: account.viewer })).body.items;
    const bodies = receiver.at('/all').map((r) => JSON.parse(r.body)).sort((x, y) => x.data.sequence - y.data.sequence);
    expect(bodies.map((b) => b.data)).toEqual(feed);
    expect(bodies[0]).toMatchObject({ type: 'thing.state_changed', timestamp: feed[0].changed_at });
    expect(JSON.parse(receiver.at('/ends')[0].body).data).toMatchObject({ thing_id: device.thingId, new_state: 'ANNIHILATED' });

    for (const r of receiver.at('/all')) {
      expect(r.headers['content-type']).toBe('application/json');
      expect(r.headers['webhook-id']).toMatch(/^msg_/);
      expect(r.headers['webhook-signature']).toMatch(/^v1,[A-Za-z0-9+/]+=*$/);
      expect(verifyStandardWebhook(all.secret, r.headers, r.body)).toBe(true);
      // another subscription's secret does not verify it
      expect(verifyStandardWebhook(ends.secret, r.headers, r.body)).toBe(false);
    }
  });

  it("a subscription of a registrar-bound factory service gets the changes of its registrar's models only", async () => {
    const account = await createAccount(gw);
    const service = await registerFactoryService(gw, account, { registrarId: await approvedRegistrar(gw, account) });
    // signing time: now (the gateway runs on the system clock here), a second further per request
    const res = await signed(gw, new ManualClock(), service.creds, 'POST', PATH, { target_url: receiver.url('/registrar'), acknowledge_polling_still_mandatory: true });
    expect(res.status, res.text).toBe(201);
    const [other] = await bornThings(gw, account.id, 1, { modelId: await createModel(gw, account) });
    const [served] = await bornThings(gw, account.id, 1, { modelId: service.modelId });
    const [control] = await bornThings(gw, account.id, 1, { modelId: service.modelId });
    await waitFor(() => receiver.at('/registrar').length === 2, 20_000, 'two deliveries');
    expect(receiver.at('/registrar').map((r) => JSON.parse(r.body).data.thing_id).sort()).toEqual([served, control].sort());
    expect(receiver.at('/registrar').some((r) => r.body.includes(other))).toBe(false);
  });

  it('a tampered delivery fails verification: body, id, timestamp or signature changed, or no signature', async () => {
    const s = await subscribe('/tamper');
    await bornThings(gw, a.id, 1);
    const [r] = await waitFor(() => (receiver.at('/tamper').length === 1 ? receiver.at('/tamper') : undefined), 20_000, 'a delivery');
    const h = r.headers;
    expect(verifyStandardWebhook(s.secret, h, r.body)).toBe(true);
    const body = JSON.parse(r.body);
    expect(verifyStandardWebhook(s.secret, h, JSON.stringify({ ...body, data: { ...body.data, new_state: 'ACTIVATED' } }))).toBe(false);
    expect(verifyStandardWebhook(s.secret, h, `${r.body} `)).toBe(false);
    expect(verifyStandardWebhook(s.secret, { ...h, 'webhook-id': `${h['webhook-id']}x` }, r.body)).toBe(false);
    expect(verifyStandardWebhook(s.secret, { ...h, 'webhook-timestamp': String(Number(h['webhook-timestamp']) + 1) }, r.body)).toBe(false);
    const sig = Buffer.from(h['webhook-signature'].slice(3), 'base64');
    sig[0] ^= 1;
    expect(verifyStandardWebhook(s.secret, { ...h, 'webhook-signature': `v1,${sig.toString('base64')}` }, r.body)).toBe(false);
    expect(verifyStandardWebhook(s.secret, { ...h, 'webhook-signature': undefined }, r.body)).toBe(false);
  });

  it('500s are retried with the same webhook-id and body until a 2xx; the subscription stays ACTIVE', async () => {
    receiver.on('/flaky', (n) => (n <= 2 ? 500 : 200));
    const s = await subscribe('/flaky');
    await bornThings(gw, a.id, 1);
    const attempts = await waitFor(() => (receiver.at('/flaky').length === 3 ? receiver.at('/flaky') : undefined), 20_000, 'three attempts');
    expect(attempts.map((r) => r.status)).toEqual([500, 500, 200]);
    expect(new Set(attempts.map((r) => r.headers['webhook-id'])).size).toBe(1);
    expect(new Set(attempts.map((r) => r.body)).size).toBe(1);
    for (const r of attempts) expect(verifyStandardWebhook(s.secret, r.headers, r.body)).toBe(true);
    await waitFor(async () => (await gw.db.sql`select 1 from webhook_deliveries where subscription_id = ${s.id}`).length === 0, 10_000, 'the delivery row to go');
    expect(await subscription(s.id)).toMatchObject({ status: 'ACTIVE', consecutive_failures: 0 });
  });

  it('suspended after WEBHOOK_SUSPEND_AFTER deliveries in a row failed every attempt; no deliveries while suspended; PATCH status=ACTIVE resumes', async () => {
    receiver.on('/down', 500);
    const s = await subscribe('/down');
    await subscribe('/control');
    await bornThings(gw, a.id, 1);
    await waitFor(async () => (await subscription(s.id)).consecutive_failures === 1, 20_000, 'the first dropped delivery');
    expect(receiver.at('/down')).toHaveLength(3); // the retry budget: 3 attempts, then dropped
    expect((await subscription(s.id)).status).toBe('ACTIVE');
    await bornThings(gw, a.id, 1);
    const suspended = await waitFor(async () => {
      const body = await subscription(s.id);
      return body.status === 'SUSPENDED' && body;
    }, 20_000, 'the suspension');
    expect(suspended).toMatchObject({ suspended_reason: 'delivery-failures', consecutive_failures: 2 });
    expect(receiver.at('/down')).toHaveLength(6);

    // a later change reaches the healthy subscription, not the suspended one
    const [later] = await bornThings(gw, a.id, 1);
    await waitFor(() => receiver.at('/control').some((r) => JSON.parse(r.body).data.thing_id === later), 20_000, 'the control delivery');
    expect(receiver.at('/down')).toHaveLength(6);
    expect(await gw.db.sql`select 1 from webhook_deliveries where subscription_id = ${s.id}`).toHaveLength(0);

    receiver.on('/down', 204);
    expect((await gw.http.patch(`${PATH}/${s.id}`, { status: 'ACTIVE' }, { token: a.admin })).body).toMatchObject({ status: 'ACTIVE', consecutive_failures: 0 });
    const [afterwards] = await bornThings(gw, a.id, 1);
    await waitFor(() => receiver.at('/down').some((r) => r.status === 204 && JSON.parse(r.body).data.thing_id === afterwards), 20_000, 'delivery after reactivation');
  });

  it('a 410 from the receiver suspends at once', async () => {
    receiver.on('/gone', 410);
    const s = await subscribe('/gone');
    await bornThings(gw, a.id, 1);
    const body = await waitFor(async () => {
      const b = await subscription(s.id);
      return b.status === 'SUSPENDED' && b;
    }, 20_000, 'the suspension');
    expect(body.suspended_reason).toBe('receiver-gone');
    expect(receiver.at('/gone')).toHaveLength(1);
  });

  it('a change held back by a transaction still running past the active window goes out when that transaction ends, not at the next idle poll', async () => {
    const account = await createAccount(gw);
    await subscribe('/held', {}, account);
    // a transaction of another connection, begun before the change: the horizon stays below the change
    const holder = await gw.db.sql.reserve();
    try {
      await holder`begin`;
      await holder`select pg_current_xact_id()`;
      await bornThings(gw, account.id, 1);
      // past the 10 s of fast polls after a change: before, the next look was the 30 s idle poll
      await new Promise((r) => setTimeout(r, 12_000));
      expect(receiver.at('/held')).toHaveLength(0);
      await holder`commit`;
    } finally {
      holder.release();
    }
    // looked for every second while held back: here within a second or two (the idle poll would be about 28 s away)
    await waitFor(() => receiver.at('/held').length === 1, 20_000, 'the held-back delivery');
  }, 60_000);

  it('a delivery never holds up the transaction of a change: changes commit while a receiver does not answer', async () => {
    receiver.on('/stuck', 'hang');
    await subscribe('/stuck', { event_filter: { new_states: ['PROVISIONED'] } });
    const ids = await bornThings(gw, a.id, 2);
    await step(gw, [ids[0]], 'PROVISION');
    await waitFor(() => receiver.at('/stuck').length === 1, 20_000, 'the hanging delivery');
    // the receiver holds that request open; the next change commits and is in the feed regardless
    await step(gw, [ids[1]], 'PROVISION');
    const [row] = await gw.db.sql<{ state: string }[]>`select lifecycle_state as state from things where id = ${ids[1]}`;
    expect(row.state).toBe('PROVISIONED');
    expect(receiver.at('/stuck').filter((r) => r.status === 0)).toHaveLength(receiver.at('/stuck').length);
    receiver.release();
    await waitFor(() => receiver.at('/stuck').length === 2, 20_000, 'the second delivery');
    receiver.release();
  });
});
