import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestGateway, expectProblem, type TestGateway } from '../helpers/gateway.js';
import { createAccount, type TestAccount } from '../helpers/accounts.js';

/**
 * Models in full over real HTTP and Postgres: vendor namespaces, create/list/read/PATCH/DELETE,
 * share and import by deeplink, software bundles, internal models.
 */
let gw: TestGateway;
let a: TestAccount;
let b: TestAccount;
let platform: string;
let pid = 0x1000;
const nextPid = () => (pid++).toString(16).toUpperCase().padStart(4, '0');

beforeAll(async () => {
  gw = await startTestGateway();
  [a, b] = await Promise.all([createAccount(gw), createAccount(gw)]);
  platform = await gw.token({ realm: 'platform', sub: 'op-1', roles: ['platform-operator'] });
});
afterAll(async () => {
  await gw?.close();
});

async function model(account: TestAccount, extra: Record<string, unknown> = {}) {
  const res = await gw.http.post('/api/v1/models', { pid: nextPid(), name: 'm', provisioning_method: 'none', ...extra }, { token: account.admin });
  expect(res.status, res.text).toBe(201);
  return res.body;
}

describe('vendors', () => {
  it('GET is 404 before assignment; POST assigns (201) and fetches the same VID again (201); accounts differ', async () => {
    expectProblem(await gw.http.get('/api/v1/vendors', { token: a.viewer }), 404);
    const first = await gw.http.post('/api/v1/vendors', {}, { token: a.admin });
    expect(first.status, first.text).toBe(201);
    expect(first.body).toMatchObject({ account_id: a.id, vid: expect.stringMatching(/^[6-9][0-9A-F]{3}$/) });
    const again = await gw.http.post('/api/v1/vendors', undefined, { token: a.admin });
    expect(again.status).toBe(201);
    expect(again.body.vid).toBe(first.body.vid);
    expect((await gw.http.get('/api/v1/vendors', { token: a.viewer })).body.vid).toBe(first.body.vid);
    const other = await gw.http.post('/api/v1/vendors', {}, { token: b.admin });
    expect(other.body.vid).not.toBe(first.body.vid);
    expectProblem(await gw.http.post('/api/v1/vendors', { vid: 'FFF1' }, { token: a.admin }), 400);
    expectProblem(await gw.http.post('/api/v1/vendors', {}, { token: a.viewer }), 403);
  });

  it('concurrent assignments of one account converge on one VID', async () => {
    const c = await createAccount(gw);
    const all = await Promise.all(Array.from({ length: 6 }, () => gw.http.post('/api/v1/vendors', {}, { token: c.admin })));
    expect(all.map((r) => r.status)).toEqual(Array(6).fill(201));
    expect(new Set(all.map((r) => r.body.vid)).size).toBe(1);
  });
});

describe('models', () => {
  it('create inside the vendor namespace: vid defaults to the account VID; another vendor\'s VID is 409; duplicate descriptor 409', async () => {
    const vid = (await gw.http.get('/api/v1/vendors', { token: a.viewer })).body.vid;
    const m = await model(a);
    expect(m).toMatchObject({ vid, descriptor: `${vid}:${m.pid}`, owner_account_id: a.id, imported: false, description: '' });
    const dup = expectProblem(await gw.http.post('/api/v1/models', { vid, pid: m.pid, name: 'x', provisioning_method: 'none' }, { token: a.admin }), 409);
    expect(dup.detail).toContain('already exists');
    const foreign = expectProblem(await gw.http.post('/api/v1/models', { vid, pid: nextPid(), name: 'x', provisioning_method: 'none' }, { token: b.admin }), 409);
    expect(foreign.detail).toContain('another vendor');
    // an unassigned (test) VID stays usable
    expect((await gw.http.post('/api/v1/models', { vid: 'FFF1', pid: nextPid(), name: 'x', provisioning_method: 'none' }, { token: b.admin })).status).toBe(201);
    const noNs = await createAccount(gw);
    expect(expectProblem(await gw.http.post('/api/v1/models', { pid: nextPid(), name: 'x', provisioning_method: 'none' }, { token: noNs.admin }), 404).detail).toContain('/api/v1/vendors');
    expectProblem(await gw.http.post('/api/v1/models', { pid: 'XYZ', name: 'x', provisioning_method: 'none' }, { token: a.admin }), 400);
  });

  it('list: keyset pages, stable while models are inserted concurrently; read is 404 across accounts', async () => {
    const c = await createAccount(gw);
    await gw.http.post('/api/v1/vendors', {}, { token: c.admin });
    const made = [];
    for (let i = 0; i < 7; i++) made.push((await model(c)).id);
    const seen: string[] = [];
    let after: string | null = null;
    do {
      const res: any = await gw.http.get(`/api/v1/models?limit=3${after ? `&after=${after}` : ''}`, { token: c.viewer });
      expect(res.status).toBe(200);
      seen.push(...res.body.items.map((m: any) => m.id));
      // inserts between pages never duplicate or drop rows already listed
      await model(c);
      after = res.body.next_cursor;
    } while (after);
    expect(new Set(seen).size).toBe(seen.length);
    for (const id of made) expect(seen).toContain(id);
    expect([...seen].sort()).toEqual(seen);
    expectProblem(await gw.http.get(`/api/v1/models/${made[0]}`, { token: a.viewer }), 404);
    expect((await gw.http.get(`/api/v1/models/${made[0]}`, { token: c.viewer })).body.id).toBe(made[0]);
  });

  it('PATCH changes name, description, licenseApproval and bundles; 404 across accounts; 400 for fixed fields', async () => {
    const m = await model(a);
    const res = await gw.http.patch(`/api/v1/models/${m.id}`, { name: 'renamed', description: 'sensor', licenseApproval: 'manual' }, { token: a.operator });
    expect(res.status, res.text).toBe(200);
    expect(res.body).toMatchObject({ name: 'renamed', description: 'sensor', licenseApproval: 'manual' });
    expect((await gw.http.get(`/api/v1/models/${m.id}`, { token: a.viewer })).body.licenseApproval).toBe('manual');
    expectProblem(await gw.http.patch(`/api/v1/models/${m.id}`, { name: 'x' }, { token: b.admin }), 404);
    expectProblem(await gw.http.patch(`/api/v1/models/${m.id}`, { pid: '0001' }, { token: a.admin }), 400);
    expectProblem(await gw.http.patch(`/api/v1/models/${m.id}`, {}, { token: a.admin }), 400);
    expectProblem(await gw.http.patch(`/api/v1/models/${m.id}`, { name: 'x' }, { token: a.viewer }), 403);
  });

  it('software: bundles of the descriptor (set by PATCH); 404 across accounts', async () => {
    const m = await model(a);
    expect((await gw.http.get(`/api/v1/models/${m.id}/software`, { token: a.viewer })).body).toEqual({ model_id: m.id, descriptor: m.descriptor, bundles: [] });
    const bundles = [
      { kind: 'software', name: 'firmware', version: '1.2.0', url: 'https://cdn.example/fw-1.2.0.bin', sha256: 'a'.repeat(64) },
      { kind: 'driver', name: 'usb', version: '3', url: 'https://cdn.example/usb-3.zip' },
    ];
    expect((await gw.http.patch(`/api/v1/models/${m.id}`, { bundles }, { token: a.admin })).status).toBe(200);
    expect((await gw.http.get(`/api/v1/models/${m.id}/software`, { token: a.viewer })).body.bundles).toEqual(bundles);
    expectProblem(await gw.http.patch(`/api/v1/models/${m.id}`, { bundles: [{ ...bundles[0], url: 'http://cdn.example/x' }] }, { token: a.admin }), 400);
    expectProblem(await gw.http.get(`/api/v1/models/${m.id}/software`, { token: b.viewer }), 404);
  });

  it('DELETE: 204 then 404; 409 while a thing uses it (the rule: things, factory services, provisioning runs, registrars)', async () => {
    const free = await model(a);
    expectProblem(await gw.http.delete(`/api/v1/models/${free.id}`, { token: b.admin }), 404);
    expectProblem(await gw.http.delete(`/api/v1/models/${free.id}`, { token: a.operator }), 403);
    expect((await gw.http.delete(`/api/v1/models/${free.id}`, { token: a.admin })).status).toBe(204);
    expectProblem(await gw.http.get(`/api/v1/models/${free.id}`, { token: a.viewer }), 404);
    expectProblem(await gw.http.delete(`/api/v1/models/${free.id}`, { token: a.admin }), 404);

    const used = await model(a);
    const enrolled = await gw.http.post('/api/v1/enrollments', { model: used.descriptor, serial: 'SN-DEL-1' }, { token: a.operator });
    expect(enrolled.status, enrolled.text).toBe(201);
    const busy = expectProblem(await gw.http.delete(`/api/v1/models/${used.id}`, { token: a.admin }), 409);
    expect(busy).toMatchObject({ things: 1 });
    expect((await gw.http.get(`/api/v1/models/${used.id}`, { token: a.viewer })).status).toBe(200);

    const withService = await model(a);
    const fs = await gw.http.post('/api/v1/factory-services', { role: 'provision', model_id: withService.id, endpoint_url: 'https://factory.example' }, { token: a.admin });
    expect(fs.status, fs.text).toBe(201);
    expect(expectProblem(await gw.http.delete(`/api/v1/models/${withService.id}`, { token: a.admin }), 409)).toMatchObject({ factory_services: 1 });
  });

  it('share (201: a deeplink to the public descriptor only) and import (201; 409 again; 404 unknown; 400 malformed or expired)', async () => {
    const m = await model(a, { provisioning_method: 'auto', provisioning: { serialPattern: '^SN-' } });
    expectProblem(await gw.http.post(`/api/v1/models/${m.id}/share`, {}, { token: b.admin }), 404);
    expectProblem(await gw.http.post(`/api/v1/models/${m.id}/share`, { expires_in_seconds: 5 }, { token: a.admin }), 400);
    const share = await gw.http.post(`/api/v1/models/${m.id}/share`, {}, { token: a.operator });
    expect(share.status, share.text).toBe(201);
    expect(share.body.token).toMatch(/^msh_[A-Za-z0-9_-]{43}$/);
    expect(share.body.url).toBe(`${gw.httpUrl}/links/model#${share.body.token}`);
    const stored = await gw.db.sql`select token_hash from model_shares where id = ${share.body.id}`;
    expect(stored[0].token_hash.toString('hex')).not.toContain(Buffer.from(share.body.token).toString('hex'));

    const imported = await gw.http.post('/api/v1/models/import', { deeplink: share.body.url }, { token: b.operator });
    expect(imported.status, imported.text).toBe(201);
    expect(imported.body).toMatchObject({ id: m.id, descriptor: m.descriptor, imported: true, owner_account_id: a.id, provisioning: {} });
    expectProblem(await gw.http.post('/api/v1/models/import', { token: share.body.token }, { token: b.operator }), 409);
    expectProblem(await gw.http.post('/api/v1/models/import', { token: share.body.token }, { token: a.operator }), 409);
    // b sees it (public descriptor only) in its list, read and software; it cannot change or delete it
    const listed = await gw.http.get('/api/v1/models?limit=100', { token: b.viewer });
    expect(listed.body.items.find((x: any) => x.id === m.id)).toMatchObject({ imported: true, provisioning: {} });
    expect((await gw.http.get(`/api/v1/models/${m.id}`, { token: b.viewer })).body.provisioning).toEqual({});
    expect((await gw.http.get(`/api/v1/models/${m.id}`, { token: a.viewer })).body.provisioning).toEqual({ serialPattern: '^SN-' });
    expect((await gw.http.get(`/api/v1/models/${m.id}/software`, { token: b.viewer })).status).toBe(200);
    expectProblem(await gw.http.patch(`/api/v1/models/${m.id}`, { name: 'mine' }, { token: b.admin }), 404);
    expectProblem(await gw.http.delete(`/api/v1/models/${m.id}`, { token: b.admin }), 404);

    // concurrent imports by one account: one 201, the others 409
    const race = await createAccount(gw);
    const all = await Promise.all([0, 1, 2].map(() => gw.http.post('/api/v1/models/import', { token: share.body.token }, { token: race.operator })));
    expect(all.map((r) => r.status).sort()).toEqual([201, 409, 409]);
    expectProblem(await gw.http.post('/api/v1/models/import', { token: 'msh_' + 'A'.repeat(43) }, { token: b.operator }), 404);
    expectProblem(await gw.http.post('/api/v1/models/import', { token: 'nope' }, { token: b.operator }), 400);
    expectProblem(await gw.http.post('/api/v1/models/import', { deeplink: 'not a url' }, { token: b.operator }), 400);
    expectProblem(await gw.http.post('/api/v1/models/import', {}, { token: b.operator }), 400);
    // expired: the share row's expiry moved into the past
    const short = await gw.http.post(`/api/v1/models/${m.id}/share`, { expires_in_seconds: 60 }, { token: a.operator });
    await gw.db.sql`update model_shares set expires_at = now() - interval '1 second' where id = ${short.body.id}`;
    const c = await createAccount(gw);
    expect(expectProblem(await gw.http.post('/api/v1/models/import', { token: short.body.token }, { token: c.operator }), 400).detail).toContain('expired');
  });

  it('internal models: platform operators only; resolvable for provisioning, never listed nor readable by the account', async () => {
    const body = { account_id: a.id, vid: 'FFF4', pid: nextPid(), name: 'internal', provisioning_method: 'none' };
    expectProblem(await gw.http.post('/api/v1/internal/models', body, { token: a.admin }), 403);
    const res = await gw.http.post('/api/v1/internal/models', body, { token: platform });
    expect(res.status, res.text).toBe(201);
    expectProblem(await gw.http.post('/api/v1/internal/models', body, { token: platform }), 409);
    expectProblem(await gw.http.post('/api/v1/internal/models', { ...body, pid: nextPid(), account_id: '00000000-0000-4000-8000-000000000000' }, { token: platform }), 404);
    expectProblem(await gw.http.post('/api/v1/internal/models', { ...body, vid: undefined, pid: nextPid() }, { token: platform }), 400);
    const listed = await gw.http.get('/api/v1/models?limit=100', { token: a.viewer });
    expect(listed.body.items.map((m: any) => m.id)).not.toContain(res.body.id);
    expectProblem(await gw.http.get(`/api/v1/models/${res.body.id}`, { token: a.viewer }), 404);
    // resolvable for provisioning: a device enrolls with its descriptor (method none)
    const enrolled = await gw.http.post('/ddi/v1/enroll', { provisioningMethod: 'none', manufacturer: 'acme', model: res.body.descriptor, serial: 'INT-1' });
    expect(enrolled.status, enrolled.text).toBe(200);
  });
});
