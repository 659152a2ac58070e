import crypto from 'node:crypto';
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import http from 'node:http';
import os from 'node:os';
import path from 'node:path';
import type { AddressInfo } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestGateway, expectProblem, type TestGateway } from '../helpers/gateway.js';
import { createAccount, type TestAccount } from '../helpers/accounts.js';

let gw: TestGateway;
let account: TestAccount;
let dir: string;
let pid = 0x1000;

beforeAll(async () => {
  gw = await startTestGateway();
  account = await createAccount(gw, { capabilities: ['enroll_things'] });
  dir = fs.mkdtempSync(path.join(os.tmpdir(), 'trust-methods-'));
});
afterAll(async () => {
  await gw?.close();
  fs.rmSync(dir, { recursive: true, force: true });
});

async function model(method: string, provisioning?: Record<string, unknown>) {
  const body = { vid: 'FFF2', pid: (pid++).toString(16).toUpperCase(), name: `${method} model`, provisioning_method: method, ...(provisioning ? { provisioning } : {}) };
  const res = await gw.http.post('/api/v1/models', body, { token: account.operator });
  if (res.status !== 201) throw new Error(`model create failed: ${res.status} ${res.text}`);
  return res.body;
}

const enroll = (body: Record<string, unknown>) => gw.http.post('/ddi/v1/enroll', { manufacturer: 'Acme', ...body });

describe('models', () => {
  it('creates, reads and lists; vid:pid is unique; other accounts get 404', async () => {
    const m = await model('none');
    expect(m).toMatchObject({ vid: 'FFF2', provisioning_method: 'none', descriptor: `FFF2:${m.pid}` });
    expect((await gw.http.get(`/api/v1/models/${m.id}`, { token: account.viewer })).body).toMatchObject({ id: m.id, name: 'none model' });
    const list = await gw.http.get('/api/v1/models?limit=100', { token: account.viewer });
    expect(list.body.items.map((x: { id: string }) => x.id)).toContain(m.id);
    expectProblem(await gw.http.post('/api/v1/models', { vid: 'fff2', pid: m.pid, name: 'dup', provisioning_method: 'none' }, { token: account.operator }), 409);
    const other = await createAccount(gw);
    expectProblem(await gw.http.get(`/api/v1/models/${m.id}`, { token: other.viewer }), 404);
    expectProblem(await gw.http.post('/api/v1/models', { vid: 'XYZ1', pid: '0001', name: 'x', provisioning_method: 'none' }, { token: account.operator }), 400);
    expectProblem(await gw.http.post('/api/v1/models', { vid: 'AAAA', pid: '0001', name: 'x', provisioning_method: 'teleport' }, { token: account.operator }), 400);
    expectProblem(await gw.http.post('/api/v1/models', { vid: 'AAAA', pid: '0001', name: 'x', provisioning_method: 'webhook', provisioning: { approvalUrl: 'http://example.com/a' } }, { token: account.operator }), 400);
  });
});

describe('provisioning methods', () => {
  it('none: no validation; a repeat is a 409; births ROLLEDOFF in the model\'s account', async () => {
    const m = await model('none');
    const res = await enroll({ model: m.descriptor.toLowerCase(), serial: 'N-1' });
    expect(res.status).toBe(200);
    const thingId = res.body.twinTopicPrefix.split('/')[1];
    expect((await gw.http.get(`/api/v1/things/${thingId}`, { token: account.viewer })).status).toBe(200);
    const [actor] = await gw.db.sql<{ state: string }[]>`select state from actors where type = 'thing' and id = ${thingId}`;
    expect(actor.state).toBe('ROLLEDOFF');
    expectProblem(await enroll({ model: m.descriptor, serial: 'N-1' }), 409);
    expectProblem(await enroll({ model: m.id, serial: 'N-2', provisioningMethod: 'claim_token' }), 400);
    expect((await enroll({ model: m.id, serial: 'N-3' })).status).toBe(200);
  });

  it('auto: model rules decide', async () => {
    const m = await model('auto', { serialPattern: 'AC-[0-9]{4}', manufacturers: ['Acme'] });
    expect((await enroll({ model: m.descriptor, serial: 'AC-1234' })).status).toBe(200);
    expect(expectProblem(await enroll({ model: m.descriptor, serial: 'AC-12345' }), 403).detail).toContain('pattern');
    expectProblem(await enroll({ model: m.descriptor, serial: 'AC-9999', manufacturer: 'Evil' }), 403);
    expectProblem(await gw.http.post('/api/v1/models', { vid: 'AAAB', pid: '0001', name: 'x', provisioning_method: 'auto', provisioning: { serialPattern: '(' } }, { token: account.operator }), 400);
  });

  it('symmetric_key: the device proves HMAC-SHA256(groupKey, registrationId); the key is sealed at rest', async () => {
    const m = await model('symmetric_key');
    const groupKey = Buffer.from(m.secret.groupKey, 'base64');
    expect(groupKey.length).toBe(32);
    const derived = (id: string) => crypto.createHmac('sha256', groupKey).update(id).digest('base64');
    const ok = await enroll({ model: m.descriptor, serial: 'SK-1', derivedKey: derived('SK-1') });
    expect(ok.status).toBe(200);
    // a repeat by a device that proved its identity returns the same certificate
    const again = await enroll({ model: m.descriptor, serial: 'SK-1', derivedKey: derived('SK-1') });
    expect(again.body.certificate).toBe(ok.body.certificate);
    expect((await enroll({ model: m.descriptor, serial: 'SK-2', registrationId: 'reg-2', derivedKey: derived('reg-2') })).status).toBe(200);
    expectProblem(await enroll({ model: m.descriptor, serial: 'SK-3', derivedKey: derived('SK-4') }), 403);
    expectProblem(await enroll({ model: m.descriptor, serial: 'SK-3' }), 400);
    const [row] = await gw.db.sql<{ s: Buffer }[]>`select provisioning_secret as s from models where id = ${m.id}`;
    expect(row.s.includes(groupKey)).toBe(false);
    expect((await gw.http.get(`/api/v1/models/${m.id}`, { token: account.viewer })).text).not.toContain(m.secret.groupKey);
  });

  it('certificate: a birth certificate from the manufacturer CA plus a CSR of its key', async () => {
    const f = (n: string) => path.join(dir, n);
    const run = (...args: string[]) => execFileSync('openssl', args, { stdio: 'ignore' });
    run('req', '-x509', '-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:P-256', '-nodes', '-keyout', f('mca.key'), '-out', f('mca.pem'), '-subj', '/CN=Acme Manufacturing CA', '-days', '2');
    run('req', '-new', '-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:P-256', '-nodes', '-keyout', f('dev.key'), '-out', f('dev.csr'), '-subj', '/CN=CERT-1');
    run('x509', '-req', '-in', f('dev.csr'), '-CA', f('mca.pem'), '-CAkey', f('mca.key'), '-CAcreateserial', '-out', f('dev.pem'), '-days', '2');
    run('req', '-x509', '-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:P-256', '-nodes', '-keyout', f('rogue.key'), '-out', f('rogue.pem'), '-subj', '/CN=Acme Manufacturing CA', '-days', '2');
    run('req', '-new', '-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:P-256', '-nodes', '-keyout', f('other.key'), '-out', f('other.csr'), '-subj', '/CN=other');
    const read = (n: string) => fs.readFileSync(f(n), 'utf8');
    const m = await model('certificate', { manufacturerCaPem: read('mca.pem') });
    const ok = await enroll({ model: m.descriptor, serial: 'CERT-1', deviceCertificate: read('dev.pem'), csr: read('dev.csr') });
    expect(ok.status).toBe(200);
    expect(ok.body.privateKey).toBeUndefined();
    // a self-made certificate with the same CA name is refused
    run('x509', '-req', '-in', f('dev.csr'), '-CA', f('rogue.pem'), '-CAkey', f('rogue.key'), '-CAcreateserial', '-out', f('forged.pem'), '-days', '2');
    expectProblem(await enroll({ model: m.descriptor, serial: 'CERT-2', deviceCertificate: read('forged.pem'), csr: read('dev.csr') }), 403);
    // no proof of possession: a CSR of another key
    expectProblem(await enroll({ model: m.descriptor, serial: 'CERT-3', deviceCertificate: read('dev.pem'), csr: read('other.csr') }), 403);
    expectProblem(await enroll({ model: m.descriptor, serial: 'CERT-4', deviceCertificate: read('dev.pem') }), 400);
  });

  it('webhook: a signed call approves; refusal, errors and timeouts fail closed', async () => {
    const received: { headers: http.IncomingHttpHeaders; body: string }[] = [];
    const server = http.createServer((req, res) => {
      let body = '';
      req.on('data', (c) => (body += c));
      req.on('end', () => {
        received.push({ headers: req.headers, body });
        const serial = JSON.parse(body).serial as string;
        if (serial.startsWith('SLOW')) { setTimeout(() => res.end('{"approved":true}'), 1500); return; }
        if (serial.startsWith('ERR')) { res.statusCode = 500; res.end('{"approved":true}'); return; }
        res.setHeader('content-type', 'application/json');
        res.end(JSON.stringify({ approved: serial.startsWith('OK') }));
      });
    });
    await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
    try {
      const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}/approve`;
      const m = await model('webhook', { approvalUrl: url, timeoutMs: 300 });
      expect(m.secret.webhookSecret).toMatch(/^whsec_/);
      expect((await enroll({ model: m.descriptor, serial: 'OK-1' })).status).toBe(200);
      const call = received[0];
      const key = Buffer.from(m.secret.webhookSecret.slice(6), 'base64');
      const expected = crypto.createHmac('sha256', key).update(`${call.headers['webhook-id']}.${call.headers['webhook-timestamp']}.${call.body}`).digest('base64');
      expect(call.headers['webhook-signature']).toBe(`v1,${expected}`);
      expect(JSON.parse(call.body)).toMatchObject({ manufacturer: 'Acme', serial: 'OK-1', descriptor: m.descriptor });
      expect(expectProblem(await enroll({ model: m.descriptor, serial: 'NO-1' }), 403).detail).toContain('did not approve');
      expect(expectProblem(await enroll({ model: m.descriptor, serial: 'ERR-1' }), 403).detail).toContain('500');
      expect(expectProblem(await enroll({ model: m.descriptor, serial: 'SLOW-1' }), 403).detail).toContain('timed out');
    } finally {
      server.closeAllConnections();
      server.close();
    }
  });

  it('claim_token model: the device names the model; a group of another account is refused', async () => {
    const m = await model('claim_token');
    const g = (await gw.http.post('/api/v1/things/claim-groups', { name: 'g', maxDevices: 5, ttlDays: 1 }, { token: account.operator })).body;
    expect((await enroll({ model: m.descriptor, serial: 'CT-1', claimSecret: g.sharedSecret })).status).toBe(200);
    const other = await createAccount(gw);
    const og = (await gw.http.post('/api/v1/things/claim-groups', { name: 'g', maxDevices: 5, ttlDays: 1 }, { token: other.operator })).body;
    expectProblem(await enroll({ model: m.descriptor, serial: 'CT-2', claimSecret: og.sharedSecret }), 403);
    expectProblem(await enroll({ model: 'ABCD:0000', serial: 'CT-3' }), 400);
  });
});
