import crypto from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { signedFetch, type Credentials } from '../../src/clients/svcSigner.js';
import { FactoryBackends, BackendCallError } from '../../src/factory/backend.js';
import { startTestGateway, expectProblem, type TestGateway } from '../helpers/gateway.js';
import { createAccount, type TestAccount } from '../helpers/accounts.js';
import { waitFor } from '../helpers/wait.js';
import { TestFactoryBackend } from './backend.js';

/**
 * The PROVISION saga over real HTTP, Postgres and pg-boss, with the factory backend a real HTTPS
 * server inside the test (trusted through OUTBOUND_CA_FILE): legs in order, a failed call
 * retried with backoff, a reported failure, a silent backend timed out, the statuses of the
 * provision and provisioning-result routes, and the provisioning runs that record it all.
 */
let gw: TestGateway;
let backend: TestFactoryBackend;
let a: TestAccount;
let b: TestAccount;
let pid = 0x3000;

beforeAll(async () => {
  backend = await TestFactoryBackend.start();
  gw = await startTestGateway({
    ALLOW_PRIVATE_TARGETS: 'true', OUTBOUND_CA_FILE: backend.caFile,
    PROVISION_LEG_ATTEMPTS: '2', PROVISION_LEG_RETRY_SECONDS: '1', PROVISION_LEG_TIMEOUT_SECONDS: '2',
  });
  [a, b] = await Promise.all([createAccount(gw), createAccount(gw)]);
});
afterAll(async () => {
  await gw?.close();
  await backend?.close();
});

interface Model { id: string; descriptor: string; services: Partial<Record<'identify' | 'provision', { id: string; creds: Credentials }>> }

/** A model of the account with factory services of the given roles, served by the test backend. */
async function model(account: TestAccount, roles: ('identify' | 'provision')[]): Promise<Model> {
  const created = await gw.http.post('/api/v1/models', { vid: 'FFF4', pid: (pid++).toString(16).toUpperCase(), name: 'saga model', provisioning_method: 'none' }, { token: account.admin });
  expect(created.status, created.text).toBe(201);
  const m: Model = { id: created.body.id, descriptor: created.body.descriptor, services: {} };
  for (const role of roles) {
    const res = await gw.http.post('/api/v1/factory-services', { role, model_id: m.id, endpoint_url: backend.url }, { token: account.admin });
    expect(res.status, res.text).toBe(201);
    const creds = { accessKeyId: res.body.access_key_id, secretAccessKey: res.body.secret_access_key };
    backend.services.set(creds.accessKeyId, creds);
    m.services[role] = { id: res.body.id, creds };
  }
  return m;
}

/** A thing of the model in ROLLEDOFF, through the factory enrollment route. */
async function thing(account: TestAccount, m: Model): Promise<string> {
  const res = await gw.http.post('/api/v1/enrollments', { model: m.descriptor, serial: `SN-${crypto.randomUUID()}` }, { token: account.admin });
  expect(res.status, res.text).toBe(201);
  return res.body.thing_id;
}

const provision = (account: TestAccount, thingId: string, body?: unknown) => gw.http.post(`/api/v1/things/${thingId}/provision`, body, { token: account.operator });
const run = async (account: TestAccount, id: string) => (await gw.http.get(`/api/v1/provisioning-runs/${id}`, { token: account.viewer })).body;
const finished = (account: TestAccount, id: string, timeoutMs = 20_000) =>
  waitFor(async () => { const r = await run(account, id); return r.state !== 'RUNNING' ? r : undefined; }, timeoutMs, `run ${id} finished`, 100);
const state = async (account: TestAccount, thingId: string) => (await gw.http.get(`/api/v1/things/${thingId}/state`, { token: account.viewer })).body.state;

describe('the PROVISION saga', () => {
  it('runs identify then provision against the backend and ends IN_FACTORY; the run records each leg', async () => {
    const m = await model(a, ['identify', 'provision']);
    const t = await thing(a, m);
    const started = await provision(a, t);
    expect(started.status, started.text).toBe(202);
    expect(started.headers.get('location')).toBe(`/api/v1/provisioning-runs/${started.body.id}`);
    expect(started.body).toMatchObject({ thing_id: t, model_id: m.id, state: 'RUNNING' });
    expect(started.body.legs.map((l: any) => [l.name, l.factory_service_id])).toEqual([['identify', m.services.identify!.id], ['provision', m.services.provision!.id]]);
    expect(await state(a, t)).toBe('PROVISIONED');

    const done = await finished(a, started.body.id);
    expect(done.state).toBe('SUCCEEDED');
    expect(done.legs.map((l: any) => [l.name, l.state, l.attempts])).toEqual([['identify', 'SUCCEEDED', 1], ['provision', 'SUCCEEDED', 1]]);
    for (const leg of done.legs) {
      expect(Date.parse(leg.started_at)).toBeLessThanOrEqual(Date.parse(leg.finished_at));
      expect(leg.history).toEqual([expect.objectContaining({ attempt: 1, outcome: 'SUCCEEDED', error: null })]);
    }
    // legs in order: identify finished before provision was called
    expect(Date.parse(done.legs[0].finished_at)).toBeLessThanOrEqual(Date.parse(done.legs[1].started_at));
    const calls = backend.calls.filter((c) => c.run_id === done.id);
    expect(calls.map((c) => [c.leg, c.attempt, c.signatureValid])).toEqual([['identify', 1, true], ['provision', 1, true]]);
    expect(calls[0].body).toMatchObject({ thing_id: t, model_id: m.id, model: m.descriptor, result_url: `${gw.httpUrl}/api/v1/things/${t}/provisioning-result` });
    expect(await state(a, t)).toBe('IN_FACTORY');
    // the state-change log holds the saga's two transitions; no leg holds a service any more
    const log = await gw.db.sql`select from_state, to_state, event from thing_state_changes where thing_id = ${t} order by seq`;
    expect(log.map((r) => `${r.from_state}>${r.to_state}:${r.event}`)).toEqual(['REGISTERED>ROLLEDOFF:ENROLL', 'ROLLEDOFF>PROVISIONED:PROVISION', 'PROVISIONED>IN_FACTORY:FACTORY_DONE']);
    expect((await gw.db.sql`select count(*)::int as n from factory_service_leg_refs`)[0].n).toBe(0);
    // one job kind carried the saga, one job per step (a step queued twice is one job); the start's undo was cancelled with the run's commit
    const jobs = await gw.db.sql`select name, singleton_key, state from pgboss.job where data ->> 'runId' = ${done.id}`;
    expect(new Set(jobs.map((j) => j.name))).toEqual(new Set(['factory.provision-leg']));
    expect(jobs.map((j) => j.singleton_key.slice(done.id.length + 1)).sort()).toEqual(['DISPATCH:identify:1', 'DISPATCH:provision:1', 'END', 'TIMEOUT:identify:1', 'TIMEOUT:provision:1', 'UNDO_START']);
    expect(jobs.find((j) => j.singleton_key.endsWith(':UNDO_START'))!.state).toBe('cancelled');
    // the reported leg cannot be reported again: 409
    const again = await signedFetch(`${gw.httpUrl}/api/v1/things/${t}/provisioning-result`, m.services.provision!.creds, { method: 'POST', body: { run_id: done.id, leg: 'provision', outcome: 'SUCCEEDED' } });
    expect(again.status).toBe(409);
    expect((await again.json() as any).detail).toMatch(/is SUCCEEDED: its legs are finished/);
  });

  it('retries a leg whose call failed (500), with backoff, and then succeeds', async () => {
    const m = await model(a, ['provision']);
    const t = await thing(a, m);
    let failures = 0;
    backend.behave = (call) => (call.thing_id === t && failures++ < 1 ? { status: 500 } : { status: 202, report: { outcome: 'SUCCEEDED', result: { station: 7 } } });
    try {
      const started = await provision(a, t);
      expect(started.status).toBe(202);
      expect(started.body.legs.map((l: any) => l.name)).toEqual(['provision']);
      const done = await finished(a, started.body.id);
      expect(done.state).toBe('SUCCEEDED');
      const [leg] = done.legs;
      expect(leg).toMatchObject({ state: 'SUCCEEDED', attempts: 2, result: { station: 7 } });
      expect(leg.history.map((h: any) => [h.attempt, h.outcome])).toEqual([[1, 'FAILED'], [2, 'SUCCEEDED']]);
      expect(leg.history[0].error).toMatch(/answered 500/);
      // the retry waited its backoff (PROVISION_LEG_RETRY_SECONDS=1)
      expect(Date.parse(leg.history[1].dispatched_at) - Date.parse(leg.history[0].ended_at)).toBeGreaterThanOrEqual(900);
      expect(backend.callsOf('provision', done.id).map((c) => c.attempt)).toEqual([1, 2]);
      expect(await state(a, t)).toBe('IN_FACTORY');
    } finally {
      backend.behave = () => ({ status: 202, report: { outcome: 'SUCCEEDED' } });
    }
  });

  it('a leg reported FAILED (not retryable) fails the run and returns the thing to ROLLEDOFF; a new run can start', async () => {
    const m = await model(a, ['identify', 'provision']);
    const t = await thing(a, m);
    backend.behave = (call) => (call.thing_id === t && call.leg === 'identify' ? { status: 202, report: { outcome: 'FAILED', detail: 'station 4 could not read the chip', retryable: false } } : { status: 202, report: { outcome: 'SUCCEEDED' } });
    try {
      const first = (await provision(a, t)).body;
      const failed = await finished(a, first.id);
      expect(failed).toMatchObject({ state: 'FAILED', error: 'leg identify failed: station 4 could not read the chip' });
      expect(failed.legs.map((l: any) => [l.name, l.state, l.attempts])).toEqual([['identify', 'FAILED', 1], ['provision', 'PENDING', 0]]);
      expect(backend.callsOf('provision', first.id)).toHaveLength(0);
      expect(await state(a, t)).toBe('ROLLEDOFF');
      backend.behave = () => ({ status: 202, report: { outcome: 'SUCCEEDED' } });
      const second = await provision(a, t);
      expect(second.status).toBe(202);
      expect((await finished(a, second.body.id)).state).toBe('SUCCEEDED');
      const runs = await gw.http.get(`/api/v1/provisioning-runs?thing_id=${t}`, { token: a.viewer });
      expect(runs.body.items.map((r: any) => r.state).sort()).toEqual(['FAILED', 'SUCCEEDED']);
    } finally {
      backend.behave = () => ({ status: 202, report: { outcome: 'SUCCEEDED' } });
    }
  });

  it('a backend that accepts but never reports is timed out attempt by attempt until the run fails', async () => {
    const m = await model(a, ['provision']);
    const t = await thing(a, m);
    backend.behave = (call) => (call.thing_id === t ? { status: 202 } : { status: 202, report: { outcome: 'SUCCEEDED' } });
    try {
      const started = (await provision(a, t)).body;
      const done = await finished(a, started.id, 40_000);
      expect(done.state).toBe('FAILED');
      expect(done.legs[0].history.map((h: any) => h.outcome)).toEqual(['TIMED_OUT', 'TIMED_OUT']);
      expect(done.error).toMatch(/no provisioning-result within the leg timeout/);
      expect(await state(a, t)).toBe('ROLLEDOFF');
    } finally {
      backend.behave = () => ({ status: 202, report: { outcome: 'SUCCEEDED' } });
    }
  });
});

describe('a thing revoked during the saga', () => {
  it('aborts the run at its next leg (trust says the thing may not go on)', async () => {
    const m = await model(a, ['identify', 'provision']);
    const t = await thing(a, m);
    backend.behave = (call) => (call.thing_id === t ? { status: 202 } : { status: 202, report: { outcome: 'SUCCEEDED' } });
    try {
      const started = (await provision(a, t)).body;
      await waitFor(async () => (await run(a, started.id)).legs[0].state === 'RUNNING' || undefined, 10_000, 'identify running');
      expect((await gw.http.delete(`/api/v1/things/${t}`, { token: a.operator })).status).toBeLessThan(300);
      const reported = await gw.http.post(`/api/v1/things/${t}/provisioning-result`, { leg: 'identify', outcome: 'SUCCEEDED' }, { token: a.admin });
      expect(reported.status, reported.text).toBe(200);
      const done = await finished(a, started.id);
      expect(done).toMatchObject({ state: 'FAILED', error: `thing ${t} was revoked` });
      expect(done.legs.map((l: any) => [l.name, l.state])).toEqual([['identify', 'SUCCEEDED'], ['provision', 'FAILED']]);
      expect(backend.callsOf('provision', started.id)).toHaveLength(0);
      // the failed run gives the thing back (the thing machine accepts PROVISION_FAILED of a revoked thing)
      expect(await state(a, t)).toBe('ROLLEDOFF');
      expect((await gw.db.sql`select count(*)::int as n from factory_service_leg_refs where leg_id like ${`${started.id}:%`}`)[0].n).toBe(0);
    } finally {
      backend.behave = () => ({ status: 202, report: { outcome: 'SUCCEEDED' } });
    }
  });
});

describe('POST /api/v1/things/{id}/provision statuses', () => {
  it('404 for an unknown thing and for another account\'s; 400 for a body with fields', async () => {
    const m = await model(a, ['provision']);
    const t = await thing(a, m);
    expectProblem(await provision(a, crypto.randomUUID()), 404);
    expectProblem(await provision(b, t), 404);
    expectProblem(await provision(a, 'not-a-uuid'), 400);
    expect(expectProblem(await provision(a, t, { leg: 'identify' }), 400).detail).toMatch(/leg/);
    expect(await state(a, t)).toBe('ROLLEDOFF');
  });

  it('409 naming the state when the thing is not ROLLEDOFF, and when the model has no provision-role service', async () => {
    const m = await model(a, ['provision']);
    const t = await thing(a, m);
    backend.behave = (call) => (call.thing_id === t ? { status: 202 } : { status: 202, report: { outcome: 'SUCCEEDED' } });
    try {
      // two at once: one run starts, the other is refused
      const both = await Promise.all([provision(a, t), provision(a, t)]);
      expect(both.map((r) => r.status).sort()).toEqual([202, 409]);
      expect(expectProblem(both.find((r) => r.status === 409)!, 409).detail).toMatch(/is PROVISIONED: PROVISION is not accepted/);
      expect((await gw.db.sql`select count(*)::int as n from provisioning_runs where thing_id = ${t}`)[0].n).toBe(1);
    } finally {
      backend.behave = () => ({ status: 202, report: { outcome: 'SUCCEEDED' } });
    }
    const bare = await model(a, []);
    const t2 = await thing(a, bare);
    expect(expectProblem(await provision(a, t2), 409).detail).toMatch(/no active provision-role factory service/);
    expect(await state(a, t2)).toBe('ROLLEDOFF');
  });

  it('a factory service provisions things of its own model only (signed); viewers cannot', async () => {
    const m = await model(a, ['provision']);
    const other = await model(a, ['provision']);
    const mine = await thing(a, m);
    const theirs = await thing(a, other);
    const creds = m.services.provision!.creds;
    expect((await signedFetch(`${gw.httpUrl}/api/v1/things/${theirs}/provision`, creds, { method: 'POST' })).status).toBe(404);
    const ok = await signedFetch(`${gw.httpUrl}/api/v1/things/${mine}/provision`, creds, { method: 'POST' });
    expect(ok.status).toBe(202);
    const body = await ok.json() as any;
    expect(body.started_by).toBe(`factory-service:${m.services.provision!.id}`);
    expect((await finished(a, body.id)).state).toBe('SUCCEEDED');
    expectProblem(await gw.http.post(`/api/v1/things/${theirs}/provision`, undefined, { token: a.viewer }), 403);
  });
});

describe('POST /api/v1/things/{id}/provisioning-result statuses', () => {
  it('404 unknown thing, 404 no running saga, 403 another service\'s leg, 409 a leg not dispatched, 200 from an admin', async () => {
    const m = await model(a, ['identify', 'provision']);
    const other = await model(a, ['provision']);
    const t = await thing(a, m);
    const creds = m.services.provision!.creds;
    const report = (thingId: string, body: Record<string, unknown>, c = creds) =>
      signedFetch(`${gw.httpUrl}/api/v1/things/${thingId}/provisioning-result`, c, { method: 'POST', body });
    expect((await report(crypto.randomUUID(), { leg: 'provision', outcome: 'SUCCEEDED' })).status).toBe(404);
    const none = await report(t, { leg: 'provision', outcome: 'SUCCEEDED' });
    expect(none.status).toBe(404);
    expect((await none.json() as any).detail).toMatch(/has no running PROVISION saga/);
    expect((await report(t, { run_id: crypto.randomUUID(), leg: 'provision', outcome: 'SUCCEEDED' })).status).toBe(404);
    expect((await report(t, { leg: 'provision', outcome: 'DONE' })).status).toBe(400);

    backend.behave = (call) => (call.thing_id === t ? { status: 202 } : { status: 202, report: { outcome: 'SUCCEEDED' } });
    try {
      const started = (await provision(a, t)).body;
      await waitFor(() => backend.callsOf('identify', started.id).length === 1 || undefined, 10_000, 'identify dispatched');
      await waitFor(async () => (await run(a, started.id)).legs[0].state === 'RUNNING' || undefined, 10_000, 'identify running');
      // the provision leg is not dispatched yet
      const early = await report(t, { run_id: started.id, leg: 'provision', outcome: 'SUCCEEDED' });
      expect(early.status).toBe(409);
      expect((await early.json() as any).detail).toMatch(/not dispatched/);
      // the identify leg belongs to the identify service, not to the provision service
      const wrong = await report(t, { run_id: started.id, leg: 'identify', outcome: 'SUCCEEDED' });
      expect(wrong.status).toBe(403);
      // a service of another model does not see the thing at all
      expect((await report(t, { leg: 'identify', outcome: 'SUCCEEDED' }, other.services.provision!.creds)).status).toBe(404);
      // an older attempt's report is refused
      const stale = await report(t, { leg: 'identify', outcome: 'SUCCEEDED', attempt: 7 }, m.services.identify!.creds);
      expect(stale.status).toBe(409);
      // an admin may report for the factory (bearer token)
      const byAdmin = await gw.http.post(`/api/v1/things/${t}/provisioning-result`, { leg: 'identify', outcome: 'SUCCEEDED' }, { token: a.admin });
      expect(byAdmin.status, byAdmin.text).toBe(200);
      expect(byAdmin.body.legs[0].state).toBe('SUCCEEDED');
      await waitFor(() => backend.callsOf('provision', started.id).length === 1 || undefined, 10_000, 'provision dispatched');
      await waitFor(async () => (await run(a, started.id)).legs[1].state === 'RUNNING' || undefined, 10_000, 'provision running');
      const last = await report(t, { run_id: started.id, leg: 'provision', outcome: 'SUCCEEDED', attempt: 1 });
      expect(last.status).toBe(200);
      expect((await last.json() as any).state).toBe('SUCCEEDED');
      // (a different body: the same signed request twice within a second would be a replay, 401)
      expect((await report(t, { run_id: started.id, leg: 'provision', outcome: 'SUCCEEDED', detail: 'once more' })).status).toBe(409);
      expect(await state(a, t)).toBe('IN_FACTORY');
    } finally {
      backend.behave = () => ({ status: 202, report: { outcome: 'SUCCEEDED' } });
    }
  });
});

describe('provisioning runs', () => {
  it('lists the account\'s runs in keyset pages (filters state, thing_id); another account\'s run is 404', async () => {
    const m = await model(b, ['provision']);
    const ids: string[] = [];
    for (let i = 0; i < 3; i++) {
      const t = await thing(b, m);
      const started = (await provision(b, t)).body;
      ids.push(started.id);
      await finished(b, started.id);
    }
    const seen: string[] = [];
    let cursor: string | null = null;
    do {
      const page: any = await gw.http.get(`/api/v1/provisioning-runs?limit=2${cursor ? `&after=${cursor}` : ''}`, { token: b.viewer });
      expect(page.status).toBe(200);
      seen.push(...page.body.items.map((r: any) => r.id));
      cursor = page.body.next_cursor;
    } while (cursor);
    expect(seen.sort()).toEqual([...ids].sort());
    expect((await gw.http.get('/api/v1/provisioning-runs?state=RUNNING', { token: b.viewer })).body.items).toEqual([]);
    expectProblem(await gw.http.get(`/api/v1/provisioning-runs/${ids[0]}`, { token: a.viewer }), 404);
    expectProblem(await gw.http.get('/api/v1/provisioning-runs?state=DONE', { token: b.viewer }), 400);
    // the provision service of the model reads its model's runs (signed)
    const signed = await signedFetch(`${gw.httpUrl}/api/v1/provisioning-runs/${ids[0]}`, m.services.provision!.creds);
    expect(signed.status).toBe(200);
  });
});

describe('outbound calls', () => {
  it('refuse loopback and private targets unless ALLOW_PRIVATE_TARGETS (permanent: no retry)', async () => {
    const strict = new FactoryBackends({ allowPrivateTargets: false });
    const err = await strict.dispatchLeg({ endpointUrl: 'http://127.0.0.1:9', creds: { accessKeyId: 'AKSV0123456789ABCDEF', secretAccessKey: 'x' }, body: {}, timeoutMs: 1000, at: new Date() }).catch((e) => e);
    expect(err).toBeInstanceOf(BackendCallError);
    expect(err.permanent).toBe(true);
    expect(err.message).toMatch(/loopback/);
  });
});
