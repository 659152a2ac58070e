import 'reflect-metadata';
import * as x509 from '@peculiar/x509';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestGateway, type TestGateway } from '../helpers/gateway.js';
import { createAccount, type TestAccount } from '../helpers/accounts.js';
import { enrollDevice, revokeDevice } from '../helpers/devices.js';
import { waitFor } from '../helpers/wait.js';
import { mqttOutcome as mqttOutcomeOf, mtls as mtlsRequest, newKey, type KeyPair } from '../helpers/rotation.js';

let gw: TestGateway;
let account: TestAccount;

beforeAll(async () => {
  gw = await startTestGateway({ HTTPS_PORT: '0' });
  account = await createAccount(gw, { capabilities: ['enroll_things'] });
});
afterAll(async () => gw?.close());

const mtls = (method: string, path: string, client: KeyPair, body?: unknown) => mtlsRequest(gw, method, path, client, body);

/** Renews with `current`; the new key pair. */
async function renew(thingId: string, current: KeyPair): Promise<KeyPair & { serial: string }> {
  const { key, csr } = await newKey(`CN=${thingId}`);
  const res = await mtls('POST', `/ddi/v1/${thingId}/certificate/renew`, current, { csr });
  expect(res.status, JSON.stringify(res.body)).toBe(201);
  return { cert: res.body.certificate, key, serial: res.body.serial };
}

const mqttOutcome = (thingId: string, pair: KeyPair) => mqttOutcomeOf(gw, thingId, pair);

const revokedOf = async (serial: string) =>
  (await gw.db.sql<{ revoked: boolean }[]>`select revoked from device_certificates where serial = ${serial}`)[0]?.revoked;

describe('certificate rotation', () => {
  it('over MQTT: the old certificate works until the new one is used, then the CRL refuses it; the thingId stays', async () => {
    const d = await enrollDevice(gw, account);
    const old = { cert: d.certPem, key: d.keyPem! };
    expect(await mqttOutcome(d.thingId, old)).toBe('connected');
    const renewed = await renew(d.thingId, old);
    const cert = new x509.X509Certificate(renewed.cert);
    expect(cert.subject).toBe(`CN=${d.thingId}`);
    expect(cert.issuer).toBe(gw.gw.pki.deviceCaCert.subject);
    expect(renewed.serial).not.toBe(d.serial);
    // both valid until the new one is used
    expect(await mqttOutcome(d.thingId, old)).toBe('connected');
    expect(await revokedOf(d.serial)).toBe(false);
    expect(await mqttOutcome(d.thingId, renewed)).toBe('connected');
    await waitFor(async () => (await revokedOf(d.serial)) === true, 10_000, 'old certificate revoked');
    const [{ der }] = await gw.db.sql<{ der: Buffer }[]>`select der from crl`;
    const crl = new x509.X509Crl(der);
    expect(crl.entries.map((e) => e.serialNumber.toLowerCase().replace(/^0+/, ''))).toContain(d.serial.replace(/^0+/, ''));
    await waitFor(async () => (await mqttOutcome(d.thingId, old)) === 'refused', 10_000, 'old certificate refused by the broker');
    expect(await mqttOutcome(d.thingId, renewed)).toBe('connected');
    // same thing, not revoked, the new certificate is its current one
    const status = await mtls('GET', `/ddi/v1/${d.thingId}/device/status`, renewed);
    expect(status.status).toBe(200);
    expect(status.body).toMatchObject({ thingId: d.thingId, revoked: false, certificate: { serial: renewed.serial, revoked: false } });
    // the superseded certificate can renew no more (revoked: 403)
    const { csr } = await newKey();
    expect((await mtls('POST', `/ddi/v1/${d.thingId}/certificate/renew`, old, { csr })).status).toBe(403);
  });

  it('over HTTP: the first device-cert request with the new certificate revokes the old one', async () => {
    const d = await enrollDevice(gw, account);
    const old = { cert: d.certPem, key: d.keyPem! };
    const renewed = await renew(d.thingId, old);
    expect((await mtls('GET', `/ddi/v1/${d.thingId}/device/status`, old)).status).toBe(200);
    expect((await mtls('GET', `/ddi/v1/${d.thingId}/device/status`, renewed)).status).toBe(200);
    expect(await revokedOf(d.serial)).toBe(true);
    expect((await mtls('GET', `/ddi/v1/${d.thingId}/device/status`, old)).status).toBe(403);
    expect((await mtls('GET', `/ddi/v1/${d.thingId}/device/status`, renewed)).status).toBe(200);
    // what MQTT renewal passes: the session's certificate must still be valid
    const { csr } = await newKey();
    await expect(gw.testHooks.trust.renew(d.thingId, csr, d.serial)).rejects.toMatchObject({ kind: 'refused' });
    await expect(gw.testHooks.trust.renew(d.thingId, csr, renewed.serial.toUpperCase())).resolves.toMatchObject({ thingId: d.thingId });
  });

  it('refuses a CSR that is not PKCS#10 (400, nothing stored) and a revoked thing (403)', async () => {
    const d = await enrollDevice(gw, account);
    const old = { cert: d.certPem, key: d.keyPem! };
    const bad = await mtls('POST', `/ddi/v1/${d.thingId}/certificate/renew`, old, { csr: '-----BEGIN CERTIFICATE REQUEST-----\nAAAA\n-----END CERTIFICATE REQUEST-----' });
    expect(bad.status).toBe(400);
    expect(bad.body.detail).toContain('PKCS#10');
    expect((await mtls('POST', `/ddi/v1/${d.thingId}/certificate/renew`, old, {})).status).toBe(400);
    expect((await gw.db.sql`select count(*)::int as n from device_certificates where thing_id = ${d.thingId}`)[0].n).toBe(1);
    // another thing's certificate cannot renew this one
    const other = await enrollDevice(gw, account);
    const { csr } = await newKey();
    expect((await mtls('POST', `/ddi/v1/${d.thingId}/certificate/renew`, { cert: other.certPem, key: other.keyPem! }, { csr })).status).toBe(403);
    await revokeDevice(gw, account, d.thingId);
    expect((await mtls('POST', `/ddi/v1/${d.thingId}/certificate/renew`, old, { csr })).status).toBe(403);
    expect((await gw.db.sql`select count(*)::int as n from device_certificates where thing_id = ${d.thingId}`)[0].n).toBe(1);
  });

  it('two renewals used at once: exactly one certificate of the thing stays valid', async () => {
    const d = await enrollDevice(gw, account);
    const old = { cert: d.certPem, key: d.keyPem! };
    const [a, b] = [await renew(d.thingId, old), await renew(d.thingId, old)];
    await Promise.all([a, b].map((pair) => mtls('GET', `/ddi/v1/${d.thingId}/device/status`, pair)));
    const valid = await gw.db.sql<{ serial: string }[]>`select serial from device_certificates where thing_id = ${d.thingId} and not revoked`;
    expect(valid).toHaveLength(1);
    expect([a.serial, b.serial]).toContain(valid[0].serial);
    const thing = await gw.db.sql`select revoked_at from things where id = ${d.thingId}`;
    expect(thing[0].revoked_at).toBeNull();
  });

  it('refuses a CSR naming another CN, reusing a key of the thing or with a weak key (400); caps pending renewals (429)', async () => {
    const d = await enrollDevice(gw, account);
    const old = { cert: d.certPem, key: d.keyPem! };
    const path = `/ddi/v1/${d.thingId}/certificate/renew`;
    const other = await mtls('POST', path, old, { csr: (await newKey('CN=someone-else')).csr });
    expect(other.status).toBe(400);
    expect(other.body.detail).toContain('CN');
    // the key of the current certificate again
    const { csr: sameKey } = await csrFor(d.keyPem!);
    const reused = await mtls('POST', path, old, { csr: sameKey });
    expect(reused.status).toBe(400);
    expect(reused.body.detail).toContain('new key pair');
    const weak = await mtls('POST', path, old, { csr: (await newKey('', { name: 'RSASSA-PKCS1-v1_5', hash: 'SHA-256', modulusLength: 1024, publicExponent: new Uint8Array([1, 0, 1]) })).csr });
    expect(weak.status).toBe(400);
    expect(weak.body.detail).toContain('1024');
    // no subject at all is fine; three pending renewals (CERT_RENEWAL_MAX_PENDING), the fourth waits
    for (let i = 0; i < 3; i++) expect((await mtls('POST', path, old, { csr: (await newKey()).csr })).status).toBe(201);
    const fourth = await mtls('POST', path, old, { csr: (await newKey()).csr });
    expect(fourth.status).toBe(429);
    expect(fourth.body.type).toContain('too-many-pending-renewals');
    expect((await gw.db.sql`select count(*)::int as n from device_certificates where thing_id = ${d.thingId}`)[0].n).toBe(4);
  });

  it('concurrent renewals of one thing never pass the pending cap', async () => {
    const d = await enrollDevice(gw, account);
    const old = { cert: d.certPem, key: d.keyPem! };
    const csrs = await Promise.all(Array.from({ length: 8 }, () => newKey()));
    const statuses = await Promise.all(csrs.map(({ csr }) => mtls('POST', `/ddi/v1/${d.thingId}/certificate/renew`, old, { csr }).then((r) => r.status)));
    expect(statuses.filter((s) => s === 201)).toHaveLength(3);
    expect(statuses.filter((s) => s === 429)).toHaveLength(5);
    expect((await gw.db.sql`select count(*)::int as n from device_certificates where thing_id = ${d.thingId} and awaiting_first_use`)[0].n).toBe(3);
  });
});

/** A CSR signed with an existing PEM private key (PKCS#8, EC P-256). */
async function csrFor(keyPem: string): Promise<{ csr: string }> {
  const der = Buffer.from(keyPem.replace(/-----[^-]+-----|\s/g, ''), 'base64');
  const alg = { name: 'ECDSA', namedCurve: 'P-256' };
  const privateKey = await crypto.subtle.importKey('pkcs8', der, alg, true, ['sign']);
  const jwk = await crypto.subtle.exportKey('jwk', privateKey);
  const publicKey = await crypto.subtle.importKey('jwk', { kty: jwk.kty, crv: jwk.crv, x: jwk.x, y: jwk.y }, alg, true, ['verify']);
  const csr = await x509.Pkcs10CertificateRequestGenerator.create({ name: '', keys: { privateKey, publicKey }, signingAlgorithm: { name: 'ECDSA', hash: 'SHA-256' } });
  return { csr: csr.toString('pem') };
}
