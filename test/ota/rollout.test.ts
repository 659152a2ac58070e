import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { MqttClient } from 'mqtt';
import { startTestGateway, type TestGateway } from '../helpers/gateway.js';
import { createAccount, type TestAccount } from '../helpers/accounts.js';
import { waitFor } from '../helpers/wait.js';
import type { EnrolledDevice } from '../helpers/devices.js';
import { connectDevice } from '../broker/fixtures.js';
import { joinOta, type OtaBehaviour } from '../../src/sim/ota.js';
import { actionsOf, connectFleet, control, createFilter, createRollout, enrollFleet, groupsOf, rolloutOf } from './helpers.js';

/**
 * 1,000 simulated devices (real enrollment over HTTP, real MQTT 5 mutual TLS connections, the
 * simulator's OTA behaviour): a rollout in two groups that STOPS when the first group's failure
 * rate passes its threshold, then one that COMPLETES, with a device offline at its start.
 */
const DEVICES = 1000;
let gw: TestGateway;
let account: TestAccount;
let fleet: EnrolledDevice[];
let clients: MqttClient[];
/** the devices whose update fails in the current rollout */
let failing = new Set<string>();
/** device -> outcomes it applied (one per action received and applied) */
const applied = new Map<string, boolean[]>();
const behaviour: OtaBehaviour = {
  fails: (thingId) => failing.has(thingId),
  onApplied: (thingId, ok) => applied.set(thingId, [...(applied.get(thingId) ?? []), ok]),
};

beforeAll(async () => {
  gw = await startTestGateway();
  account = await createAccount(gw, { capabilities: ['manage_ota_rollouts'] });
  fleet = await enrollFleet(gw, account, DEVICES, 'FLEET-1000', 32);
  clients = await connectFleet(gw.mqttPort!, fleet);
  await Promise.all(clients.map((c, i) => joinOta(c, fleet[i].thingId, behaviour)));
}, 120_000);
afterAll(async () => {
  await Promise.all((clients ?? []).map((c) => c.endAsync(true).catch(() => {})));
  await gw?.close();
});

/** thing id -> group index of a rollout */
async function groupsOfThings(rolloutId: string): Promise<Map<string, number>> {
  return new Map((await actionsOf(gw, account, rolloutId)).map((a) => [a.thing_id, a.group]));
}

describe(`a rollout over ${DEVICES} simulated devices in two groups`, () => {
  it('STOPS when the first group fails more than its error threshold: the second group never gets the update', async () => {
    const filter = await createFilter(gw, account, { model: 'FLEET-1000' });
    const rollout = await createRollout(gw, account, filter.id, { groups: [50, 50], success: 90, error: 10 });
    expect(rollout.total_targets).toBe(DEVICES);
    const groupOf = await groupsOfThings(rollout.id);
    const group0 = fleet.filter((d) => groupOf.get(d.thingId) === 0).map((d) => d.thingId);
    expect(group0).toHaveLength(500);
    // 20 % of the first group fails: more than 10 %
    failing = new Set(group0.slice(0, 100));
    applied.clear();

    expect((await control(gw, account, rollout.id, 'start')).status).toBe(200);
    await waitFor(async () => (await rolloutOf(gw, account, rollout.id)).state === 'STOPPED', 60_000, 'rollout stopped', 200);
    const groups = await groupsOf(gw, account, rollout.id);
    expect(groups.map((g) => g.state)).toEqual(['ERROR', 'CANCELLED']);
    expect(groups[0].failed).toBeGreaterThan(50);
    // the second group: every action cancelled, no device of it got an update
    const actions = await actionsOf(gw, account, rollout.id, '&group=1');
    expect(actions).toHaveLength(500);
    expect(new Set(actions.map((a) => a.status))).toEqual(new Set(['cancelled']));
    expect([...applied.keys()].filter((id) => groupOf.get(id) === 1)).toEqual([]);
    // devices of the first group that were already updating finish; their outcomes are kept
    await waitFor(() => applied.size === 500, 60_000, 'first group applied', 200);
    // (an action the device had not yet acknowledged when the rollout stopped was cancelled: its late reports are refused)
    const open = (a: Record<string, number>) => a.pending + a.delivered + a.downloading + a.installing;
    await waitFor(async () => open((await rolloutOf(gw, account, rollout.id)).actions) === 0, 60_000, 'first group reported', 200);
    const final = await rolloutOf(gw, account, rollout.id);
    expect(final.actions.succeeded + final.actions.failed + final.actions.cancelled).toBe(DEVICES);
    expect(final.actions.failed).toBeGreaterThan(50);
    expect(final.actions.succeeded).toBeLessThanOrEqual(400);
    expect(final.state).toBe('STOPPED');
  }, 120_000);

  it('COMPLETES when both groups stay within their thresholds; a device offline at the start gets its action on reconnect', async () => {
    const filter = await createFilter(gw, account, { model: 'FLEET-1000' });
    const rollout = await createRollout(gw, account, filter.id, { groups: 2, success: 90, error: 10 });
    const groupOf = await groupsOfThings(rollout.id);
    // 2 % fails in each group
    const inGroup = (g: number) => fleet.map((d, i) => ({ d, i })).filter(({ d }) => groupOf.get(d.thingId) === g);
    failing = new Set([...inGroup(0).slice(0, 10), ...inGroup(1).slice(0, 10)].map(({ d }) => d.thingId));
    applied.clear();
    // one device of the second group is offline when the rollout starts
    const offline = inGroup(1)[499];
    await clients[offline.i].endAsync();

    expect((await control(gw, account, rollout.id, 'start')).status).toBe(200);
    await waitFor(async () => (await rolloutOf(gw, account, rollout.id)).state === 'FINISHED', 60_000, 'rollout finished', 200);
    expect((await groupsOf(gw, account, rollout.id)).map((g) => g.state)).toEqual(['FINISHED', 'FINISHED']);
    await waitFor(() => applied.size === DEVICES - 1, 60_000, 'online devices applied', 200);
    await waitFor(async () => (await rolloutOf(gw, account, rollout.id)).actions.pending === 1 ? true : undefined, 60_000, 'all but one reported', 200);
    const [waiting] = await actionsOf(gw, account, rollout.id, `&thing_id=${offline.d.thingId}`);
    expect(waiting.status).toBe('pending');

    clients[offline.i] = await connectDevice(gw.mqttPort!, offline.d);
    await joinOta(clients[offline.i], offline.d.thingId, behaviour);
    await waitFor(async () => (await actionsOf(gw, account, rollout.id, `&thing_id=${offline.d.thingId}`))[0].status === 'succeeded', 30_000, 'offline device updated');
    const final = await rolloutOf(gw, account, rollout.id);
    expect(final.actions).toMatchObject({ succeeded: DEVICES - 20, failed: 20, pending: 0, cancelled: 0 });
    expect(applied.get(offline.d.thingId)).toEqual([true]);
  }, 120_000);
});
