import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { SignJWT, exportJWK, generateKeyPair, type CryptoKey, type JWK } from 'jose';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { JwtVerifier } from '../../src/http/auth/jwt.js';
import { TokenCache } from '../../src/http/auth/tokenCache.js';
import { createAccount } from '../helpers/accounts.js';
import { expectProblem, startTestGateway, type TestGateway } from '../helpers/gateway.js';
import { idcUser, platformToken } from '../iam/helpers.js';

// A stand-in identity provider over real HTTP (Keycloak's JWKS layout) whose keys the test rotates.
let idp: http.Server;
let base: string;
let served: JWK[] = [];
let fetches = 0;
const keys: { kid: string; privateKey: CryptoKey; jwk: JWK }[] = [];

beforeAll(async () => {
  for (const kid of ['k1', 'k2']) {
    const pair = await generateKeyPair('ES256');
    keys.push({ kid, privateKey: pair.privateKey, jwk: { ...(await exportJWK(pair.publicKey)), kid, alg: 'ES256', use: 'sig' } });
  }
  served = [keys[0].jwk];
  idp = http.createServer((req, res) => {
    fetches++;
    res.setHeader('content-type', 'application/json');
    res.end(JSON.stringify({ keys: served }));
  });
  await new Promise<void>((r) => idp.listen(0, '127.0.0.1', r));
  base = `http://127.0.0.1:${(idp.address() as AddressInfo).port}`;
});
afterAll(() => idp?.close());

/** A clock the verifier and its cache read (ms). */
class TestClock {
  ms = Date.now();
  now = () => this.ms;
}

function sign(key: (typeof keys)[number], clock: TestClock, opts: { sub?: string; expiresIn?: number } = {}): Promise<string> {
  const iat = Math.floor(clock.ms / 1000);
  return new SignJWT({ realm_access: { roles: ['platform-admin'] } })
    .setProtectedHeader({ alg: 'ES256', kid: key.kid })
    .setIssuer(`${base}/realms/platform`).setSubject(opts.sub ?? 'u1')
    .setIssuedAt(iat).setExpirationTime(iat + (opts.expiresIn ?? 300))
    .sign(key.privateKey);
}

function verifier(clock: TestClock, cacheCapacity = 100) {
  return new JwtVerifier([base], undefined, undefined, { now: clock.now, cacheCapacity, jwks: { cooldownMs: 0, cacheMaxAgeMs: 600_000 } });
}

describe('verified bearer token cache', () => {
  it('verifies a token once; a cached token past its exp is verified again and refused past the clock skew', async () => {
    served = [keys[0].jwk];
    const clock = new TestClock();
    const v = verifier(clock);
    const token = await sign(keys[0], clock, { expiresIn: 120 });
    expect((await v.verify(token)).sub).toBe('u1');
    expect(v.cachedTokens).toBe(1);
    const before = fetches;
    // served from the cache: no key fetch, same principal
    expect((await v.verify(token)).roles).toEqual(['platform-admin']);
    expect(fetches).toBe(before);

    // past exp, inside the 60 s skew: not served from the cache; verified again, not cached again
    clock.ms += 121_000;
    expect((await v.verify(token)).sub).toBe('u1');
    expect(v.cachedTokens).toBe(0);
    // past exp and the skew: refused
    clock.ms += 60_000;
    await expect(v.verify(token)).rejects.toMatchObject({ status: 401, message: expect.stringMatching(/expired/) });
  });

  it('a rotated issuer key drops its entries: a token of the removed key is refused at once', async () => {
    served = [keys[0].jwk];
    const clock = new TestClock();
    const v = verifier(clock);
    const old1 = await sign(keys[0], clock, { sub: 'a' });
    const old2 = await sign(keys[0], clock, { sub: 'b' });
    await v.verify(old1);
    await v.verify(old2);
    expect(v.cachedTokens).toBe(2);

    // the issuer rotates to k2: the first k2 token fetches the keys, sees the change, drops k1's entries
    served = [keys[1].jwk];
    const fresh = await sign(keys[1], clock, { sub: 'c' });
    expect((await v.verify(fresh)).sub).toBe('c');
    expect(v.cachedTokens).toBe(0);
    await expect(v.verify(old1)).rejects.toMatchObject({ status: 401 });
    // the token of the current key is cached from its next use on
    await v.verify(fresh);
    expect(v.cachedTokens).toBe(1);
  });

  it('keys older than the JWKS max age are fetched again before a cached token is served', async () => {
    served = [keys[0].jwk];
    const clock = new TestClock();
    const v = verifier(clock);
    const token = await sign(keys[0], clock, { expiresIn: 3600 });
    await v.verify(token);
    served = [keys[1].jwk];
    // within the max age the entry stands (the uncached path would trust the held keys as well)
    clock.ms += 60_000;
    await v.verify(token);
    // past it the keys are fetched, the rotation is seen and the token refused
    clock.ms += 600_000;
    const before = fetches;
    await expect(v.verify(token)).rejects.toMatchObject({ status: 401 });
    expect(fetches).toBeGreaterThan(before);
    expect(v.cachedTokens).toBe(0);
  });

  it('holds at most its capacity, least recently used out first, keyed by a hash of the token', async () => {
    served = [keys[0].jwk];
    const clock = new TestClock();
    const v = verifier(clock, 3);
    const tokens = await Promise.all(['a', 'b', 'c', 'd', 'e'].map((sub) => sign(keys[0], clock, { sub })));
    for (const t of tokens) await v.verify(t);
    expect(v.cachedTokens).toBe(3);

    const cache = new TokenCache(2);
    const entry = (sub: string) => ({ principal: { via: 'jwt' as const, sub, realm: 'platform', realmKind: 'platform' as const, roles: [] }, expiresAtMs: clock.ms + 1000, issuer: 'i', generation: 0 });
    const gen = () => 0;
    const [ka, kb, kc] = tokens.slice(0, 3).map(TokenCache.keyOf);
    expect(ka).not.toContain(tokens[0].slice(0, 20));
    cache.set(ka, entry('a'), clock.ms);
    cache.set(kb, entry('b'), clock.ms);
    expect(cache.get(ka, clock.ms, gen)?.sub).toBe('a'); // a is now the most recently used
    cache.set(kc, entry('c'), clock.ms);
    expect(cache.size).toBe(2);
    expect(cache.get(kb, clock.ms, gen)).toBeUndefined();
    expect(cache.get(ka, clock.ms, gen)?.sub).toBe('a');
    // another generation of the issuer's keys: void
    expect(cache.get(kc, clock.ms, () => 1)).toBeUndefined();
  });
});

describe('what is not cached with the token (real gateway)', () => {
  let gw: TestGateway;
  beforeAll(async () => {
    gw = await startTestGateway();
  });
  afterAll(() => gw?.close());

  it("an identity-center user's role change and removal take effect at once with a cached token", async () => {
    const acct = await createAccount(gw);
    const token = await idcUser(gw, acct.id, 'fed-zoe', ['viewer']);
    const headers = { 'x-account-id': acct.id };
    const who = await gw.http.get('/iam/v1/whoami', { token, headers });
    expect(who.body).toMatchObject({ sub: 'fed-zoe', roles: ['viewer'] });
    const cached = gw.gw.auth.cachedBearerTokens;
    expect(cached).toBeGreaterThan(0);

    const platform = await platformToken(gw);
    expect((await gw.http.put(`/platform/v1/accounts/${acct.id}/assignments/idc-corp/fed-zoe`, { roles: ['admin'] }, { token: platform })).status).toBe(200);
    expect((await gw.http.get('/iam/v1/whoami', { token, headers })).body).toMatchObject({ roles: ['admin'] });

    expect((await gw.http.delete(`/platform/v1/accounts/${acct.id}/assignments/idc-corp/fed-zoe`, { token: platform })).status).toBe(204);
    expectProblem(await gw.http.get('/iam/v1/whoami', { token, headers }), 403);
    // the token itself stayed verified in the cache all along
    expect(gw.gw.auth.cachedBearerTokens).toBeGreaterThanOrEqual(cached);
  });
});
