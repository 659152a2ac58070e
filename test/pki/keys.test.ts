import crypto from 'node:crypto';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { createLocalJWKSet, decodeJwt, decodeProtectedHeader, generateKeyPair, jwtVerify, SignJWT, type JWTPayload } from 'jose';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { inject } from 'vitest';
import { freePort } from '../../src/db/embedded.js';
import { startTestGateway, expectProblem, type TestGateway } from '../helpers/gateway.js';
import { createTestDatabase, type TestDatabase } from '../helpers/db.js';
import { createAccount, type TestAccount } from '../helpers/accounts.js';
import { enrollDevice, type EnrolledDevice } from '../helpers/devices.js';

/**
 * One installation (database + CERTS_DIR) restarted through its key changes: an upgrade from
 * before license-signing.key and sealing.key existed, then a rotation of each key. The CA files
 * are copied from the run's PKI (no RSA generation); the HTTP port stays the same across restarts
 * so PUBLIC_BASE_URL (the license issuer) does too.
 */
let db: TestDatabase;
let certs: string;
let port: string;
let gw: TestGateway | undefined;
let account: TestAccount;

const file = (name: string) => path.join(certs, name);
const read = (name: string) => fs.readFileSync(file(name), 'utf8');

async function restart(): Promise<TestGateway> {
  await gw?.close();
  gw = await startTestGateway({ CERTS_DIR: certs, HTTP_PORT: port }, { db });
  return gw;
}

async function tokensFor(g: TestGateway, id: string): Promise<TestAccount> {
  const realm = `acc-${id}`;
  const t = (role: string) => g.token({ realm, sub: `${role}-${id.slice(0, 8)}`, roles: [role] });
  return { id, admin: await t('admin'), operator: await t('operator'), viewer: await t('viewer') };
}

beforeAll(async () => {
  db = await createTestDatabase();
  certs = fs.mkdtempSync(path.join(os.tmpdir(), 'pki-keys-'));
  for (const name of ['root-ca.crt', 'root-ca.key', 'device-ca.crt', 'device-ca.key', 'server.crt', 'server.key', 'ca-bundle.pem']) {
    fs.copyFileSync(path.join(inject('certsDir'), name), file(name));
  }
  port = String(await freePort());
});
afterAll(async () => {
  await gw?.close();
  await db?.drop();
  fs.rmSync(certs, { recursive: true, force: true });
});

// --- the sealed-value formats, written out independently of src/trust/secrets.ts

/** Before sealing.key: HKDF-SHA256 of the device CA key's PKCS#8 DER; nonce | tag | ciphertext. */
function legacyKey(): Buffer {
  const ikm = crypto.createPrivateKey(read('device-ca.key')).export({ type: 'pkcs8', format: 'der' });
  return Buffer.from(crypto.hkdfSync('sha256', ikm, Buffer.alloc(0), 'device-gateway/trust-sealed-secrets', 32));
}

function sealLegacy(key: Buffer, plain: string): Buffer {
  const iv = crypto.randomBytes(12);
  const cipher = crypto.createCipheriv('aes-256-gcm', key, iv);
  const body = Buffer.concat([cipher.update(plain, 'utf8'), cipher.final()]);
  return Buffer.concat([iv, cipher.getAuthTag(), body]);
}

const sealingKey = (name = 'sealing.key') => Buffer.from(read(name).trim(), 'base64');
const prefixOf = (key: Buffer) => Buffer.concat([Buffer.from([1]), crypto.createHash('sha256').update(key).digest().subarray(0, 4)]);

/** Opens a value of the current format (0x01 | key id | nonce | tag | ciphertext) with `key`. */
function openCurrent(key: Buffer, sealed: Buffer): string {
  expect(sealed.subarray(0, 5).equals(prefixOf(key))).toBe(true);
  const decipher = crypto.createDecipheriv('aes-256-gcm', key, sealed.subarray(5, 17));
  decipher.setAuthTag(sealed.subarray(17, 33));
  return Buffer.concat([decipher.update(sealed.subarray(33)), decipher.final()]).toString('utf8');
}

async function sealedValues(modelId: string, serial: string) {
  const [model] = await db.sql<{ v: Buffer }[]>`select provisioning_secret as v from models where id = ${modelId}`;
  const [cert] = await db.sql<{ v: Buffer }[]>`select sealed_private_key as v from device_certificates where serial = ${serial}`;
  return { model: model.v, cert: cert.v };
}

describe('sealing key', () => {
  let model: { id: string; descriptor: string; secret: { groupKey: string } };
  let first: { certificate: string; privateKey: string; serial: string };
  const derived = (id: string) => crypto.createHmac('sha256', Buffer.from(model.secret.groupKey, 'base64')).update(id).digest('base64');
  const enroll = (serial: string) => gw!.http.post('/ddi/v1/enroll', { manufacturer: 'Acme', model: model.descriptor, serial, derivedKey: derived(serial) });

  it('an installation from before the key files gets them on its next start, readable by the owner only', async () => {
    expect(fs.existsSync(file('sealing.key'))).toBe(false);
    const g = await restart();
    for (const name of ['sealing.key', 'license-signing.key']) {
      expect(fs.statSync(file(name)).mode & 0o777).toBe(0o600);
    }
    expect(sealingKey().length).toBe(32);
    expect(sealingKey().equals(legacyKey())).toBe(false);
    account = await createAccount(g, { capabilities: ['enroll_things'] });
    const res = await g.http.post('/api/v1/models', { vid: 'FFF9', pid: '0001', name: 'sealed', provisioning_method: 'symmetric_key' }, { token: account.operator });
    expect(res.status).toBe(201);
    model = res.body;
    const enrolled = await enroll('SEAL-1');
    expect(enrolled.status).toBe(200);
    first = { certificate: enrolled.body.certificate, privateKey: enrolled.body.privateKey, serial: new crypto.X509Certificate(enrolled.body.certificate).serialNumber.toLowerCase() };
    // both secrets are sealed with sealing.key
    const sealed = await sealedValues(model.id, first.serial);
    expect(openCurrent(sealingKey(), sealed.model)).toBe(model.secret.groupKey);
    expect(openCurrent(sealingKey(), sealed.cert)).toBe(first.privateKey);
  });

  it('values sealed with the legacy derived key still open, and start re-seals them with the new key', async () => {
    await gw!.close();
    gw = undefined;
    // the state of an installation before this change: legacy-sealed values, no sealing.key
    const legacy = legacyKey();
    await db.sql`update models set provisioning_secret = ${sealLegacy(legacy, model.secret.groupKey)} where id = ${model.id}`;
    await db.sql`update device_certificates set sealed_private_key = ${sealLegacy(legacy, first.privateKey)} where serial = ${first.serial}`;
    fs.rmSync(file('sealing.key'));

    await restart();
    const sealed = await sealedValues(model.id, first.serial);
    expect(openCurrent(sealingKey(), sealed.model)).toBe(model.secret.groupKey);
    expect(openCurrent(sealingKey(), sealed.cert)).toBe(first.privateKey);
    // the gateway reads them: the HMAC check (group key) and the idempotent re-claim (device key)
    const again = await enroll('SEAL-1');
    expect(again.status).toBe(200);
    expect(again.body).toMatchObject({ certificate: first.certificate, privateKey: first.privateKey });
    expect((await enroll('SEAL-2')).status).toBe(200);
  });

  it('rotation: with sealing.previous.key the old values open, and start re-seals them with the new sealing.key', async () => {
    // a value no key opens (damaged) does not stop the start; it is left as it is
    const other = await gw!.http.post('/api/v1/models', { vid: 'FFF9', pid: '0002', name: 'damaged', provisioning_method: 'symmetric_key' }, { token: (await tokensFor(gw!, account.id)).operator });
    expect(other.status).toBe(201);
    const damaged = crypto.randomBytes(60);
    await db.sql`update models set provisioning_secret = ${damaged} where id = ${other.body.id}`;
    await gw!.close();
    gw = undefined;
    const old = sealingKey();
    fs.renameSync(file('sealing.key'), file('sealing.previous.key'));
    await restart();
    expect(sealingKey().equals(old)).toBe(false);
    const sealed = await sealedValues(model.id, first.serial);
    expect(openCurrent(sealingKey(), sealed.model)).toBe(model.secret.groupKey);
    expect(openCurrent(sealingKey(), sealed.cert)).toBe(first.privateKey);
    expect((await enroll('SEAL-1')).body.privateKey).toBe(first.privateKey);
    const [left] = await db.sql<{ v: Buffer }[]>`select provisioning_secret as v from models where id = ${other.body.id}`;
    expect(left.v.equals(damaged)).toBe(true);
  });
});

describe('license-signing key', () => {
  let device: EnrolledDevice;
  let license: string;
  let claims: JWTPayload;
  const auth = () => ({ headers: { authorization: `TargetToken ${device.enrollmentToken}` } });
  const renew = (token: string) => gw!.http.post(`/ddi/v1/${device.thingId}/license/renew`, { license: token }, auth());
  const jwks = async () => {
    const res = await gw!.http.get('/api/v1/certificates/license-jwks');
    expect(res.status).toBe(200);
    return res.body as { keys: { kid: string; kty: string; crv: string; alg: string; use: string; d?: string }[] };
  };

  it('licenses are ES256 with the kid the JWKS publishes; they do not verify with the device CA key', async () => {
    const g = gw!;
    device = await enrollDevice(g, await tokensFor(g, account.id), { via: 'token' });
    const res = await g.http.post(`/ddi/v1/${device.thingId}/license/request`, { features: ['ota'] }, auth());
    expect(res.status).toBe(200);
    license = res.body.license;
    const set = await jwks();
    expect(set.keys).toHaveLength(1);
    expect(set.keys[0]).toMatchObject({ kty: 'EC', crv: 'P-256', alg: 'ES256', use: 'sig' });
    expect(set.keys[0].d).toBeUndefined();
    expect(decodeProtectedHeader(license)).toMatchObject({ alg: 'ES256', kid: set.keys[0].kid });
    const { payload } = await jwtVerify(license, createLocalJWKSet(set as never), { audience: 'device-license', subject: device.thingId });
    claims = payload;
    const caKey = new crypto.X509Certificate(g.gw.pki.deviceCaPem).publicKey;
    await expect(jwtVerify(license, caKey)).rejects.toThrow();
  });

  it('renew accepts a license of the device CA (RS256, before the upgrade) until it expires; refuses other keys', async () => {
    const caKey = crypto.createPrivateKey(read('device-ca.key'));
    const legacy = await new SignJWT(claims).setProtectedHeader({ alg: 'RS256', typ: 'JWT' }).sign(caKey);
    const renewed = await renew(legacy);
    expect(renewed.status).toBe(200);
    expect(decodeProtectedHeader(renewed.body.license).alg).toBe('ES256');

    const kid = (await jwks()).keys[0].kid;
    const stranger = await generateKeyPair('RS256');
    expectProblem(await renew(await new SignJWT(claims).setProtectedHeader({ alg: 'RS256' }).sign(stranger.privateKey)), 403);
    // the device CA key under our kid: the kid binds ES256 only
    expectProblem(await renew(await new SignJWT(claims).setProtectedHeader({ alg: 'RS256', kid }).sign(caKey)), 403);
    const ec = await generateKeyPair('ES256');
    expectProblem(await renew(await new SignJWT(claims).setProtectedHeader({ alg: 'ES256', kid }).sign(ec.privateKey)), 403);
    const expired = { ...claims, exp: Math.floor(Date.now() / 1000) - 60 };
    expectProblem(await renew(await new SignJWT(expired).setProtectedHeader({ alg: 'RS256' }).sign(caKey)), 403);
  });

  it('rotation: the previous key stays in the JWKS and its licenses renew; new licenses carry the new kid', async () => {
    const oldKid = (await jwks()).keys[0].kid;
    await gw!.close();
    gw = undefined;
    fs.renameSync(file('license-signing.key'), file('license-signing.previous.key'));
    await restart();
    const set = await jwks();
    expect(set.keys).toHaveLength(2);
    expect(set.keys[1].kid).toBe(oldKid);
    expect(set.keys[0].kid).not.toBe(oldKid);
    expect(fs.statSync(file('license-signing.key')).mode & 0o777).toBe(0o600);

    const renewed = await renew(license);
    expect(renewed.status).toBe(200);
    expect(decodeProtectedHeader(renewed.body.license).kid).toBe(set.keys[0].kid);
    await jwtVerify(renewed.body.license, createLocalJWKSet(set as never), { audience: 'device-license', subject: device.thingId });
    expect(decodeJwt(renewed.body.license).features).toEqual(['ota']);

    // once the previous key file is removed, its licenses are refused
    await gw!.close();
    gw = undefined;
    fs.rmSync(file('license-signing.previous.key'));
    await restart();
    expect((await jwks()).keys.map((k) => k.kid)).toEqual([set.keys[0].kid]);
    expectProblem(await renew(license), 403);
  });
});

describe('root CRL without the root key', () => {
  it('a gateway whose root key is kept offline publishes no root CRL: 404 with a reason', async () => {
    await gw!.close();
    gw = undefined;
    fs.rmSync(file('root-ca.key'));
    const g = await restart();
    expect(expectProblem(await g.http.get('/api/v1/certificates/root-crl'), 404).detail).toContain('offline');
    expect((await g.http.get('/api/v1/certificates/crl')).status).toBe(200);
  });
});
