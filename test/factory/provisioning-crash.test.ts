import crypto from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { waitFor } from '../helpers/wait.js';
import { CrashRig, exited } from '../helpers/crashRig.js';
import { TestFactoryBackend } from './backend.js';

/**
 * The PROVISION saga survives a crash between two legs: the gateway runs as a real child process
 * (test/helpers/faultyGateway.ts) that exits right after the identify leg's result commits, before
 * the provision leg is queued; a restarted process picks the run up (start-up sweep) and finishes it.
 */
let rig: CrashRig;
let backend: TestFactoryBackend;

beforeAll(async () => {
  backend = await TestFactoryBackend.start();
  rig = await CrashRig.create('saga-crash', { ALLOW_PRIVATE_TARGETS: 'true', OUTBOUND_CA_FILE: backend.caFile, PROVISION_LEG_RETRY_SECONDS: '1' });
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

    // process 2: no fault; the start-up sweep queues the provision leg and the saga finishes
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
});
