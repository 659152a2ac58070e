import crypto from 'node:crypto';
import http from 'node:http';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { signedHeaders, signingTimestamp, type Credentials } from '../../src/clients/svcSigner.js';
import { startTestGateway, type TestGateway } from '../helpers/gateway.js';
import { createAccount, type TestAccount } from '../helpers/accounts.js';
import { createClaimGroup } from '../helpers/devices.js';
import { svc, userWithCredential } from '../iam/helpers.js';

/**
 * Authentication-failure limits (issue 32) over real sockets from distinct loopback addresses
 * (the gateway listens on 127.0.0.1; every 127.0.0.x reaches it, and is the request's source:
 * no X-Forwarded-For, no trusted proxy). Limits: 10 wrong secrets per (identifier, source), 100
 * per identifier, 30 counted failures per source (the defaults), per 60 s.
 */
const LIMIT = 10;
const IDENTIFIER_LIMIT = 100;
const SOURCE_LIMIT = 30;

let gw: TestGateway;
let a: TestAccount;
let b: TestAccount;

beforeAll(async () => {
  gw = await startTestGateway({
    AUTH_FAILURE_LIMIT: String(LIMIT),
    AUTH_FAILURE_IDENTIFIER_LIMIT: String(IDENTIFIER_LIMIT),
    AUTH_FAILURE_SOURCE_LIMIT: String(SOURCE_LIMIT),
    AUTH_FAILURE_WINDOW_SECONDS: '60',
  });
  [a, b] = await Promise.all([createAccount(gw), createAccount(gw)]);
});
afterAll(async () => {
  await gw?.close();
});

interface Res { status: number; headers: http.IncomingHttpHeaders; body: any; text: string }

/** One request over a new connection bound to `ip` (a 127.0.0.x source address). */
function from(ip: string, method: string, path: string, o: { headers?: Record<string, string>; body?: unknown } = {}): Promise<Res> {
  const url = new URL(gw.httpUrl);
  const payload = o.body === undefined ? undefined : JSON.stringify(o.body);
  const headers = { ...(payload !== undefined ? { 'content-type': 'application/json', 'content-length': String(Buffer.byteLength(payload)) } : {}), ...o.headers };
  return new Promise((resolve, reject) => {
    const req = http.request({ host: url.hostname, port: url.port, method, path, localAddress: ip, agent: false, headers }, (res) => {
      const chunks: Buffer[] = [];
      res.on('data', (c: Buffer) => chunks.push(c));
      res.on('error', reject);
      res.on('end', () => {
        const text = Buffer.concat(chunks).toString('utf8');
        let body: unknown = text;
        try { body = JSON.parse(text); } catch { /* not JSON */ }
        resolve({ status: res.statusCode!, headers: res.headers, body, text });
      });
    });
    req.on('error', reject);
    req.end(payload);
  });
}

const whoami = (ip: string, authorization: string) => from(ip, 'GET', '/iam/v1/whoami', { headers: { authorization } });
const akid = () => `AKSV${crypto.randomBytes(8).toString('hex').toUpperCase()}`;
const secret = () => crypto.randomBytes(41).toString('base64url').slice(0, 54);

/** A refusal: its status and problem+json detail. */
function expectRefused(res: Res, status: number, detail: RegExp): void {
  expect(res.status, res.text).toBe(status);
  expect(res.headers['content-type']).toMatch(/application\/problem\+json/);
  expect(res.body.detail).toMatch(detail);
}
function expectTooMany(res: Res, detail: RegExp): void {
  expectRefused(res, 429, detail);
  const retryAfter = Number(res.headers['retry-after']);
  expect(Number.isInteger(retryAfter) && retryAfter >= 1 && retryAfter <= 60).toBe(true);
}

/** A counter's value on /metrics (0 when the series is absent). */
async function metric(name: string, labels: Record<string, string>): Promise<number> {
  const text = (await from('127.0.0.1', 'GET', '/metrics')).text;
  const want = Object.entries(labels).map(([k, v]) => `${k}="${v}"`);
  const line = text.split('\n').find((l) => l.startsWith(`${name}{`) && want.every((w) => l.includes(w)));
  return line ? Number(line.slice(line.lastIndexOf(' ') + 1)) : 0;
}

const enroll = (ip: string, claimSecret: string, serial: string, model = 'FFF1:8001') =>
  from(ip, 'POST', '/ddi/v1/enroll', { body: { provisioningMethod: 'claim_token', claimSecret, manufacturer: 'Acme', model, serial } });

describe('authentication-failure limits from distinct source addresses', () => {
  it('NAT: 30 wrong SVC secrets and 15 garbage bearer tokens from one address leave other tenants\' valid credentials from it served', async () => {
    const ip = '127.0.0.7';
    const { credential: k1 } = await userWithCredential(gw, a, 'nat-1', ['viewer']);
    const { credential: k2 } = await userWithCredential(gw, a, 'nat-2', ['viewer']);
    const { credential: other } = await userWithCredential(gw, b, 'nat-b', ['viewer']);
    // wrong secrets for two keys (8 and 9: no pair at its limit) and 13 unknown ids: 30 counted failures
    for (let i = 0; i < 8; i++) expectRefused(await whoami(ip, svc(k1.access_key_id, secret())), 401, /secret key invalid/);
    for (let i = 0; i < 9; i++) expectRefused(await whoami(ip, svc(k2.access_key_id, secret())), 401, /secret key invalid/);
    for (let i = 0; i < 13; i++) expectRefused(await whoami(ip, svc(akid(), secret())), 401, /credential not found/);
    // bearer tokens never count, and are never answered 429
    const garbage = ['garbage', 'a.b.c', `${Buffer.from('{"alg":"none"}').toString('base64url')}.e30.`, 'x'.repeat(300)];
    for (let i = 0; i < 15; i++) expectRefused(await whoami(ip, `Bearer ${garbage[i % garbage.length]}${i}`), 401, /./);

    // the address is blocked: its failures are now 429 (they no longer say whether a key exists) ...
    expectTooMany(await whoami(ip, svc(akid(), secret())), /from your address/);
    expectTooMany(await whoami(ip, svc(k1.access_key_id, secret())), /from your address/);
    // ... while every credential that verifies is served: another tenant's bearer token and key, and a failed key's own secret (9 failures from here)
    expect((await whoami(ip, `Bearer ${b.viewer}`)).status).toBe(200);
    const res = await whoami(ip, svc(other.access_key_id, other.secret_key));
    expect(res.status, res.text).toBe(200);
    expect(res.body).toMatchObject({ account_id: b.id });
    expect((await whoami(ip, svc(k1.access_key_id, k1.secret_key))).status).toBe(200);
    // a bearer failure is not a guess: still its own 401 from a blocked address
    expectRefused(await whoami(ip, 'Bearer garbage'), 401, /./);
  });

  it('factory line: claims refused for the group cap do not count; re-claims and other groups are served from the same address', async () => {
    const ip = '127.0.0.8';
    const before = await metric('auth_failures_total', { scheme: 'claim-secret' });
    const group = await createClaimGroup(gw, a, { maxDevices: 5 });
    const results: Res[] = [];
    // more refusals than the source limit: none of them may count
    for (let i = 0; i < SOURCE_LIMIT + 10; i++) results.push(await enroll(ip, group.sharedSecret, `line-${i}`));
    expect(results.filter((r) => r.status === 200)).toHaveLength(5);
    const refusedForCap = results.filter((r) => r.status !== 200);
    expect(refusedForCap).toHaveLength(SOURCE_LIMIT + 5);
    for (const r of refusedForCap) expectRefused(r, 403, /capped: maxDevices reached/);

    const first = results.find((r) => r.status === 200)!;
    const again = await enroll(ip, group.sharedSecret, `line-${results.indexOf(first)}`);
    expect(again.status, again.text).toBe(200);
    expect(again.body.thingId).toBe(first.body.thingId);
    const other = await createClaimGroup(gw, a);
    expect((await enroll(ip, other.sharedSecret, 'line-other')).status).toBe(200);
    expect(await metric('auth_failures_total', { scheme: 'claim-secret' })).toBe(before);
  });

  it('remote lockout attempt: wrong claim secrets naming a device from one address do not keep the device itself out', async () => {
    const group = await createClaimGroup(gw, a);
    const serial = `victim-${crypto.randomUUID().slice(0, 8)}`;
    const attacker = '127.0.0.20';
    for (let i = 0; i < LIMIT; i++) expectRefused(await enroll(attacker, `cgs_${secret()}`, serial), 403, /claim secret is not valid/);
    for (let i = LIMIT; i < 15; i++) expectTooMany(await enroll(attacker, `cgs_${secret()}`, serial), /for this credential from your address/);
    // the same identity with a wrong-cased model descriptor is the same identifier
    expectTooMany(await enroll(attacker, `cgs_${secret()}`, serial, 'fff1:8001'), /for this credential from your address/);

    const device = await enroll('127.0.0.21', group.sharedSecret, serial);
    expect(device.status, device.text).toBe(200);
    expect(device.body.thingId).toEqual(expect.any(String));
    // the attacker's address still verifies other identities (15 failures: below the source limit)
    expect((await enroll(attacker, group.sharedSecret, `${serial}-other`)).status).toBe(200);
  });

  it('viewer: bad signatures for a factory service\'s access key id from elsewhere leave the factory\'s signed calls served', async () => {
    const m = await gw.http.post('/api/v1/models', { vid: 'FFF5', pid: '0001', name: 'line model', provisioning_method: 'none' }, { token: a.admin });
    expect(m.status, m.text).toBe(201);
    const reg = await gw.http.post('/api/v1/factory-services', { role: 'provision', model_id: m.body.id, endpoint_url: 'https://factory.example' }, { token: a.admin });
    expect(reg.status, reg.text).toBe(201);
    const read = await gw.http.get(`/api/v1/factory-services/${reg.body.id}`, { token: a.viewer });
    expect(read.status).toBe(200);
    const creds: Credentials = { accessKeyId: read.body.access_key_id, secretAccessKey: reg.body.secret_access_key };
    const target = `/api/v1/factory-services/${reg.body.id}`;
    const signedGet = (ip: string, c: Credentials) =>
      from(ip, 'GET', target, { headers: signedHeaders(c, { method: 'GET', target, host: new URL(gw.httpUrl).host, timestamp: signingTimestamp() }) });

    const viewer = '127.0.0.30';
    const forged = { ...creds, secretAccessKey: secret() };
    for (let i = 0; i < LIMIT; i++) expectRefused(await signedGet(viewer, forged), 401, /signature does not match/);
    for (let i = LIMIT; i < 15; i++) expectTooMany(await signedGet(viewer, forged), /for this credential from your address/);
    // the viewer's own address waits, even with the right secret: it was guessing this key
    expectTooMany(await signedGet(viewer, creds), /for this credential from your address/);

    const factory = await signedGet('127.0.0.31', creds);
    expect(factory.status, factory.text).toBe(200);
    expect(factory.body).toMatchObject({ id: reg.body.id, access_key_id: creds.accessKeyId });
  });

  it('enumeration: one address naming unknown access key ids gets 429 after the source limit; its valid key is still served', async () => {
    const ip = '127.0.0.9';
    const { credential: mine } = await userWithCredential(gw, a, 'enum-1', ['viewer']);
    for (let i = 0; i < SOURCE_LIMIT; i++) expectRefused(await whoami(ip, svc(akid(), secret())), 401, /credential not found/);
    for (let i = 0; i < 5; i++) expectTooMany(await whoami(ip, svc(akid(), secret())), /from your address/);
    // an existing key with a wrong secret answers the same: the address no longer learns which keys exist
    expectTooMany(await whoami(ip, svc(mine.access_key_id, secret())), /from your address/);
    const res = await whoami(ip, svc(mine.access_key_id, mine.secret_key));
    expect(res.status, res.text).toBe(200);
    // another address is not concerned
    expectRefused(await whoami('127.0.0.10', svc(akid(), secret())), 401, /credential not found/);
  });

  it('identifier across sources: after the identifier limit, sources that failed it wait and a clean source with the right secret is served', async () => {
    const { credential: target } = await userWithCredential(gw, a, 'spread-1', ['viewer']);
    // 11 addresses, 9 wrong secrets each (no pair reaches its limit), then a 12th with one: the 100th failure
    let n = 0;
    for (let host = 40; n < IDENTIFIER_LIMIT; host++) {
      for (let i = 0; i < LIMIT - 1 && n < IDENTIFIER_LIMIT; i++, n++) expectRefused(await whoami(`127.0.0.${host}`, svc(target.access_key_id, secret())), 401, /secret key invalid/);
    }
    expectTooMany(await whoami('127.0.0.40', svc(target.access_key_id, target.secret_key)), /from your address among others/);
    expectTooMany(await whoami('127.0.0.51', svc(target.access_key_id, target.secret_key)), /from your address among others/);
    const clean = await whoami('127.0.0.52', svc(target.access_key_id, target.secret_key));
    expect(clean.status, clean.text).toBe(200);
    // a clean source gets to verify, and a wrong secret from it is refused and counted as usual
    expectRefused(await whoami('127.0.0.53', svc(target.access_key_id, secret())), 401, /secret key invalid/);
    expectTooMany(await whoami('127.0.0.53', svc(target.access_key_id, target.secret_key)), /from your address among others/);
  });

  it('/metrics counts refusals by scheme and reason, blocks and 429s by scope', async () => {
    expect(await metric('auth_failures_total', { scheme: 'svc', reason: 'unknown-identifier' })).toBeGreaterThanOrEqual(13 + SOURCE_LIMIT + 5);
    expect(await metric('auth_failures_total', { scheme: 'svc', reason: 'wrong-secret' })).toBeGreaterThanOrEqual(17 + IDENTIFIER_LIMIT);
    expect(await metric('auth_failures_total', { scheme: 'claim-secret', reason: 'wrong-secret' })).toBe(LIMIT);
    expect(await metric('auth_failures_total', { scheme: 'svc-hmac', reason: 'wrong-secret' })).toBe(LIMIT);
    // the pair blocks of the claim and signature scenarios; the sources of the NAT and enumeration ones; one identifier
    expect(await metric('auth_blocks_total', { scope: 'identifier-source' })).toBe(2);
    expect(await metric('auth_blocks_total', { scope: 'source' })).toBe(2);
    expect(await metric('auth_blocks_total', { scope: 'identifier' })).toBe(1);
    expect(await metric('auth_throttled_total', { scope: 'identifier-source' })).toBe(15 - LIMIT + 1 + 15 - LIMIT + 1);
    expect(await metric('auth_throttled_total', { scope: 'source' })).toBe(2 + 6);
    expect(await metric('auth_throttled_total', { scope: 'identifier' })).toBe(3);
    // bearer tokens are never counted
    const text = (await from('127.0.0.1', 'GET', '/metrics')).text;
    expect(text).not.toMatch(/auth_failures_total\{[^}]*scheme="bearer"/);
  });
});
