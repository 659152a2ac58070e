import crypto from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { waitFor } from '../helpers/wait.js';
import { CrashRig, exited } from '../helpers/crashRig.js';
import { TestFactoryBackend } from './backend.js';

/**
 * The PROVISION saga survives crashes: the gateway runs as a real child process
 * (test/helpers/faultyGateway.ts) that exits right after a step commits. Between two legs (the
 * identify leg's result committed with the provision leg's job): a restarted process runs that
 * job. After the thing moved but before the run finished: the END job finishes it. After the thing
 * was PROVISIONED but before its run committed: the UNDO_START job puts the thing back to ROLLEDOFF.
 */
let rig: CrashRig;
let backend: TestFactoryBackend;

beforeAll(async () => {
  backend = await TestFactoryBackend.start();
  // a leg timeout of 3 s: the jobs that finish what a crashed request began wait that long
  rig = await CrashRig.create('saga-crash', { ALLOW_PRIVATE_TARGETS: 'true', OUTBOUND_CA_FILE: backend.caFile, PROVISION_LEG_RETRY_SECONDS: '1', PROVISION_LEG_TIMEOUT_SECONDS: '3' });
});
afterAll(async () => {
  await rig?.close();
  await backend?.close();
});

describe('PROVISION saga durability', () => {
  it('a gateway killed between the legs is restarted and finishes the saga; the run shows each leg', async () => {
    // process 1: crash right after the first saga step commits (the identify leg's SUCCEEDED)
    const p = await rig.start('provision.step-committed');
    const { http, db } = rig;
    const platform = await rig.token('platform', 'saga-crash', ['platform-admin']);
    const accountId = crypto.randomUUID();
    expect((await http.post('/platform/v1/accounts', { id: accountId, name: 'saga crash' }, { token: platform })).status).toBe(201);
    const admin = await rig.token(`acc-${accountId}`, 'boss', ['admin']);
    const model = await http.post('/api/v1/models', { vid: 'FFF5', pid: '0001', name: 'crash model', provisioning_method: 'none' }, { token: admin });
    expect(model.status).toBe(201);
    for (const role of ['identify', 'provision']) {
      const s = await http.post('/api/v1/factory-services', { role, model_id: model.body.id, endpoint_url: backend.url }, { token: admin });
      expect(s.status).toBe(201);
      backend.services.set(s.body.access_key_id, { accessKeyId: s.body.access_key_id, secretAccessKey: s.body.secret_access_key });
    }
    const enrolled = await http.post('/api/v1/enrollments', { model: model.body.descriptor, serial: 'CRASH-1' }, { token: admin });
    expect(enrolled.status).toBe(201);
    const thingId = enrolled.body.thing_id;
    const started = await http.post(`/api/v1/things/${thingId}/provision`, undefined, { token: admin });
    expect(started.status).toBe(202);
    const runId = started.body.id;

    // the backend's identify report commits, then the process dies before answering it
    expect(await exited(p)).toBe(86);
    expect(rig.current!.output()).toContain('FAULT_INJECT=provision.step-committed');
    expect(backend.callsOf('identify', runId)).toHaveLength(1);
    expect(backend.callsOf('provision', runId)).toHaveLength(0);
    const [mid] = await db.sql`select state, snapshot -> 'context' -> 'legs' as legs from actors where type = 'provisioningRun' and id = ${runId}`;
    expect(mid.state).toBe('RUNNING');
    expect(mid.legs.map((l: any) => l.state)).toEqual(['SUCCEEDED', 'PENDING']);

    // process 2: no fault; the provision leg's job, queued with the identify result, runs and the saga finishes
    await rig.start();
    const done = await waitFor(async () => {
      const r = await http.get(`/api/v1/provisioning-runs/${runId}`, { token: admin });
      return r.body.state !== 'RUNNING' ? r.body : undefined;
    }, 30_000, 'saga resumed', 200);
    expect(done.state).toBe('SUCCEEDED');
    expect(done.legs.map((l: any) => [l.name, l.state, l.attempts])).toEqual([['identify', 'SUCCEEDED', 1], ['provision', 'SUCCEEDED', 1]]);
    for (const leg of done.legs) expect(leg.started_at && leg.finished_at).toBeTruthy();
    expect(backend.callsOf('provision', runId)).toHaveLength(1);
    expect((await http.get(`/api/v1/things/${thingId}/state`, { token: admin })).body.state).toBe('IN_FACTORY');
  });

  it('a crash after the thing moved, or before the run of a moved thing committed, is finished by the saga\'s job', async () => {
    const { http } = rig;
    const platform = await rig.token('platform', 'saga-crash', ['platform-admin']);
    const accountId = crypto.randomUUID();
    expect((await http.post('/platform/v1/accounts', { id: accountId, name: 'saga crash 2' }, { token: platform })).status).toBe(201);
    const admin = await rig.token(`acc-${accountId}`, 'boss', ['admin']);
    const model = await http.post('/api/v1/models', { vid: 'FFF5', pid: '0002', name: 'crash model 2', provisioning_method: 'none' }, { token: admin });
    expect(model.status).toBe(201);
    const s = await http.post('/api/v1/factory-services', { role: 'provision', model_id: model.body.id, endpoint_url: backend.url }, { token: admin });
    backend.services.set(s.body.access_key_id, { accessKeyId: s.body.access_key_id, secretAccessKey: s.body.secret_access_key });
    const enroll = async (serial: string) => (await http.post('/api/v1/enrollments', { model: model.body.descriptor, serial }, { token: admin })).body.thing_id as string;
    const state = async (thingId: string) => (await http.get(`/api/v1/things/${thingId}/state`, { token: admin })).body.state;
    const log = async (thingId: string) => (await rig.db.sql`select event from thing_state_changes where thing_id = ${thingId} order by seq`).map((r) => r.event);

    // the provision leg succeeds, the thing goes IN_FACTORY, and the process dies before the run finishes
    await rig.stop();
    const moved = await rig.start('provision.thing-moved');
    const t1 = await enroll('CRASH-2');
    const run1 = (await http.post(`/api/v1/things/${t1}/provision`, undefined, { token: admin })).body.id;
    expect(await exited(moved)).toBe(86);
    const [mid] = await rig.db.sql`select state from provisioning_runs where id = ${run1}`;
    expect(mid.state).toBe('RUNNING');

    // the next process dies right after a start moved its thing (PROVISIONED), before the run committed
    const provisioned = await rig.start('provision.thing-provisioned');
    const t2 = await enroll('CRASH-3');
    expect((await http.post(`/api/v1/things/${t2}/provision`, undefined, { token: admin }).catch(() => ({ status: 0 }))).status).not.toBe(202);
    expect(await exited(provisioned)).toBe(86);
    expect(await log(t2)).toEqual(['ENROLL', 'PROVISION']);
    expect(await rig.db.sql`select 1 from provisioning_runs where thing_id = ${t2}`).toHaveLength(0);

    // a healthy process: the END job finishes the first run (the thing moved once), the UNDO_START job puts the second thing back
    await rig.start();
    const done = await waitFor(async () => {
      const r = await http.get(`/api/v1/provisioning-runs/${run1}`, { token: admin });
      return r.body.state !== 'RUNNING' ? r.body : undefined;
    }, 30_000, 'run finished by its END job', 200);
    expect(done).toMatchObject({ state: 'SUCCEEDED', error: null });
    expect(done.finished_at).toBeTruthy();
    expect(await state(t1)).toBe('IN_FACTORY');
    expect(await log(t1)).toEqual(['ENROLL', 'PROVISION', 'FACTORY_DONE']);
    await waitFor(async () => (await state(t2)) === 'ROLLEDOFF' || undefined, 30_000, 'start undone', 200);
    expect(await log(t2)).toEqual(['ENROLL', 'PROVISION', 'PROVISION_FAILED']);
    // the factory starts again
    const again = await http.post(`/api/v1/things/${t2}/provision`, undefined, { token: admin });
    expect(again.status).toBe(202);
    await waitFor(async () => (await state(t2)) === 'IN_FACTORY' || undefined, 30_000, 'second start finished', 200);
  }, 150_000); // three gateway processes
});
