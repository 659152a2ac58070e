import crypto from 'node:crypto';
import { SignJWT, generateKeyPair } from 'jose';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { expectProblem, startTestGateway, type HttpResponse, type TestGateway } from '../helpers/gateway.js';
import { createAccount, type TestAccount } from '../helpers/accounts.js';
import { createClaimGroup } from '../helpers/devices.js';
import { svc, userWithCredential } from '../iam/helpers.js';
import { waitFor } from '../helpers/wait.js';
import { REDIS_URL, redisReachable } from '../helpers/redis.js';

// Limits on failed authentications (AUTH_FAILURE_LIMIT=10 per (identifier, source),
// AUTH_FAILURE_IDENTIFIER_LIMIT=20 per identifier, AUTH_FAILURE_SOURCE_LIMIT=15 per source, per 60 s).
// Nodes a and b form a cluster on one Redis behind a trusted proxy (127.0.0.1), so each test
// speaks from addresses of its own through X-Forwarded-For; node c trusts no proxy and counts in
// memory. Failures alternate between a and b: only counting shared in Redis reaches a limit. The
// node that counts the limit-th failure blocks at once; the other learns of the block by cluster
// broadcast (so: waitFor). test/http/authLimits.test.ts covers the model from real source addresses.
const REDIS = REDIS_URL;
const LIMIT = 10;
const IDENTIFIER_LIMIT = 20;
const SOURCE_LIMIT = 15;

const reachable = await redisReachable();
if (!reachable) console.warn(`authentication-failure cluster tests skipped: Redis at ${REDIS} is not reachable`);

let a: TestGateway;
let b: TestGateway;
let c: TestGateway;
let account: TestAccount;
let good: { access_key_id: string; secret_key: string };
let other: { access_key_id: string; secret_key: string };

const address = () => `100.${64 + crypto.randomInt(64)}.${crypto.randomInt(256)}.${crypto.randomInt(1, 255)}`;
const akid = () => `AKSV${crypto.randomBytes(8).toString('hex').toUpperCase()}`;
const secret = () => crypto.randomBytes(41).toString('base64url').slice(0, 54);
const from = (ip: string, headers: Record<string, string> = {}) => ({ headers: { 'x-forwarded-for': ip, ...headers } });
const whoami = (gw: TestGateway, ip: string, keyId: string, key: string) => gw.http.get('/iam/v1/whoami', from(ip, { authorization: svc(keyId, key) }));

/** The node that did not count the limit-th failure holds the source or key once the broadcast arrives. */
const eventuallyTooMany = (request: () => Promise<HttpResponse>) =>
  waitFor(async () => {
    const res = await request();
    return res.status === 429 ? res : undefined;
  }, 10_000, 'the block to reach the other node');
const node = (i: number) => (i % 2 ? b : a);

function expectTooMany(res: HttpResponse, detail: RegExp): number {
  expect(expectProblem(res, 429).detail).toMatch(detail);
  const retryAfter = Number(res.headers.get('retry-after'));
  expect(Number.isInteger(retryAfter) && retryAfter >= 1 && retryAfter <= 60).toBe(true);
  return retryAfter;
}

beforeAll(async () => {
  const limits = { AUTH_FAILURE_LIMIT: String(LIMIT), AUTH_FAILURE_IDENTIFIER_LIMIT: String(IDENTIFIER_LIMIT), AUTH_FAILURE_SOURCE_LIMIT: String(SOURCE_LIMIT), AUTH_FAILURE_WINDOW_SECONDS: '60' };
  c = await startTestGateway(limits);
  if (!reachable) return;
  const cluster = { ...limits, REDIS_URL: `${REDIS.replace(/\/\d*$/, '')}/${1 + crypto.randomInt(15)}`, TRUSTED_PROXIES: '127.0.0.1' };
  a = await startTestGateway({ ...cluster, NODE_ID: 'authfail-a' });
  b = await startTestGateway({ ...cluster, NODE_ID: 'authfail-b', JOBS: 'false', DEV_TOKEN_REMOTE: 'true' }, { db: a.db });
  account = await createAccount(a);
  ({ credential: good } = await userWithCredential(a, account, 'limits-alice', ['viewer']));
  ({ credential: other } = await userWithCredential(a, account, 'limits-bob', ['viewer']));
});
afterAll(async () => {
  await b?.close();
  await a?.close();
  await c?.close();
});

describe.skipIf(!reachable)('authentication-failure limits (cluster, trusted proxy)', () => {
  it('per source: after SOURCE_LIMIT unknown keys the address\'s failures get 429 on every node; its good key is still served', async () => {
    const ip = address();
    for (let i = 0; i < SOURCE_LIMIT; i++) expect(expectProblem(await whoami(node(i), ip, akid(), secret()), 401).detail).toMatch(/credential not found/);
    expectTooMany(await whoami(node(SOURCE_LIMIT - 1), ip, akid(), secret()), /from your address/);
    // a wrong secret of an existing key answers the same: the address no longer learns which keys exist
    expectTooMany(await eventuallyTooMany(() => whoami(node(SOURCE_LIMIT), ip, other.access_key_id, secret())), /from your address/);
    expect((await whoami(a, ip, good.access_key_id, good.secret_key)).status).toBe(200);
    expect((await whoami(b, ip, good.access_key_id, good.secret_key)).status).toBe(200);
  });

  it('per key: IDENTIFIER_LIMIT wrong secrets from as many addresses hold the key for those addresses on every node; a clean address is served', async () => {
    const { credential: target } = await userWithCredential(a, account, `limits-${crypto.randomUUID().slice(0, 8)}`, ['viewer']);
    const attackers = Array.from({ length: IDENTIFIER_LIMIT }, address);
    for (let i = 0; i < IDENTIFIER_LIMIT; i++) expect(expectProblem(await whoami(node(i), attackers[i], target.access_key_id, secret()), 401).detail).toMatch(/secret key invalid/);
    // the attackers' own failures were counted on either node: read from Redis by the one asked
    expectTooMany(await whoami(node(IDENTIFIER_LIMIT - 1), attackers[0], target.access_key_id, target.secret_key), /among others/);
    expectTooMany(await eventuallyTooMany(() => whoami(node(IDENTIFIER_LIMIT), attackers[1], target.access_key_id, target.secret_key)), /among others/);
    expect((await whoami(a, address(), target.access_key_id, target.secret_key)).status).toBe(200);
    expect((await whoami(b, address(), target.access_key_id, target.secret_key)).status).toBe(200);
    expect((await whoami(b, attackers[0], other.access_key_id, other.secret_key)).status).toBe(200);
  });

  it('per (key, address): LIMIT wrong secrets from one address hold that key for that address only', async () => {
    const { credential: target } = await userWithCredential(a, account, `limits-${crypto.randomUUID().slice(0, 8)}`, ['viewer']);
    const ip = address();
    for (let i = 0; i < LIMIT; i++) expectProblem(await whoami(node(i), ip, target.access_key_id, secret()), 401);
    expectTooMany(await whoami(node(LIMIT - 1), ip, target.access_key_id, target.secret_key), /for this credential from your address/);
    expectTooMany(await eventuallyTooMany(() => whoami(node(LIMIT), ip, target.access_key_id, target.secret_key)), /for this credential from your address/);
    expect((await whoami(a, address(), target.access_key_id, target.secret_key)).status).toBe(200);
    expect((await whoami(b, ip, other.access_key_id, other.secret_key)).status).toBe(200);
  });

  it('successes do not count', async () => {
    const ip = address();
    for (let i = 0; i < 2 * SOURCE_LIMIT; i++) expect((await whoami(a, ip, good.access_key_id, good.secret_key)).status).toBe(200);
    for (let i = 0; i < SOURCE_LIMIT; i++) expectProblem(await whoami(a, ip, akid(), secret()), 401);
    expectTooMany(await whoami(a, ip, akid(), secret()), /from your address/);
  });

  it('requests without credentials are neither counted nor held', async () => {
    const ip = address();
    for (let i = 0; i < SOURCE_LIMIT + 2; i++) expect(expectProblem(await a.http.get('/iam/v1/whoami', from(ip)), 401).detail).toMatch(/missing Authorization/);
    expect((await whoami(a, ip, good.access_key_id, good.secret_key)).status).toBe(200);
  });

  it('STS: refused bearer tokens never count (a signature cannot be guessed; the subject is anyone\'s text)', async () => {
    const { privateKey } = await generateKeyPair('ES256');
    const forged = await new SignJWT({ realm_access: { roles: [] } }).setProtectedHeader({ alg: 'ES256' })
      .setIssuer(`${a.gw.config.PUBLIC_BASE_URL}/realms/idc-corp`).setSubject('mallory').setAudience('gateway').setIssuedAt().setExpirationTime('5m').sign(privateKey);
    const ip = address();
    const sts = () => a.http.post('/iam/v1/sts/get-session-token', { account_id: account.id }, { token: forged, ...from(ip) });
    for (let i = 0; i < SOURCE_LIMIT + LIMIT; i++) expect(expectProblem(await sts(), 401).detail).toMatch(/signature/);
    expect((await whoami(a, ip, good.access_key_id, good.secret_key)).status).toBe(200);
  });

  it('enrollment: wrong claim secrets are held per (device, address) and per device for the addresses that failed it; the device enrolls from its own', async () => {
    const group = await createClaimGroup(a, account);
    const device = (serial: string, claimSecret: string) => ({ claimSecret, manufacturer: 'Acme', model: 'FFF1:8001', serial });
    const claim = (gw: TestGateway, serial: string, claimSecret: string, ip: string) => gw.http.post('/ddi/v1/enroll', device(serial, claimSecret), from(ip));

    // one address guessing for many devices: its failures get 429, its right claims are served
    const ip = address();
    for (let i = 0; i < SOURCE_LIMIT; i++) expect(expectProblem(await claim(node(i), `guess-${i}`, secret(), ip), 403).detail).toMatch(/claim secret is not valid/);
    expectTooMany(await claim(node(SOURCE_LIMIT - 1), 'guess-x', secret(), ip), /from your address/);
    expect((await claim(node(SOURCE_LIMIT - 1), 'guess-y', group.sharedSecret, ip)).status).toBe(200);

    // one device guessed from one address: that address waits for it, the device enrolls from another
    const pairIp = address();
    for (let i = 0; i < LIMIT; i++) expectProblem(await claim(node(i), 'target-1', secret(), pairIp), 403);
    expectTooMany(await claim(node(LIMIT - 1), 'target-1', group.sharedSecret, pairIp), /for this credential from your address/);
    expect((await claim(node(LIMIT), 'target-1', group.sharedSecret, address())).status).toBe(200);

    // one device guessed from many addresses: those wait on every node, the device's own address is served
    const attackers = Array.from({ length: IDENTIFIER_LIMIT }, address);
    for (let i = 0; i < IDENTIFIER_LIMIT; i++) expectProblem(await claim(node(i), 'target-2', secret(), attackers[i]), 403);
    expectTooMany(await claim(node(IDENTIFIER_LIMIT - 1), 'target-2', group.sharedSecret, attackers[0]), /among others/);
    expectTooMany(await eventuallyTooMany(() => claim(node(IDENTIFIER_LIMIT), 'target-2', group.sharedSecret, attackers[1])), /among others/);
    expect((await claim(node(IDENTIFIER_LIMIT), 'target-2', group.sharedSecret, address())).status).toBe(200);
  });

  it('/dev/token: a remote caller is served when DEV_TOKEN_REMOTE=true (node b), refused otherwise (node a)', async () => {
    const body = { realm: 'platform', sub: 'root', roles: ['platform-admin'] };
    expect((await b.http.post('/dev/token', body, from('203.0.113.9'))).status).toBe(200);
    expectProblem(await a.http.post('/dev/token', body, from('203.0.113.9')), 403);
  });
});

describe('without TRUSTED_PROXIES (memory counters)', () => {
  it('X-Forwarded-For is ignored: the socket address is the source', async () => {
    // a spoofed header does not make a local caller remote
    expect((await c.http.post('/dev/token', { realm: 'platform', sub: 'root', roles: [] }, from('203.0.113.9'))).status).toBe(200);
    for (let i = 0; i < SOURCE_LIMIT; i++) expectProblem(await whoami(c, address(), akid(), secret()), 401);
    expectTooMany(await whoami(c, address(), akid(), secret()), /from your address/);
  });
});
