import 'reflect-metadata';
import crypto from 'node:crypto';
import * as x509 from '@peculiar/x509';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { signedFetch, type Credentials } from '../../src/clients/svcSigner.js';
import { isoNow } from '../../src/lib/clock.js';
import { thingKind } from '../../src/trust/kinds.js';
import { startTestGateway, expectProblem, type TestGateway } from '../helpers/gateway.js';
import { createAccount, type TestAccount } from '../helpers/accounts.js';
import { enrollDevice } from '../helpers/devices.js';

/**
 * POST/GET /api/v1/enrollments (the factory-side way in) and GET .../factory-eligibility over
 * real HTTP, with bearer tokens and with a factory service's signed requests.
 */
let gw: TestGateway;
let a: TestAccount;
let b: TestAccount;
let pid = 0x4000;

beforeAll(async () => {
  gw = await startTestGateway();
  [a, b] = await Promise.all([createAccount(gw, { capabilities: ['enroll_things'] }), createAccount(gw)]);
});
afterAll(async () => gw?.close());

async function model(account: TestAccount): Promise<{ id: string; descriptor: string }> {
  const res = await gw.http.post('/api/v1/models', { vid: 'FFF6', pid: (pid++).toString(16).toUpperCase(), name: 'Acme Sensor', provisioning_method: 'none' }, { token: account.admin });
  expect(res.status, res.text).toBe(201);
  return res.body;
}

async function service(account: TestAccount, modelId: string): Promise<Credentials> {
  const res = await gw.http.post('/api/v1/factory-services', { role: 'provision', model_id: modelId, endpoint_url: 'https://factory.example' }, { token: account.admin });
  expect(res.status, res.text).toBe(201);
  return { accessKeyId: res.body.access_key_id, secretAccessKey: res.body.secret_access_key };
}

const enroll = (body: unknown, token = a.operator) => gw.http.post('/api/v1/enrollments', body, { token });
const cn = (pem: string) => new x509.X509Certificate(pem).subjectName.getField('CN')[0];

describe('POST /api/v1/enrollments', () => {
  it('201 births a thing in ROLLEDOFF with its certificate (CN = thingId) and key; 200 for the same (model, serial)', async () => {
    const m = await model(a);
    const first = await enroll({ model: m.descriptor, serial: 'SN-1' });
    expect(first.status, first.text).toBe(201);
    const id = first.body.thing_id;
    expect(first.body).toMatchObject({ id, model_id: m.id, model: m.descriptor, manufacturer: 'Acme Sensor', serial: 'SN-1', method: 'factory', state: 'ROLLEDOFF', revoked: false, twinTopicPrefix: `devices/${id}` });
    expect(cn(first.body.certificate)).toBe(id);
    expect(first.body.privateKey).toMatch(/BEGIN PRIVATE KEY/);
    expect(first.body.certificate_serial).toBe(new x509.X509Certificate(first.body.certificate).serialNumber.toLowerCase());
    expect((await gw.http.get(`/api/v1/things/${id}/state`, { token: a.viewer })).body.state).toBe('ROLLEDOFF');
    const log = await gw.db.sql`select from_state, to_state, event from thing_state_changes where thing_id = ${id}`;
    expect(log.map((r) => `${r.from_state}>${r.to_state}:${r.event}`)).toEqual(['REGISTERED>ROLLEDOFF:ENROLL']);

    // by model id too, and with the manufacturer the thing has: the same thing, the same certificate
    for (const body of [{ model: m.descriptor, serial: 'SN-1' }, { model: m.id, serial: 'SN-1', manufacturer: 'Acme Sensor' }]) {
      const again = await enroll(body);
      expect(again.status).toBe(200);
      expect(again.body.thing_id).toBe(id);
      expect(again.body.certificate).toBe(first.body.certificate);
    }
    expect((await gw.db.sql`select count(*)::int as n from things where model = ${m.descriptor}`)[0].n).toBe(1);
  });

  it('two identical enrollments at once: one 201, one 200, one thing', async () => {
    const m = await model(a);
    const both = await Promise.all([enroll({ model: m.descriptor, serial: 'RACE' }), enroll({ model: m.descriptor, serial: 'RACE' })]);
    expect(both.map((r) => r.status).sort()).toEqual([200, 201]);
    expect(both[0].body.thing_id).toBe(both[1].body.thing_id);
    expect((await gw.db.sql`select count(*)::int as n from things where model = ${m.descriptor} and serial = 'RACE'`)[0].n).toBe(1);
  });

  it('with a csr: the certificate carries its key and no private key is returned; another key later is 409', async () => {
    const m = await model(a);
    const keys = await crypto.subtle.generateKey({ name: 'ECDSA', namedCurve: 'P-256' }, true, ['sign', 'verify']);
    const csr = await x509.Pkcs10CertificateRequestGenerator.create({ name: 'CN=device', keys, signingAlgorithm: { name: 'ECDSA', hash: 'SHA-256' } });
    const res = await enroll({ model: m.descriptor, serial: 'CSR-1', csr: csr.toString('pem') });
    expect(res.status, res.text).toBe(201);
    expect(res.body.privateKey).toBeUndefined();
    const spki = Buffer.from(await crypto.subtle.exportKey('spki', keys.publicKey));
    expect(Buffer.from(new x509.X509Certificate(res.body.certificate).publicKey.rawData).equals(spki)).toBe(true);
    const otherKeys = await crypto.subtle.generateKey({ name: 'ECDSA', namedCurve: 'P-256' }, true, ['sign', 'verify']);
    const otherCsr = await x509.Pkcs10CertificateRequestGenerator.create({ name: 'CN=device', keys: otherKeys, signingAlgorithm: { name: 'ECDSA', hash: 'SHA-256' } });
    expect(expectProblem(await enroll({ model: m.descriptor, serial: 'CSR-1', csr: otherCsr.toString('pem') }), 409).detail).toMatch(/another key/);
  });

  it('400 for bad input, 403 for another account\'s model or a viewer, no partial write', async () => {
    const m = await model(a);
    const theirs = await model(b);
    expect(expectProblem(await enroll({ model: 'FFF6:FFFF', serial: 'X' }), 400).detail).toMatch(/not a registered model/);
    expectProblem(await enroll({ model: m.descriptor }), 400);
    expectProblem(await enroll({ model: m.descriptor, serial: 'X', color: 'red' }), 400);
    expectProblem(await enroll({ model: m.descriptor, serial: 'X\u0000' }), 400);
    expectProblem(await enroll({ model: m.descriptor, serial: 'X', csr: '-----BEGIN CERTIFICATE REQUEST-----\nAAAA\n-----END CERTIFICATE REQUEST-----' }), 400);
    expect(expectProblem(await enroll({ model: theirs.descriptor, serial: 'X' }), 403).detail).toMatch(/another account/);
    expectProblem(await enroll({ model: m.descriptor, serial: 'X' }, a.viewer), 403);
    expect((await gw.db.sql`select count(*)::int as n from things where model = ${m.descriptor}`)[0].n).toBe(0);
  });

  it('403 for a blacklisted (model, serial); nothing is written', async () => {
    const m = await model(a);
    const listed = await gw.http.post('/api/v1/identity-blacklist', { model: m.descriptor, sn: 'STOLEN-1', reason: 'reported stolen' }, { token: a.admin });
    expect(listed.status, listed.text).toBe(201);
    expect(expectProblem(await enroll({ model: m.descriptor, serial: 'STOLEN-1' }), 403).detail).toMatch(/identity blacklist/);
    expect((await gw.db.sql`select count(*)::int as n from things where model = ${m.descriptor}`)[0].n).toBe(0);
    expect((await enroll({ model: m.descriptor, serial: 'CLEAN-1' })).status).toBe(201);
  });

  it('a factory service enrolls things of its own model (signed); another model is 403', async () => {
    const m = await model(a);
    const other = await model(a);
    const creds = await service(a, m.id);
    const ok = await signedFetch(`${gw.httpUrl}/api/v1/enrollments`, creds, { method: 'POST', body: { model: m.descriptor, serial: 'SIGNED-1' } });
    expect(ok.status).toBe(201);
    const body = await ok.json() as any;
    expect(body.state).toBe('ROLLEDOFF');
    const refused = await signedFetch(`${gw.httpUrl}/api/v1/enrollments`, creds, { method: 'POST', body: { model: other.descriptor, serial: 'SIGNED-2' } });
    expect(refused.status).toBe(403);
    expect((await refused.json() as any).detail).toMatch(/its own model/);
    // its reads are scoped to its model too
    const list = await (await signedFetch(`${gw.httpUrl}/api/v1/enrollments`, creds)).json() as any;
    expect(list.items.map((e: any) => e.id)).toEqual([body.id]);
  });
});

describe('GET /api/v1/enrollments', () => {
  it('lists every enrollment of the account (device ones too) in keyset pages; filters; another account\'s is 404', async () => {
    const m = await model(b);
    const ids: string[] = [];
    for (let i = 0; i < 5; i++) ids.push((await enroll({ model: m.descriptor, serial: `L-${i}` }, b.admin)).body.id);
    const device = await enrollDevice(gw, a);
    const seen: string[] = [];
    let cursor: string | null = null;
    do {
      const page: any = await gw.http.get(`/api/v1/enrollments?limit=2&model_id=${m.id}${cursor ? `&after=${cursor}` : ''}`, { token: b.viewer });
      expect(page.status).toBe(200);
      expect(page.body.items.length).toBeLessThanOrEqual(2);
      seen.push(...page.body.items.map((e: any) => e.id));
      cursor = page.body.next_cursor;
    } while (cursor);
    expect(seen.sort()).toEqual([...ids].sort());
    const one = await gw.http.get(`/api/v1/enrollments/${ids[0]}`, { token: b.viewer });
    expect(one.status).toBe(200);
    expect(one.body).toMatchObject({ id: ids[0], method: 'factory', state: 'ROLLEDOFF', certificate_revoked: false });
    expect(one.body.certificate).toBeUndefined();
    expectProblem(await gw.http.get(`/api/v1/enrollments/${ids[0]}`, { token: a.viewer }), 404);
    expectProblem(await gw.http.get(`/api/v1/enrollments/${crypto.randomUUID()}`, { token: b.viewer }), 404);
    const mine = await gw.http.get(`/api/v1/enrollments/${device.thingId}`, { token: a.viewer });
    expect(mine.status).toBe(200);
    expect(mine.body.method).not.toBe('factory');
    expect((await gw.http.get(`/api/v1/enrollments?method=factory&model_id=${m.id}`, { token: b.viewer })).body.items).toHaveLength(5);
    expectProblem(await gw.http.get('/api/v1/enrollments?limit=0', { token: b.viewer }), 400);
    expectProblem(await gw.http.get('/api/v1/enrollments'), 401);
  });
});

describe('GET /api/v1/things/{id}/factory-eligibility', () => {
  it('open from ROLLEDOFF to IN_FACTORY, closed by factory-handover; 404 and 401', async () => {
    const m = await model(a);
    const creds = await service(a, m.id);
    const id = (await enroll({ model: m.descriptor, serial: 'ELIG-1' })).body.id;
    const eligibility = async () => (await gw.http.get(`/api/v1/things/${id}/factory-eligibility`, { token: a.viewer })).body;
    expect(await eligibility()).toMatchObject({ thing_id: id, state: 'ROLLEDOFF', eligible: true, model_id: m.id });
    await gw.gw.actors.send(thingKind, id, { type: 'PROVISION', at: isoNow(gw.gw.clock) });
    await gw.gw.actors.send(thingKind, id, { type: 'FACTORY_DONE', at: isoNow(gw.gw.clock) });
    expect(await eligibility()).toMatchObject({ state: 'IN_FACTORY', eligible: true });
    // the factory service hands the thing over (signed), which closes factory deliveries
    const handover = await signedFetch(`${gw.httpUrl}/api/v1/things/${id}/factory-handover`, creds, { method: 'POST' });
    expect(handover.status).toBe(200);
    const closed = await eligibility();
    expect(closed).toMatchObject({ state: 'HANDOVER_PENDING', eligible: false });
    expect(closed.reason).toMatch(/factory-handover closed/);
    // read by the factory service too; a factory service of another model does not see it
    expect((await signedFetch(`${gw.httpUrl}/api/v1/things/${id}/factory-eligibility`, creds)).status).toBe(200);
    const stranger = await service(a, (await model(a)).id);
    expect((await signedFetch(`${gw.httpUrl}/api/v1/things/${id}/factory-eligibility`, stranger)).status).toBe(404);
    // activate needs a human
    expect((await signedFetch(`${gw.httpUrl}/api/v1/things/${id}/activate`, creds, { method: 'POST' })).status).toBe(403);
    expectProblem(await gw.http.get(`/api/v1/things/${id}/factory-eligibility`, { token: b.viewer }), 404);
    expectProblem(await gw.http.get(`/api/v1/things/${crypto.randomUUID()}/factory-eligibility`, { token: a.viewer }), 404);
    expectProblem(await gw.http.get(`/api/v1/things/${id}/factory-eligibility`), 401);
  });
});
