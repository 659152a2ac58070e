import crypto from 'node:crypto';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { SignJWT, exportJWK, generateKeyPair } from 'jose';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { expectProblem, startTestGateway, type TestGateway } from '../helpers/gateway.js';

// A stand-in identity provider over real HTTP: Keycloak's JWKS layout, one RS256 key.
let idp: http.Server;
let idpBase: string;
let privateKey: Awaited<ReturnType<typeof generateKeyPair>>["privateKey"];
let gw: TestGateway;

beforeAll(async () => {
  const keys = await generateKeyPair('RS256');
  privateKey = keys.privateKey;
  const jwk = { ...(await exportJWK(keys.publicKey)), kid: 'k1', alg: 'RS256', use: 'sig' };
  idp = http.createServer((req, res) => {
    if (/^\/realms\/[^/]+\/protocol\/openid-connect\/certs$/.test(req.url ?? '')) {
      res.setHeader('content-type', 'application/json');
      res.end(JSON.stringify({ keys: [jwk] }));
    } else {
      res.statusCode = 404;
      res.end();
    }
  });
  await new Promise<void>((r) => idp.listen(0, '127.0.0.1', r));
  idpBase = `http://127.0.0.1:${(idp.address() as AddressInfo).port}`;
  gw = await startTestGateway({ OIDC_ISSUERS: idpBase });
});
afterAll(async () => {
  await gw?.close();
  idp?.close();
});

const sign = (realm: string, claims: Record<string, unknown>, iss = `${idpBase}/realms/${realm}`) =>
  new SignJWT(claims).setProtectedHeader({ alg: 'RS256', kid: 'k1' }).setIssuer(iss).setSubject('u1').setIssuedAt().setExpirationTime('5m').sign(privateKey);

describe('external OIDC issuers (Keycloak realm convention)', () => {
  it('accepts a token of a trusted realm, with roles from resource_access', async () => {
    const token = await sign('platform', { resource_access: { console: { roles: ['platform-operator'] } } });
    const res = await gw.http.get('/platform/v1/accounts', { token });
    expect(res.status).toBe(200);
  });

  it('combines realm_access and resource_access roles', async () => {
    const token = await sign('platform', { realm_access: { roles: ['offline_access'] }, resource_access: { a: { roles: ['platform-admin'] } } });
    const res = await gw.http.post('/platform/v1/accounts', { name: 'from keycloak' }, { token });
    expect(res.status).toBe(201);
  });

  it('the development issuer is off when OIDC_ISSUERS is set', async () => {
    expectProblem(await gw.http.post('/dev/token', { realm: 'platform', sub: 'x', roles: [] }), 404);
  });

  it('refuses an issuer outside the trusted base and a realm it does not serve', async () => {
    const other = await sign('platform', { realm_access: { roles: ['platform-admin'] } }, `http://127.0.0.1:1/realms/platform`);
    expect(expectProblem(await gw.http.get('/platform/v1/accounts', { token: other }), 401).detail).toMatch(/not trusted/);
    const weird = await sign('master', { realm_access: { roles: ['platform-admin'] } });
    expect(expectProblem(await gw.http.get('/platform/v1/accounts', { token: weird }), 401).detail).toMatch(/realm master/);
  });

  it('an acc-* token of an account that does not exist is refused outside development mode', async () => {
    const token = await sign(`acc-${crypto.randomUUID()}`, { realm_access: { roles: ['admin'] } });
    expect(expectProblem(await gw.http.get('/platform/v1/accounts', { token }), 403).detail).toMatch(/does not exist/);
  });
});
