import crypto from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { MqttClient } from 'mqtt';
import { startTestGateway, expectProblem, type TestGateway } from '../helpers/gateway.js';
import { createAccount, type TestAccount } from '../helpers/accounts.js';
import { waitFor } from '../helpers/wait.js';
import type { EnrolledDevice } from '../helpers/devices.js';
import { OTA_SWEEP_JOB } from '../../src/ota/index.js';
import { actionsOf, control, createFilter, createRollout, enrollFleet, groupsOf, manualDevice, rolloutOf, simulatedDevice, SOFTWARE } from './helpers.js';

let gw: TestGateway;
let port: number;
let account: TestAccount;
let other: TestAccount;
const clients: MqttClient[] = [];

beforeAll(async () => {
  gw = await startTestGateway();
  port = gw.mqttPort!;
  account = await createAccount(gw, { capabilities: ['manage_ota_rollouts'] });
  other = await createAccount(gw, { capabilities: ['manage_ota_rollouts'] });
});
afterAll(async () => {
  await Promise.all(clients.map((c) => c.endAsync(true).catch(() => {})));
  await gw?.close();
});

const tag = (d: EnrolledDevice, t: string) => gw.http.put(`/api/v1/things/${d.thingId}/tags/${t}`, undefined, { token: account.operator });

describe('target filters', () => {
  it('create, read, list, edit, delete; a preview counts and pages the matched things; names are unique per account', async () => {
    const fleet = await enrollFleet(gw, account, 5, 'FLT-1');
    await enrollFleet(gw, account, 2, 'FLT-2');
    for (const d of fleet.slice(0, 3)) expect((await tag(d, 'beta')).status).toBe(200);
    const created = await gw.http.post('/api/v1/ota/target-filters', { name: 'beta ring', query: { model: 'FLT-1', tags: ['beta'], state: ['ROLLEDOFF'] } }, { token: account.operator });
    expect(created.status, created.text).toBe(201);
    const id = created.body.id;
    expect(created.body).toMatchObject({ name: 'beta ring', query: { model: 'FLT-1', tags: ['beta'], state: ['ROLLEDOFF'] } });
    expectProblem(await gw.http.post('/api/v1/ota/target-filters', { name: 'beta ring', query: {} }, { token: account.operator }), 409);

    const preview = await gw.http.get(`/api/v1/ota/target-filters/${id}/preview?limit=2`, { token: account.operator });
    expect(preview.status, preview.text).toBe(200);
    expect(preview.body.count).toBe(3);
    expect(preview.body.items).toHaveLength(2);
    expect(preview.body.items[0]).toMatchObject({ model: 'FLT-1', state: 'ROLLEDOFF', tags: ['beta'], connected: false });
    const rest = await gw.http.get(`/api/v1/ota/target-filters/${id}/preview?limit=2&cursor=${preview.body.next_cursor}`, { token: account.operator });
    expect(rest.body).toMatchObject({ count: 3, next_cursor: null });
    const seen = [...preview.body.items, ...rest.body.items].map((t: { id: string }) => t.id).sort();
    expect(seen).toEqual(fleet.slice(0, 3).map((d) => d.thingId).sort());

    const edited = await gw.http.put(`/api/v1/ota/target-filters/${id}`, { name: 'all FLT-1', query: { model: 'FLT-1' } }, { token: account.admin });
    expect(edited.status).toBe(200);
    expect((await gw.http.get(`/api/v1/ota/target-filters/${id}/preview`, { token: account.operator })).body.count).toBe(5);
    expect((await gw.http.get(`/api/v1/ota/target-filters/${id}`, { token: account.viewer })).body).toMatchObject({ name: 'all FLT-1', query: { model: 'FLT-1' } });
    const listed = await gw.http.get('/api/v1/ota/target-filters', { token: account.viewer });
    expect(listed.body.items.map((f: { id: string }) => f.id)).toContain(id);

    // another account's filter is not found, whatever the verb
    for (const res of [
      await gw.http.get(`/api/v1/ota/target-filters/${id}`, { token: other.viewer }),
      await gw.http.get(`/api/v1/ota/target-filters/${id}/preview`, { token: other.operator }),
      await gw.http.put(`/api/v1/ota/target-filters/${id}`, { name: 'x', query: {} }, { token: other.operator }),
      await gw.http.delete(`/api/v1/ota/target-filters/${id}`, { token: other.operator }),
    ]) expectProblem(res, 404);
    expect((await gw.http.get('/api/v1/ota/target-filters', { token: other.viewer })).body.items).toEqual([]);

    expect((await gw.http.delete(`/api/v1/ota/target-filters/${id}`, { token: account.operator })).status).toBe(204);
    expectProblem(await gw.http.get(`/api/v1/ota/target-filters/${id}`, { token: account.viewer }), 404);
  });

  it('refuses bad queries with 400 and a clear detail', async () => {
    const bad = async (query: unknown) => expectProblem(await gw.http.post('/api/v1/ota/target-filters', { name: 'bad', query }, { token: account.operator }), 400).detail;
    expect(await bad({ state: ['FLYING'] })).toMatch(/state/);
    expect(await bad({ tags: ['has space'] })).toMatch(/tag/);
    expect(await bad({ last_seen_before: 'yesterday' })).toMatch(/last_seen_before/);
    expect(await bad({ colour: 'red' })).toMatch(/colour/);
    expect(await bad({ last_seen_before: '2026-02-30T00:00:00Z' })).toMatch(/last_seen_before/);
    expect(await bad({ model: '' })).toMatch(/model/);
  });
});

describe('rollouts', () => {
  it('refuses a filter that matches nothing, too many groups, percentages not adding up to 100', async () => {
    const none = await createFilter(gw, account, { model: 'NO-SUCH-MODEL' });
    const body = { name: 'r', filter_id: none.id, software: SOFTWARE, groups: 1, success_threshold: 100, error_threshold: 0 };
    expect(expectProblem(await gw.http.post('/api/v1/ota/rollouts', body, { token: account.operator }), 422).detail).toMatch(/matches no things/);
    await enrollFleet(gw, account, 2, 'GRP-1');
    const two = await createFilter(gw, account, { model: 'GRP-1' });
    expect(expectProblem(await gw.http.post('/api/v1/ota/rollouts', { ...body, filter_id: two.id, groups: 3 }, { token: account.operator }), 422).detail).toMatch(/cannot fill 3 groups/);
    expect(expectProblem(await gw.http.post('/api/v1/ota/rollouts', { ...body, filter_id: two.id, groups: [50, 40] }, { token: account.operator }), 422).detail).toMatch(/add up to 100/);
    expectProblem(await gw.http.post('/api/v1/ota/rollouts', { ...body, filter_id: two.id, software: { ...SOFTWARE, sha256: 'xyz' } }, { token: account.operator }), 400);
    expectProblem(await gw.http.post('/api/v1/ota/rollouts', { ...body, filter_id: crypto.randomUUID() }, { token: account.operator }), 404);
    const count = await gw.db.sql<{ n: number }[]>`select count(*)::int as n from ota_rollouts where account_id = ${account.id}`;
    expect(count[0].n).toBe(0);
  });

  it('runs group by group over MQTT: a device offline at start gets its action when it connects, and the rollout FINISHES', async () => {
    const fleet = await enrollFleet(gw, account, 4, 'RUN-1');
    const filter = await createFilter(gw, account, { model: 'RUN-1' });
    const rollout = await createRollout(gw, account, filter.id, { groups: 2, success: 100, error: 0 });
    expect(rollout).toMatchObject({ state: 'READY', total_targets: 4 });
    const actions = await actionsOf(gw, account, rollout.id);
    expect(actions.map((a) => a.status)).toEqual(['scheduled', 'scheduled', 'scheduled', 'scheduled']);
    const groupOf = new Map(actions.map((a) => [a.thing_id, a.group]));
    // group 0 connected; in group 1 one device connected, one offline
    const [offline, ...online] = [...fleet].sort((a, b) => groupOf.get(b.thingId)! - groupOf.get(a.thingId)!);
    const applied: string[] = [];
    for (const d of online) clients.push(await simulatedDevice(port, d, { fails: () => false, onApplied: (id) => applied.push(id) }));

    const started = await control(gw, account, rollout.id, 'start');
    expect(started.status, started.text).toBe(200);
    expect(started.body).toMatchObject({ state: 'RUNNING', current_group: 0 });
    await waitFor(async () => (await rolloutOf(gw, account, rollout.id)).current_group === 1, 20_000, 'second group started');
    expect((await groupsOf(gw, account, rollout.id)).map((g) => [g.state, g.total])).toEqual([['FINISHED', 2], ['RUNNING', 2]]);
    await waitFor(() => applied.length === 3, 20_000, 'online devices of group 1 applied');
    await waitFor(async () => (await actionsOf(gw, account, rollout.id, '&status=succeeded')).length === 3, 20_000, 'three succeeded');
    const waiting = (await actionsOf(gw, account, rollout.id)).find((a) => a.thing_id === offline.thingId)!;
    expect(waiting).toMatchObject({ status: 'pending', group: 1 });
    expect((await rolloutOf(gw, account, rollout.id)).state).toBe('RUNNING');

    // the offline device connects and subscribes: it gets its action then
    const late = await manualDevice(port, offline);
    clients.push(late.client);
    const [action] = await waitFor(() => (late.received.length ? late.received : undefined), 20_000, 'action on reconnect');
    expect(action).toMatchObject({ action_id: waiting.id, rollout_id: rollout.id, version: SOFTWARE.version, url: SOFTWARE.url, sha256: SOFTWARE.sha256, size: SOFTWARE.size, correlation: waiting.id });
    await late.report({ status: 'downloading', progress: 40 }, waiting.id);
    await waitFor(async () => (await actionsOf(gw, account, rollout.id, `&thing_id=${offline.thingId}`))[0].progress === 40, 20_000, 'progress recorded');
    await late.report({ action_id: waiting.id, status: 'succeeded' });
    await waitFor(async () => (await rolloutOf(gw, account, rollout.id)).state === 'FINISHED', 20_000, 'rollout finished');
    const done = await rolloutOf(gw, account, rollout.id);
    expect(done.actions).toMatchObject({ succeeded: 4, failed: 0, pending: 0 });
    expect(done.ended_at).not.toBeNull();
    expectProblem(await control(gw, account, rollout.id, 'pause'), 409);
  });

  it('pause holds the next group (a group done meanwhile is remembered), resume starts it, cancel cancels what no device took up', async () => {
    const fleet = await enrollFleet(gw, account, 4, 'CTL-1');
    const filter = await createFilter(gw, account, { model: 'CTL-1' });
    const rollout = await createRollout(gw, account, filter.id, { groups: [50, 50], success: 50, error: 50 });
    const devices = await Promise.all(fleet.map((d) => manualDevice(port, d)));
    clients.push(...devices.map((d) => d.client));
    const groupOf = new Map((await actionsOf(gw, account, rollout.id)).map((a) => [a.thing_id, a.group]));
    const inGroup = (g: number) => devices.filter((_, i) => groupOf.get(fleet[i].thingId) === g);
    expectProblem(await control(gw, account, rollout.id, 'pause'), 409);
    expect((await control(gw, account, rollout.id, 'start')).status).toBe(200);
    await waitFor(() => inGroup(0).every((d) => d.received.length === 1), 20_000, 'group 0 delivered');
    const paused = await control(gw, account, rollout.id, 'pause');
    expect(paused.body).toMatchObject({ state: 'PAUSED' });
    expectProblem(await control(gw, account, rollout.id, 'pause'), 409);
    expectProblem(await control(gw, account, rollout.id, 'start'), 409);

    // one device of group 0 succeeds: the group reaches 50 %, but the paused rollout starts no group
    const first = inGroup(0)[0];
    await first.report({ status: 'succeeded' }, first.received[0].action_id);
    await waitFor(async () => (await groupsOf(gw, account, rollout.id))[0].state === 'FINISHED', 20_000, 'group 0 finished');
    expect(await rolloutOf(gw, account, rollout.id)).toMatchObject({ state: 'PAUSED', current_group: 0 });
    expect((await groupsOf(gw, account, rollout.id))[1].state).toBe('SCHEDULED');
    expect(inGroup(1).map((d) => d.received.length)).toEqual([0, 0]);

    const resumed = await control(gw, account, rollout.id, 'resume');
    expect(resumed.body).toMatchObject({ state: 'RUNNING', current_group: 1 });
    await waitFor(() => inGroup(1).every((d) => d.received.length === 1), 20_000, 'group 1 delivered');
    // one device of group 1 starts installing; then the rollout is cancelled
    const installing = inGroup(1)[0];
    await installing.report({ status: 'installing' }, installing.received[0].action_id);
    await waitFor(async () => (await actionsOf(gw, account, rollout.id, '&status=installing')).length === 1, 20_000, 'installing recorded');
    const cancelled = await control(gw, account, rollout.id, 'cancel');
    expect(cancelled.body).toMatchObject({ state: 'CANCELLED' });
    expect(cancelled.body.actions).toMatchObject({ succeeded: 1, installing: 1, cancelled: 2, pending: 0 });
    expect((await groupsOf(gw, account, rollout.id)).map((g) => g.state)).toEqual(['FINISHED', 'CANCELLED']);
    for (const verb of ['start', 'pause', 'resume', 'cancel'] as const) expectProblem(await control(gw, account, rollout.id, verb), 409);
    // the device that was installing still reports its outcome; a cancelled action takes no report
    // (in this order: the gateway takes the idle device's report first)
    const idle = inGroup(1)[1];
    await idle.report({ status: 'succeeded' }, idle.received[0].action_id);
    await installing.report({ status: 'succeeded' }, installing.received[0].action_id);
    await waitFor(async () => (await rolloutOf(gw, account, rollout.id)).actions.succeeded === 2, 20_000, 'late outcome kept');
    expect((await rolloutOf(gw, account, rollout.id)).actions).toMatchObject({ succeeded: 2, cancelled: 2 });
  });

  it('concurrent controls: of five simultaneous starts exactly one is accepted, the others are 409', async () => {
    await enrollFleet(gw, account, 2, 'RACE-1');
    const filter = await createFilter(gw, account, { model: 'RACE-1' });
    const rollout = await createRollout(gw, account, filter.id, { groups: 2 });
    const answers = await Promise.all(Array.from({ length: 5 }, () => control(gw, account, rollout.id, 'start')));
    expect(answers.map((a) => a.status).sort()).toEqual([200, 409, 409, 409, 409]);
    const groups = await groupsOf(gw, account, rollout.id);
    expect(groups.map((g) => g.state)).toEqual(['RUNNING', 'SCHEDULED']);
    expect((await rolloutOf(gw, account, rollout.id)).actions).toMatchObject({ pending: 1, scheduled: 1 });
    // pause and cancel at once: both may win in either order, never a corrupt state
    const [p, c] = await Promise.all([control(gw, account, rollout.id, 'pause'), control(gw, account, rollout.id, 'cancel')]);
    expect(c.status).toBe(200);
    expect([200, 409]).toContain(p.status);
    expect(await rolloutOf(gw, account, rollout.id)).toMatchObject({ state: 'CANCELLED', actions: { cancelled: 2, pending: 0, scheduled: 0 } });
  });

  it('advancement is durable: outcomes whose evaluation was lost (a crash) are tallied by the sweep job, which starts the next group', async () => {
    const fleet = await enrollFleet(gw, account, 2, 'SWEEP-1');
    const filter = await createFilter(gw, account, { model: 'SWEEP-1' });
    const rollout = await createRollout(gw, account, filter.id, { groups: 2, success: 100, error: 0 });
    await control(gw, account, rollout.id, 'start');
    // the first group's device succeeded, but the node died before evaluating (the row written, no TALLY)
    await gw.db.sql`update ota_actions set status = 'succeeded' where rollout_id = ${rollout.id} and status = 'pending'`;
    expect((await groupsOf(gw, account, rollout.id))[0].state).toBe('RUNNING');
    await gw.gw.jobs.send(OTA_SWEEP_JOB, {});
    await waitFor(async () => (await rolloutOf(gw, account, rollout.id)).current_group === 1, 20_000, 'second group started by the sweep');
    expect((await groupsOf(gw, account, rollout.id)).map((g) => [g.state, g.succeeded])).toEqual([['FINISHED', 1], ['RUNNING', 0]]);
    // its device, connected now, gets the action on subscribe
    const pending = (await actionsOf(gw, account, rollout.id, '&status=pending'))[0];
    const device = await manualDevice(port, fleet.find((d) => d.thingId === pending.thing_id)!);
    clients.push(device.client);
    await waitFor(() => device.received.length === 1, 20_000, 'action on subscribe');
    expect(device.received[0].action_id).toBe(pending.id);
  });

  it("a device's bad reports are counted and dropped alone; a device cannot report on another's action; other accounts see 404", async () => {
    const fleet = await enrollFleet(gw, account, 2, 'BAD-1');
    const filter = await createFilter(gw, account, { model: 'BAD-1' });
    const rollout = await createRollout(gw, account, filter.id, { groups: 1, success: 100, error: 100 });
    const [a, b] = await Promise.all(fleet.map((d) => manualDevice(port, d)));
    clients.push(a.client, b.client);
    await control(gw, account, rollout.id, 'start');
    await waitFor(() => a.received.length && b.received.length, 20_000, 'delivered');
    const rejectedBefore = await rejected();
    // not JSON: the broker refuses it alone (MQTT 5 PUBACK 0x99), the connection stays
    await expect(a.client.publishAsync(`devices/${fleet[0].thingId}/ota/status`, 'not json', { qos: 1 })).rejects.toThrow(/Payload format invalid/);
    await a.report({ status: 'exploded' }, a.received[0].action_id);
    await a.report({ status: 'succeeded' }); // no action id anywhere
    await a.report({ status: 'succeeded' }, b.received[0].action_id); // b's action, from a
    await b.report({ status: 'succeeded' }, b.received[0].action_id);
    await waitFor(async () => (await actionsOf(gw, account, rollout.id, '&status=succeeded')).length === 1, 20_000, "b's report applied");
    const all = await actionsOf(gw, account, rollout.id);
    expect(all.find((x) => x.thing_id === fleet[0].thingId)!.status).toBe('pending');
    expect(all.find((x) => x.thing_id === fleet[1].thingId)!.status).toBe('succeeded');
    // the unknown status, the missing action id and the other device's action: the first two counted as rejected
    expect(await rejected()).toBe(rejectedBefore + 2);
    expect((await gw.http.get('/metrics')).text).toMatch(/broker_payloads_rejected_total\{reason="not_json"\} [1-9]/);

    for (const res of [
      await gw.http.get(`/api/v1/ota/rollouts/${rollout.id}`, { token: other.viewer }),
      await gw.http.get(`/api/v1/ota/rollouts/${rollout.id}/groups`, { token: other.viewer }),
      await gw.http.get(`/api/v1/ota/rollouts/${rollout.id}/actions`, { token: other.viewer }),
      await control(gw, other, rollout.id, 'pause'),
      await control(gw, other, rollout.id, 'cancel'),
    ]) expectProblem(res, 404);
    expect((await rolloutOf(gw, account, rollout.id)).state).toBe('RUNNING');
    expect((await gw.http.get('/api/v1/ota/rollouts', { token: other.viewer })).body.items).toEqual([]);
  });
});

async function rejected(): Promise<number> {
  const text = (await gw.http.get('/metrics')).text;
  const m = /ota_status_reports_total\{result="rejected"\} (\d+)/.exec(text);
  return m ? Number(m[1]) : 0;
}
