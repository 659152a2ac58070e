import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { MqttClient } from 'mqtt';
import { startTestGateway, type TestGateway } from '../helpers/gateway.js';
import { createAccount, type TestAccount } from '../helpers/accounts.js';
import { waitFor } from '../helpers/wait.js';
import { ManualClock } from '../../src/lib/clock.js';
import { OTA_SWEEP_JOB } from '../../src/ota/index.js';
import { actionsOf, control, createFilter, createRollout, enrollFleet, manualDevice } from './helpers.js';

const clock = new ManualClock();
let gw: TestGateway;
let account: TestAccount;
const clients: MqttClient[] = [];

beforeAll(async () => {
  gw = await startTestGateway({}, { clock });
  account = await createAccount(gw, { capabilities: ['manage_ota_rollouts'] });
});
afterAll(async () => {
  await Promise.all(clients.map((c) => c.endAsync(true).catch(() => {})));
  await gw?.close();
});

const sentAt = async (actionId: string) => (await gw.db.sql<{ sent_at: Date }[]>`select sent_at from ota_actions where id = ${actionId}`)[0].sent_at.getTime();

describe('the resend sweep (durable timers: times from the clock, rows in the database)', () => {
  it('re-publishes a pending action after 60 s and a taken-up action without reports after 10 minutes, not before', async () => {
    const fleet = await enrollFleet(gw, account, 2, 'RESEND-1');
    const [a, b] = await Promise.all(fleet.map((d) => manualDevice(gw.mqttPort!, d)));
    clients.push(a.client, b.client);
    const filter = await createFilter(gw, account, { model: 'RESEND-1' });
    const rollout = await createRollout(gw, account, filter.id, { groups: 1, success: 100, error: 0 });
    await control(gw, account, rollout.id, 'start');
    await waitFor(() => a.received.length === 1 && b.received.length === 1, 20_000, 'first delivery');
    const actionA = a.received[0].action_id;
    const actionB = b.received[0].action_id;
    // a takes its action up; b's first message is taken as lost (b never reports)
    await a.report({ status: 'received' }, actionA);
    await waitFor(async () => (await actionsOf(gw, account, rollout.id, '&status=delivered')).length === 1, 20_000, 'a delivered');
    const firstSentA = await sentAt(actionA);

    clock.advance(61_000);
    await gw.gw.jobs.send(OTA_SWEEP_JOB, {});
    await waitFor(() => b.received.length === 2, 20_000, 'pending action sent again');
    await waitFor(async () => (await sentAt(actionB)) === clock.now().getTime(), 20_000, 'sweep done');
    expect(b.received[1].action_id).toBe(actionB);
    expect(await sentAt(actionA)).toBe(firstSentA);
    expect(a.received).toHaveLength(1);

    clock.advance(10 * 60_000);
    await gw.gw.jobs.send(OTA_SWEEP_JOB, {});
    await waitFor(() => a.received.length === 2, 20_000, 'taken-up action sent again');
    expect(a.received[1].action_id).toBe(actionA);
  });
});
