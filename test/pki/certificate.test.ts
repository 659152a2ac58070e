import { execFileSync, spawnSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestGateway, expectProblem, type TestGateway } from '../helpers/gateway.js';
import { createAccount, type TestAccount } from '../helpers/accounts.js';
import { enrollDevice, revokeDevice } from '../helpers/devices.js';

let gw: TestGateway;
let account: TestAccount;
let dir: string;

beforeAll(async () => {
  gw = await startTestGateway();
  account = await createAccount(gw, { capabilities: ['enroll_things'] });
  dir = fs.mkdtempSync(path.join(os.tmpdir(), 'pki-test-'));
});
afterAll(async () => {
  await gw?.close();
  fs.rmSync(dir, { recursive: true, force: true });
});

function write(name: string, content: string | Buffer): string {
  const file = path.join(dir, name);
  fs.writeFileSync(file, content);
  return file;
}

/** CRL over HTTP (DER) as a PEM file openssl reads. */
async function fetchCrl(name: string): Promise<string> {
  const res = await fetch(`${gw.httpUrl}/api/v1/certificates/crl`);
  expect(res.status).toBe(200);
  expect(res.headers.get('content-type')).toBe('application/pkix-crl');
  const der = write(`${name}.der`, Buffer.from(await res.arrayBuffer()));
  const pem = path.join(dir, `${name}.pem`);
  execFileSync('openssl', ['crl', '-inform', 'DER', '-in', der, '-out', pem]);
  return pem;
}

function verify(cert: string, crl: string): { ok: boolean; out: string } {
  const r = spawnSync('openssl', ['verify', '-crl_check', '-CAfile', path.join(dir, 'root.pem'), '-untrusted', path.join(dir, 'ca.pem'), '-CRLfile', crl, cert], { encoding: 'utf8' });
  return { ok: r.status === 0, out: r.stdout + r.stderr };
}

describe('device certificates', () => {
  it('openssl shows CN = thingId, key usages, clientAuth, the CRL URL; verify -crl_check accepts, then rejects after revocation', async () => {
    const device = await enrollDevice(gw, account);
    const caRes = await gw.http.get('/api/v1/certificates/ca');
    expect(caRes.status).toBe(200);
    expect(caRes.text).toBe(gw.gw.pki.deviceCaPem);
    write('ca.pem', caRes.text);
    write('root.pem', gw.gw.pki.rootPem);
    const certFile = write('device.pem', device.certPem);

    const text = execFileSync('openssl', ['x509', '-in', certFile, '-noout', '-text'], { encoding: 'utf8' });
    expect(text).toContain(`Subject: CN = ${device.thingId}`);
    expect(text).toMatch(/X509v3 Key Usage: critical\s+Digital Signature, Key Encipherment/);
    expect(text).toMatch(/X509v3 Extended Key Usage:\s+TLS Web Client Authentication/);
    expect(text).toContain(`URI:${gw.gw.config.PUBLIC_BASE_URL}/api/v1/certificates/crl`);
    expect(text).toContain('Issuer: CN = Device Gateway Device CA');
    expect(text).toContain('Public Key Algorithm: id-ecPublicKey');
    expect(text).toContain('sha256WithRSAEncryption');
    // the CA is RSA-2048
    const caText = execFileSync('openssl', ['x509', '-in', path.join(dir, 'ca.pem'), '-noout', '-text'], { encoding: 'utf8' });
    expect(caText).toContain('Public-Key: (2048 bit)');

    const before = verify(certFile, await fetchCrl('crl-before'));
    expect(before.out).toContain(': OK');
    expect(before.ok).toBe(true);

    const revoked = await revokeDevice(gw, account, device.thingId);
    expect(revoked.revokedSerials).toEqual([device.serial]);

    const after = verify(certFile, await fetchCrl('crl-after'));
    expect(after.ok).toBe(false);
    expect(after.out).toContain('certificate revoked');
    const crlText = execFileSync('openssl', ['crl', '-in', path.join(dir, 'crl-after.pem'), '-noout', '-text'], { encoding: 'utf8' });
    expect(crlText.toLowerCase()).toContain(device.serial);
    expect(crlText).toMatch(/X509v3 CRL Number:\s+\d+/);
  });

  it('serials are unique', async () => {
    const devices = await Promise.all(Array.from({ length: 10 }, () => enrollDevice(gw, account)));
    expect(new Set(devices.map((d) => d.serial)).size).toBe(10);
  });

  it('a CSR keeps the key on the device: CN is the thingId whatever the CSR subject, no privateKey', async () => {
    const key = path.join(dir, 'csr.key');
    const csrFile = path.join(dir, 'device.csr');
    execFileSync('openssl', ['req', '-new', '-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:P-256', '-nodes', '-keyout', key, '-subj', '/CN=evil/O=tenant', '-out', csrFile], { stdio: 'ignore' });
    const device = await enrollDevice(gw, account, { csr: fs.readFileSync(csrFile, 'utf8') });
    expect(device.response.privateKey).toBeUndefined();
    expect(Object.keys(device.response)).not.toContain('privateKey');
    const certFile = write('csr-device.pem', device.certPem);
    const text = execFileSync('openssl', ['x509', '-in', certFile, '-noout', '-subject'], { encoding: 'utf8' });
    expect(text.trim()).toBe(`subject=CN = ${device.thingId}`);
    // the certificate carries the CSR's key
    const certKey = execFileSync('openssl', ['x509', '-in', certFile, '-noout', '-pubkey'], { encoding: 'utf8' });
    const csrKey = execFileSync('openssl', ['pkey', '-in', key, '-pubout'], { encoding: 'utf8' });
    expect(certKey).toBe(csrKey);
  });

  it('a CSR whose signature does not verify is a 400', async () => {
    const key = path.join(dir, 'bad.key');
    const csrFile = path.join(dir, 'bad.csr');
    execFileSync('openssl', ['req', '-new', '-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:P-256', '-nodes', '-keyout', key, '-subj', '/CN=x', '-out', csrFile], { stdio: 'ignore' });
    const der = Buffer.from(fs.readFileSync(csrFile, 'utf8').replace(/-----[^-]+-----/g, '').replace(/\s+/g, ''), 'base64');
    der[der.length - 5] ^= 0xff; // corrupt the signature
    const pem = `-----BEGIN CERTIFICATE REQUEST-----\n${der.toString('base64')}\n-----END CERTIFICATE REQUEST-----\n`;
    const claim = await gw.http.post('/api/v1/things/claim-groups', { name: 'g', maxDevices: 5, ttlDays: 1 }, { token: account.operator });
    const res = await gw.http.post('/ddi/v1/enroll', { provisioningMethod: 'claim_token', claimSecret: claim.body.sharedSecret, manufacturer: 'Acme', model: 'm', serial: 'BADCSR', csr: pem });
    expect(expectProblem(res, 400).detail).toContain('csr');
    const junk = await gw.http.post('/ddi/v1/enroll', { provisioningMethod: 'claim_token', claimSecret: claim.body.sharedSecret, manufacturer: 'Acme', model: 'm', serial: 'BADCSR', csr: 'not a csr' });
    expectProblem(junk, 400);
  });

  it('the PKI survives a restart: same CA after a second gateway starts on the same folder', async () => {
    const second = await startTestGateway({}, { db: gw.db });
    try {
      expect(second.gw.pki.deviceCaPem).toBe(gw.gw.pki.deviceCaPem);
      const crl = await fetch(`${second.httpUrl}/api/v1/certificates/crl`);
      const mine = await fetch(`${gw.httpUrl}/api/v1/certificates/crl`);
      expect(Buffer.from(await crl.arrayBuffer()).equals(Buffer.from(await mine.arrayBuffer()))).toBe(true);
    } finally {
      await second.stop();
    }
  });
});
