import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { MqttClient } from 'mqtt';
import { startTestGateway, expectProblem, type TestGateway } from '../helpers/gateway.js';
import { createAccount, type TestAccount } from '../helpers/accounts.js';
import { revokeDevice, type EnrolledDevice } from '../helpers/devices.js';
import { waitFor } from '../helpers/wait.js';
import { connectDevice } from '../broker/fixtures.js';
import { actionsOf, control, createFilter, createRollout, drained, enrollFleet, groupsOf, manualDevice, rolloutOf } from './helpers.js';

/**
 * Issue 37 item 8: targets revoked during a rollout are skipped (their actions end `skipped`, the
 * thresholds count over the targets not skipped), so the rollout finishes; target filters take
 * `revoked` and `connected`. Real enrollment over HTTP, real MQTT 5 mutual-TLS devices.
 */
let gw: TestGateway;
let account: TestAccount;
const clients: MqttClient[] = [];

beforeAll(async () => {
  gw = await startTestGateway();
  account = await createAccount(gw, { capabilities: ['manage_ota_rollouts'] });
});
afterAll(async () => {
  await Promise.all(clients.map((c) => c.endAsync(true).catch(() => {})));
  await gw?.close();
});

type Device = Awaited<ReturnType<typeof manualDevice>> & { d: EnrolledDevice };

/** Enrolls `n` devices of a model of their own, each connected over MQTT and listening for updates. */
async function fleetOf(n: number, model: string): Promise<Map<string, Device>> {
  const enrolled = await enrollFleet(gw, account, n, model);
  const devices = await Promise.all(enrolled.map(async (d) => ({ ...(await manualDevice(gw.mqttPort!, d)), d })));
  clients.push(...devices.map((x) => x.client));
  return new Map(devices.map((x) => [x.d.thingId, x]));
}

/** The device's report on the action it received. */
async function report(device: Device, status: string) {
  const [action] = device.received;
  await device.report({ action_id: action.action_id, status }, action.action_id);
}

const byStatus = async (rolloutId: string, status: string) => (await actionsOf(gw, account, rolloutId, `&status=${status}`)).map((a) => a.thing_id).sort();

describe('a rollout whose targets are revoked while it runs', () => {
  it('skips the 5 revoked targets and FINISHES: each group reaches its threshold over the targets that can answer', async () => {
    const fleet = await fleetOf(20, 'REVOKE-20');
    const filter = await createFilter(gw, account, { model: 'REVOKE-20' });
    const rollout = await createRollout(gw, account, filter.id, { groups: 2, success: 80, error: 20 });
    expect(rollout.total_targets).toBe(20);
    const actions = await actionsOf(gw, account, rollout.id);
    const group = (g: number) => actions.filter((a) => a.group === g).map((a) => fleet.get(a.thing_id)!);
    const [g0, g1] = [group(0), group(1)];
    expect([g0.length, g1.length]).toEqual([10, 10]);

    expect((await control(gw, account, rollout.id, 'start')).status).toBe(200);
    await waitFor(() => g0.every((x) => x.received.length === 1), 30_000, 'group 0 received its actions');
    // 4 succeed, one is downloading when its thing is revoked
    for (const x of g0.slice(0, 4)) await report(x, 'succeeded');
    await report(g0[4], 'downloading');
    await waitFor(async () => (await byStatus(rollout.id, 'downloading')).length === 1, 10_000, 'downloading recorded');
    await drained(gw);

    // mid-rollout: 3 of the running group (one downloading, two pending) and 2 of the next one
    const revoked = [...g0.slice(4, 7), ...g1.slice(0, 2)];
    for (const x of revoked) await revokeDevice(gw, account, x.d.thingId);
    // the revocation's event skips their actions, whatever their group's state (no sweep involved)
    await waitFor(async () => (await byStatus(rollout.id, 'skipped')).length === 5, 10_000, 'revoked targets skipped');
    expect(await byStatus(rollout.id, 'skipped')).toEqual(revoked.map((x) => x.d.thingId).sort());
    for (const a of await actionsOf(gw, account, rollout.id, '&status=skipped')) expect(a.reason).toBe('thing revoked');
    // 4 of the 7 that can answer: below 80 %, still running (the evaluation follows the skip)
    await waitFor(async () => (await groupsOf(gw, account, rollout.id))[0].skipped === 3, 10_000, 'group 0 tallied its skipped targets');
    expect((await groupsOf(gw, account, rollout.id))[0]).toMatchObject({ state: 'RUNNING', succeeded: 4, skipped: 3 });

    // the other 3 succeed: 7 of 10 would stay under 80 % for ever; over the 7 answerable it finishes
    for (const x of g0.slice(7)) await report(x, 'succeeded');
    // (6 of 7 is already 85.7 %: the group may finish on the sixth, the seventh then comes as a late result, still tallied)
    await waitFor(async () => {
      const [g] = await groupsOf(gw, account, rollout.id);
      return g.state === 'FINISHED' && g.succeeded === 7;
    }, 10_000, 'group 0 finished with the seven');
    expect((await groupsOf(gw, account, rollout.id))[0]).toMatchObject({ total: 10, succeeded: 7, failed: 0, skipped: 3 });

    // the next group: its revoked targets never get the update; 6 of its 8 answerable is 75 %, 7 is 87.5 %
    const answering = g1.slice(2);
    await waitFor(() => answering.every((x) => x.received.length === 1), 30_000, 'group 1 received its actions');
    for (const x of answering.slice(0, 6)) await report(x, 'succeeded');
    await waitFor(async () => (await groupsOf(gw, account, rollout.id))[1].succeeded === 6, 10_000, 'six succeeded');
    await drained(gw);
    expect((await rolloutOf(gw, account, rollout.id)).state).toBe('RUNNING');
    await report(answering[6], 'succeeded');
    await waitFor(async () => (await rolloutOf(gw, account, rollout.id)).state === 'FINISHED', 10_000, 'rollout finished');
    // a late result is still counted
    await report(answering[7], 'succeeded');
    await waitFor(async () => (await rolloutOf(gw, account, rollout.id)).actions.succeeded === 15, 10_000, 'late result counted');
    await drained(gw); // and its group's evaluation, which tallies it

    const final = await rolloutOf(gw, account, rollout.id);
    expect(final.actions).toMatchObject({ succeeded: 15, skipped: 5, failed: 0, pending: 0, scheduled: 0, downloading: 0, cancelled: 0 });
    expect((await groupsOf(gw, account, rollout.id)).map((g) => [g.state, g.succeeded, g.skipped])).toEqual([['FINISHED', 7, 3], ['FINISHED', 8, 2]]);
    expect(g1.slice(0, 2).map((x) => x.received.length)).toEqual([0, 0]);
  }, 120_000);

  it('a group whose targets were all revoked before it started FINISHES at its start; the next group runs', async () => {
    const fleet = await fleetOf(4, 'REVOKE-4');
    const rollout = await createRollout(gw, account, (await createFilter(gw, account, { model: 'REVOKE-4' })).id, { groups: 2, success: 100, error: 0 });
    const actions = await actionsOf(gw, account, rollout.id);
    const group = (g: number) => actions.filter((a) => a.group === g).map((a) => fleet.get(a.thing_id)!);
    for (const x of group(0)) await revokeDevice(gw, account, x.d.thingId);
    await waitFor(async () => (await byStatus(rollout.id, 'skipped')).length === 2, 10_000, 'scheduled actions skipped');
    expect((await groupsOf(gw, account, rollout.id))[0].state).toBe('SCHEDULED');

    expect((await control(gw, account, rollout.id, 'start')).status).toBe(200);
    // no report will come for group 0: its evaluation at start ends it and starts group 1
    await waitFor(() => group(1).every((x) => x.received.length === 1), 30_000, 'group 1 received its actions');
    expect((await groupsOf(gw, account, rollout.id))[0]).toMatchObject({ state: 'FINISHED', succeeded: 0, skipped: 2 });
    for (const x of group(1)) await report(x, 'succeeded');
    await waitFor(async () => (await rolloutOf(gw, account, rollout.id)).state === 'FINISHED', 10_000, 'rollout finished');
    expect(group(0).map((x) => x.received.length)).toEqual([0, 0]);
  }, 60_000);
});

describe('target filters: revoked and connected', () => {
  it('select the things not revoked, or connected now, as the registry does; a rollout takes only what they match', async () => {
    const enrolled = await enrollFleet(gw, account, 6, 'FILTER-RC');
    const ids = enrolled.map((d) => d.thingId);
    // 0 to 3 connected; 0 (connected) and 5 (never connected) revoked
    const connected = await Promise.all(enrolled.slice(0, 4).map((d) => connectDevice(gw.mqttPort!, d)));
    clients.push(...connected);
    const preview = async (query: Record<string, unknown>) => {
      const f = await createFilter(gw, account, { model: 'FILTER-RC', ...query });
      const res = await gw.http.get(`/api/v1/ota/target-filters/${f.id}/preview?limit=500`, { token: account.operator });
      expect(res.status, res.text).toBe(200);
      expect(res.body.count).toBe(res.body.items.length);
      return { filter: f, ids: (res.body.items as { id: string }[]).map((t) => t.id).sort() };
    };
    const some = (...n: number[]) => n.map((i) => ids[i]).sort();
    await waitFor(async () => (await preview({ connected: true })).ids.length === 4, 10_000, 'four connected');

    await revokeDevice(gw, account, ids[0]);
    await revokeDevice(gw, account, ids[5]);
    // the revoked device's session is closed: it is no longer connected
    await waitFor(async () => (await preview({ connected: true })).ids.length === 3, 10_000, 'revoked device disconnected');

    expect((await preview({ revoked: false })).ids).toEqual(some(1, 2, 3, 4));
    expect((await preview({ revoked: true })).ids).toEqual(some(0, 5));
    expect((await preview({ connected: true })).ids).toEqual(some(1, 2, 3));
    expect((await preview({ connected: false })).ids).toEqual(some(0, 4, 5));
    const ready = await preview({ revoked: false, connected: true });
    expect(ready.ids).toEqual(some(1, 2, 3));
    const stored = await gw.http.get(`/api/v1/ota/target-filters/${ready.filter.id}`, { token: account.viewer });
    expect(stored.body.query).toEqual({ model: 'FILTER-RC', revoked: false, connected: true });

    // a rollout takes what the filter matches: only the three that can answer
    const narrow = await createRollout(gw, account, ready.filter.id, { groups: 1 });
    expect(narrow.total_targets).toBe(3);
    expect((await actionsOf(gw, account, narrow.id)).map((a) => a.thing_id).sort()).toEqual(some(1, 2, 3));
    // without revoked:false the revoked things are targets too, skipped from the start
    const wide = await createRollout(gw, account, (await preview({})).filter.id, { groups: 1 });
    expect(wide.total_targets).toBe(6);
    expect(await byStatus(wide.id, 'skipped')).toEqual(some(0, 5));
    expect(await byStatus(wide.id, 'scheduled')).toEqual(some(1, 2, 3, 4));
  }, 60_000);

  it('refuse values that are not booleans with a 400 naming the member', async () => {
    for (const query of [{ revoked: 'no' }, { connected: 1 }, { connected: 'true' }]) {
      const res = await gw.http.post('/api/v1/ota/target-filters', { name: `bad ${Object.keys(query)[0]}`, query }, { token: account.operator });
      const problem = expectProblem(res, 400);
      expect(problem.detail).toContain(Object.keys(query)[0]);
    }
  });
});
