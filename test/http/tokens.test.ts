import crypto from 'node:crypto';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { SignJWT, exportJWK, generateKeyPair, type JWK, type JWTPayload, type CryptoKey } from 'jose';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { expectProblem, startTestGateway, type TestGateway } from '../helpers/gateway.js';
import { devSigningKey } from '../helpers/tokens.js';

// Forged tokens, signed with the development issuer's own key (read from its table) or a stand-in
// identity provider's: what a real issuer's key would sign passes or fails the same way.
let dev: TestGateway;
let devKey: CryptoKey;
let devKid: string;

let oidc: TestGateway;
let idp: http.Server;
let idpBase: string;
let idpKey: CryptoKey;

const now = () => Math.floor(Date.now() / 1000);
const b64 = (o: object) => Buffer.from(JSON.stringify(o)).toString('base64url');

beforeAll(async () => {
  dev = await startTestGateway({ TRUSTED_PROXIES: '127.0.0.1' });
  ({ kid: devKid, key: devKey } = await devSigningKey(dev));

  const keys = await generateKeyPair('RS256');
  idpKey = keys.privateKey;
  const jwk = { ...(await exportJWK(keys.publicKey)), kid: 'k1', alg: 'RS256', use: 'sig' };
  idp = http.createServer((req, res) => {
    const ok = /\/protocol\/openid-connect\/certs$/.test(req.url ?? '');
    res.writeHead(ok ? 200 : 404, { 'content-type': 'application/json' }).end(ok ? JSON.stringify({ keys: [jwk] }) : '{}');
  });
  await new Promise<void>((r) => idp.listen(0, '127.0.0.1', r));
  idpBase = `http://127.0.0.1:${(idp.address() as AddressInfo).port}`;
  // a base URL (any realm under /sso) and a realm URL (that realm only)
  oidc = await startTestGateway({ OIDC_ISSUERS: `${idpBase}/sso,${idpBase}/realms/idc-corp`, OIDC_AUDIENCE: 'gateway-api' });
});
afterAll(async () => {
  await dev?.close();
  await oidc?.close();
  idp?.close();
});

const platformAdmin = { realm_access: { roles: ['platform-admin'] } };

describe('development issuer tokens', () => {
  const valid = (): JWTPayload => ({ ...platformAdmin, iss: `${dev.gw.config.PUBLIC_BASE_URL}/realms/platform`, sub: 'root', aud: 'gateway', iat: now(), exp: now() + 300 });
  const sign = (payload: JWTPayload, key: CryptoKey = devKey) => new SignJWT(payload).setProtectedHeader({ alg: 'ES256', kid: devKid }).sign(key);
  const without = (claim: string) => {
    const p = valid();
    delete p[claim];
    return p;
  };

  it('the issuer signs tokens with exp, sub, iat and its audience, and they are accepted', async () => {
    const token = await dev.token({ realm: 'platform', sub: 'root', roles: ['platform-admin'] });
    const claims = JSON.parse(Buffer.from(token.split('.')[1], 'base64url').toString());
    expect(claims).toMatchObject({ sub: 'root', aud: 'gateway', iss: `${dev.gw.config.PUBLIC_BASE_URL}/realms/platform` });
    expect(claims.exp - claims.iat).toBe(3600);
    expect((await dev.http.get('/platform/v1/accounts', { token })).status).toBe(200);
    expect((await dev.http.get('/platform/v1/accounts', { token: await sign(valid()) })).status).toBe(200);
  });

  it.each([
    ['iat 30 s ahead (within the 60 s clock skew)', () => ({ ...valid(), iat: now() + 30 })],
    ['exp 30 s ago (within the clock skew)', () => ({ ...valid(), exp: now() - 30 })],
  ])('accepts %s', async (_name, payload) => {
    expect((await dev.http.get('/platform/v1/accounts', { token: await sign(payload()) })).status).toBe(200);
  });

  const forged: [string, () => Promise<string>, RegExp][] = [
    ['no exp', () => sign(without('exp')), /missing required "exp"/],
    ['no sub', () => sign(without('sub')), /missing required "sub"/],
    ['expired beyond the skew', () => sign({ ...valid(), iat: now() - 600, exp: now() - 120 }), /expired/],
    ['iat a day in the future', () => sign({ ...valid(), iat: now() + 86400, exp: now() + 90000 }), /"iat".*future/],
    ['nbf a day in the future', () => sign({ ...valid(), nbf: now() + 86400 }), /"nbf"/],
    ['no aud', () => sign(without('aud')), /missing required "aud"/],
    ['a wrong aud', () => sign({ ...valid(), aud: 'another-service' }), /"aud"/],
    ['a nested realm issuer', () => sign({ ...valid(), iss: `${dev.gw.config.PUBLIC_BASE_URL}/realms/x/realms/platform` }), /not trusted/],
    ['an empty realm', () => sign({ ...valid(), iss: `${dev.gw.config.PUBLIC_BASE_URL}/realms/` }), /not trusted/],
    ['alg none', async () => `${b64({ alg: 'none', typ: 'JWT' })}.${b64(valid())}.`, /"alg"/],
    ['alg HS256 keyed with the public key', async () => {
      const [row] = await dev.db.sql<{ public_jwk: JWK }[]>`select public_jwk from dev_issuer_keys`;
      return new SignJWT(valid()).setProtectedHeader({ alg: 'HS256', kid: devKid }).sign(new TextEncoder().encode(JSON.stringify(row.public_jwk)));
    }, /"alg"/],
    ['another key', async () => sign(valid(), (await generateKeyPair('ES256')).privateKey), /signature is invalid/],
  ];
  it.each(forged)('refuses a token with %s: 401 problem+json', async (_name, make, detail) => {
    const b = expectProblem(await dev.http.get('/platform/v1/accounts', { token: await make() }), 401);
    expect(b.detail).toMatch(detail);
  });
});

describe('external issuer tokens (OIDC_ISSUERS, OIDC_AUDIENCE)', () => {
  const valid = (iss = `${idpBase}/sso/realms/platform`): JWTPayload => ({ ...platformAdmin, iss, sub: 'u1', aud: ['gateway-api', 'account'], iat: now(), exp: now() + 300 });
  const sign = (payload: JWTPayload) => new SignJWT(payload).setProtectedHeader({ alg: 'RS256', kid: 'k1' }).sign(idpKey);
  const get = async (payload: JWTPayload) => oidc.http.get('/platform/v1/accounts', { token: await sign(payload) });

  it('accepts a token of a realm under a base URL, with the configured audience among its audiences', async () => {
    expect((await get(valid())).status).toBe(200);
  });

  it('a realm URL entry trusts that realm (an idc user without an assignment is authenticated, then 403)', async () => {
    const b = expectProblem(await get({ ...valid(`${idpBase}/realms/idc-corp`), realm_access: { roles: [] } }), 403);
    expect(b.detail).toMatch(/insufficient role/);
  });

  it.each([
    ['no aud', () => ({ ...valid(), aud: undefined }), /missing required "aud"/],
    ['a wrong aud', () => ({ ...valid(), aud: 'account' }), /"aud"/],
    ['no exp', () => ({ ...valid(), exp: undefined }), /missing required "exp"/],
    ['iat a day in the future', () => ({ ...valid(), iat: now() + 86400, exp: now() + 90000 }), /"iat".*future/],
    ['a realm nested under a base URL', () => valid(`${idpBase}/sso/realms/x/realms/platform`), /not trusted/],
    ['a realm nested under a realm URL', () => valid(`${idpBase}/realms/idc-corp/realms/platform`), /not trusted/],
    ['another realm next to a realm URL', () => valid(`${idpBase}/realms/platform`), /not trusted/],
  ])('refuses a token with %s', async (_name, payload, detail) => {
    const p = payload() as Record<string, unknown>;
    for (const k of Object.keys(p)) if (p[k] === undefined) delete p[k];
    expect(expectProblem(await get(p), 401).detail).toMatch(detail);
  });
});

describe('development token route', () => {
  const body = { realm: 'platform', sub: 'root', roles: ['platform-admin'] };

  it('answers loopback callers', async () => {
    expect((await dev.http.post('/dev/token', body)).status).toBe(200);
  });

  it('refuses a caller on the network (here: forwarded by a trusted proxy) with 403', async () => {
    const res = await dev.http.post('/dev/token', body, { headers: { 'x-forwarded-for': '203.0.113.7' } });
    expect(expectProblem(res, 403).detail).toMatch(/loopback callers only.*DEV_TOKEN_REMOTE/);
  });
});
