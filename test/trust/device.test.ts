import https from 'node:https';
import fs from 'node:fs';
import path from 'node:path';
import { decodeJwt } from 'jose';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { INTERNAL_SECRET_FILE } from '../../src/pki/internalSecret.js';
import { startTestGateway, expectProblem, type TestGateway } from '../helpers/gateway.js';
import { createAccount, type TestAccount } from '../helpers/accounts.js';
import { enrollDevice, revokeDevice, type EnrolledDevice } from '../helpers/devices.js';

const SECRET = 'internal-secret-of-this-test-0123456789';
/** TRUSTED_PROXIES empty (the default), INTERNAL_API_SECRET set, the mutual-TLS listener on */
let gw: TestGateway;
/** a second node on the same database behind a trusted proxy (127.0.0.1), INTERNAL_API_SECRET unset */
let proxied: TestGateway;
let account: TestAccount;

beforeAll(async () => {
  gw = await startTestGateway({ INTERNAL_API_SECRET: SECRET, HTTPS_PORT: '0' });
  proxied = await startTestGateway({ NODE_ID: 'behind-proxy', TRUSTED_PROXIES: '127.0.0.1,::1' }, { db: gw.db });
  account = await createAccount(gw, { capabilities: ['enroll_things'] });
});
afterAll(async () => {
  await proxied?.stop();
  await gw?.close();
});

const targetToken = (token: string) => ({ headers: { authorization: `TargetToken ${token}` } });
const clientCert = (pem: string) => ({ headers: { 'x-ssl-client-cert': encodeURIComponent(pem) } });

interface TlsResponse { status: number; contentType: string; body: any }

/** A request on the mutual-TLS listener over a fresh connection (no session reuse), with or without a client certificate. */
function mtls(method: string, path: string, client?: { cert: string; key: string }, body?: unknown): Promise<TlsResponse> {
  return new Promise((resolve, reject) => {
    const req = https.request({
      host: '127.0.0.1', port: gw.httpsPort, path, method, agent: false, ca: gw.gw.pki.rootPem, ...client,
      headers: body === undefined ? {} : { 'content-type': 'application/json' },
    }, (res) => {
      let text = '';
      res.setEncoding('utf8');
      res.on('data', (c: string) => { text += c; });
      res.on('end', () => resolve({ status: res.statusCode!, contentType: String(res.headers['content-type']), body: text ? JSON.parse(text) : undefined }));
    });
    req.on('error', reject);
    req.end(body === undefined ? undefined : JSON.stringify(body));
  });
}
const keyPair = (d: EnrolledDevice) => ({ cert: d.certPem, key: d.keyPem });

describe('device plane', () => {
  it('status with the enrollment token', async () => {
    const d = await enrollDevice(gw, account, { via: 'token' });
    const res = await gw.http.get(`/ddi/v1/${d.thingId}/device/status`, targetToken(d.enrollmentToken!));
    expect(res.status).toBe(200);
    expect(res.body).toMatchObject({ thingId: d.thingId, state: 'ROLLEDOFF', revoked: false, certificate: { serial: d.serial, revoked: false } });
    expectProblem(await gw.http.get(`/ddi/v1/${d.thingId}/device/status`), 401);
    expectProblem(await gw.http.get(`/ddi/v1/${d.thingId}/device/status`, targetToken('et_wrong')), 401);
    // the hook checks the path's thing against the credential's
    const other = await enrollDevice(gw, account, { via: 'token' });
    expect(expectProblem(await gw.http.get(`/ddi/v1/${other.thingId}/device/status`, targetToken(d.enrollmentToken!)), 403).detail).toContain(d.thingId);
  });

  it('a registered thing (token not used yet) has no lifecycle state', async () => {
    const res = await gw.http.post('/api/v1/things', { manufacturer: 'Acme', model: 'sensor-1', serial: `REG-${crypto.randomUUID().slice(0, 8)}` }, { token: account.operator });
    const status = await gw.http.get(`/ddi/v1/${res.body.thingId}/device/status`, targetToken(res.body.enrollmentToken));
    expect(status.status).toBe(200);
    expect(status.body).toMatchObject({ thingId: res.body.thingId, state: null, revoked: false, certificate: null });
  });

  it('a device certificate in X-SSL-Client-Cert from a peer outside TRUSTED_PROXIES is refused: certificates are public', async () => {
    const d = await enrollDevice(gw, account);
    const status = expectProblem(await gw.http.get(`/ddi/v1/${d.thingId}/device/status`, clientCert(d.certPem)), 401);
    expect(status.detail).toMatch(/TRUSTED_PROXIES/);
    expectProblem(await gw.http.post(`/ddi/v1/${d.thingId}/license/request`, {}, clientCert(d.certPem)), 401);
    const [{ n }] = await gw.db.sql<{ n: number }[]>`select count(*)::int as n from device_licenses where thing_id = ${d.thingId}`;
    expect(n).toBe(0);
  });

  it('the client certificate forwarded by a proxy in TRUSTED_PROXIES authenticates the device', async () => {
    const d = await enrollDevice(gw, account);
    const res = await proxied.http.get(`/ddi/v1/${d.thingId}/device/status`, clientCert(d.certPem));
    expect(res.status).toBe(200);
    expect(res.body.thingId).toBe(d.thingId);
    const other = await enrollDevice(gw, account);
    expectProblem(await proxied.http.get(`/ddi/v1/${other.thingId}/device/status`, clientCert(d.certPem)), 403);
    // not a certificate of the device CA (the server certificate is signed by the root)
    expectProblem(await proxied.http.get(`/ddi/v1/${d.thingId}/device/status`, clientCert(gw.gw.pki.serverCertPem)), 401);
    expectProblem(await proxied.http.get(`/ddi/v1/${d.thingId}/device/status`, clientCert('not a certificate')), 401);
    await revokeDevice(gw, account, d.thingId);
    expect(expectProblem(await proxied.http.get(`/ddi/v1/${d.thingId}/device/status`, clientCert(d.certPem)), 403).detail).toMatch(/revoked/);
  });

  it('mutual TLS on HTTPS_PORT: the device certificate authenticates; a revoked one is refused', async () => {
    const d = await enrollDevice(gw, account);
    const status = await mtls('GET', `/ddi/v1/${d.thingId}/device/status`, keyPair(d));
    expect(status.status).toBe(200);
    expect(status.body).toMatchObject({ thingId: d.thingId, state: 'ROLLEDOFF', revoked: false, certificate: { serial: d.serial } });
    const license = await mtls('POST', `/ddi/v1/${d.thingId}/license/request`, keyPair(d), { features: ['ota'] });
    expect(license.status).toBe(200);
    expect(decodeJwt(license.body.license)).toMatchObject({ sub: d.thingId });
    // the same routes, with their own checks: another thing's path, no certificate, a certificate not of the device CA
    const other = await enrollDevice(gw, account);
    expect((await mtls('GET', `/ddi/v1/${other.thingId}/device/status`, keyPair(d))).status).toBe(403);
    const anonymous = await mtls('GET', `/ddi/v1/${d.thingId}/device/status`);
    expect(anonymous).toMatchObject({ status: 401, contentType: expect.stringContaining('application/problem+json') });
    expect((await mtls('GET', `/ddi/v1/${d.thingId}/device/status`, { cert: gw.gw.pki.serverCertPem, key: gw.gw.pki.serverKeyPem })).status).toBe(401);
    expect((await mtls('GET', '/healthz')).status).toBe(200);

    // the listener reloads the CRL on the revocation's broadcast: the TLS layer itself flags the certificate
    await revokeDevice(gw, account, d.thingId);
    const refused = await mtls('GET', `/ddi/v1/${d.thingId}/device/status`, keyPair(d));
    expect(refused).toMatchObject({ status: 403, contentType: expect.stringContaining('application/problem+json'), body: { detail: expect.stringMatching(/revoked \(on the device CA CRL\)/) } });
    expect((await mtls('POST', `/ddi/v1/${d.thingId}/license/request`, keyPair(d), {})).status).toBe(403);
  });

  it('licenses: request, renew, refusal after revocation; every decision recorded', async () => {
    const d = await enrollDevice(gw, account, { via: 'token' });
    const auth = targetToken(d.enrollmentToken!);
    const first = await gw.http.post(`/ddi/v1/${d.thingId}/license/request`, { features: ['ota'] }, auth);
    expect(first.status).toBe(200);
    const claims = decodeJwt(first.body.license);
    expect(claims).toMatchObject({ sub: d.thingId, aud: 'device-license', jti: first.body.licenseId, features: ['ota'] });
    expect(claims.exp! * 1000).toBeGreaterThan(Date.now());
    const renewed = await gw.http.post(`/ddi/v1/${d.thingId}/license/renew`, { license: first.body.license }, auth);
    expect(renewed.status).toBe(200);
    expect(renewed.body.licenseId).not.toBe(first.body.licenseId);
    const tampered = first.body.license.slice(0, -4) + 'AAAA';
    expectProblem(await gw.http.post(`/ddi/v1/${d.thingId}/license/renew`, { license: tampered }, auth), 403);
    const other = await enrollDevice(gw, account, { via: 'token' });
    expectProblem(await gw.http.post(`/ddi/v1/${other.thingId}/license/renew`, { license: first.body.license }, targetToken(other.enrollmentToken!)), 403);
    await revokeDevice(gw, account, d.thingId);
    expectProblem(await gw.http.post(`/ddi/v1/${d.thingId}/license/request`, {}, auth), 403);
    const decisions = await gw.db.sql<{ kind: string; decision: string }[]>`
      select kind, decision from device_licenses where thing_id = ${d.thingId} order by created_at`;
    expect(decisions).toEqual([
      { kind: 'request', decision: 'granted' },
      { kind: 'renew', decision: 'granted' },
      { kind: 'renew', decision: 'denied' },
    ]);
  });

  it('broker callback: allow only for a matching CN, client id and username of a valid certificate', async () => {
    const d = await enrollDevice(gw, account);
    const call = (body: Record<string, string>) => gw.http.post('/ddi/v1/authn/emqx', body, { headers: { 'x-internal-secret': SECRET } });
    expect((await call({ clientid: d.thingId, username: d.thingId, cert_cn: d.thingId })).body).toEqual({ result: 'allow' });
    expect((await call({ clientid: d.thingId, username: 'x', cert_cn: d.thingId })).body).toEqual({ result: 'deny' });
    expect((await call({ clientid: 'x', username: d.thingId, cert_cn: d.thingId })).body).toEqual({ result: 'deny' });
    const unknown = crypto.randomUUID();
    expect((await call({ clientid: unknown, username: unknown, cert_cn: unknown })).body).toEqual({ result: 'deny' });
    expectProblem(await call({ clientid: 'a' } as Record<string, string>), 400);
  });

});

describe('OpenAPI', () => {
  it('documents the device and internal routes with their own credentials', async () => {
    const doc = (await gw.http.get('/docs/json')).body;
    expect(doc.paths['/ddi/v1/{thingId}/device/status'].get.security).toEqual([{ 'device-token': [] }, { 'device-cert': [] }]);
    expect(doc.paths['/ddi/v1/authn/emqx'].post.security).toEqual([{ internal: [] }]);
    expect(doc.paths['/internal/notifications/authorize'].post.security).toEqual([{ internal: [] }]);
    expect(doc.components.securitySchemes).toMatchObject({ 'device-cert': { type: 'mutualTLS' }, internal: { type: 'apiKey', name: 'X-Internal-Secret' } });
    // user routes list the user schemes (issue 39), never the device or internal ones
    expect(doc.paths['/api/v1/things'].post.security).toEqual([{ bearer: [] }, { svc: [] }, { svc: [], svcSessionToken: [] }]);
  });
});

describe('internal endpoints: the shared secret, not the caller\'s address', () => {
  const ids = { clientid: 'a', username: 'a', cert_cn: 'a' };
  const authz = { action: 'notifications:Send', publisher: { sub: 'x', realm: 'platform', realmKind: 'platform', accountId: null, roles: ['notification-publisher'] }, scope: 'user', subscriberId: 'u', template: 't/t', categoryId: 'general', severity: 'info', channel: ['in_app'] };

  it('refuse callers (loopback included) without INTERNAL_API_SECRET in X-Internal-Secret', async () => {
    for (const path of ['/ddi/v1/authn/emqx', '/internal/notifications/authorize']) {
      const body = path.includes('emqx') ? ids : authz;
      expect(expectProblem(await gw.http.post(path, body), 401).detail).toMatch(/X-Internal-Secret/);
      expectProblem(await gw.http.post(path, body, { headers: { 'x-internal-secret': `${SECRET}x` } }), 401);
      expect((await gw.http.post(path, body, { headers: { 'x-internal-secret': SECRET } })).status).toBe(200);
    }
    // a device credential does not open them either
    const d = await enrollDevice(gw, account, { via: 'token' });
    expectProblem(await gw.http.post('/ddi/v1/authn/emqx', ids, targetToken(d.enrollmentToken!)), 401);
  });

  it('without INTERNAL_API_SECRET they open with the secret the first start wrote to CERTS_DIR (0600)', async () => {
    const file = path.join(inject('certsDir'), INTERNAL_SECRET_FILE);
    expect(fs.statSync(file).mode & 0o777).toBe(0o600);
    const generated = fs.readFileSync(file, 'utf8').trim();
    expect(generated.length).toBeGreaterThanOrEqual(32);
    expect(proxied.gw.auth.internalSecret).toBe(generated);
    expect(expectProblem(await proxied.http.post('/ddi/v1/authn/emqx', ids), 401).detail).toMatch(/X-Internal-Secret/);
    expectProblem(await proxied.http.post('/ddi/v1/authn/emqx', ids, { headers: { 'x-internal-secret': SECRET } }), 401);
    expect((await proxied.http.post('/ddi/v1/authn/emqx', ids, { headers: { 'x-internal-secret': generated } })).body).toEqual({ result: 'deny' });
    // the default notification authorization calls its own node with that secret
    const own = await proxied.http.post('/internal/notifications/authorize', authz, { headers: { 'x-internal-secret': generated } });
    expect(own.body).toEqual({ allow: true });
  });
});

describe('join by access code', () => {
  it('moves a thing to the joining account once', async () => {
    const d = await enrollDevice(gw, account);
    const code = await gw.http.post(`/api/v1/things/${d.thingId}/access-code`, undefined, { token: account.operator });
    expect(code.status).toBe(201);
    const other = await createAccount(gw);
    const joined = await gw.http.post('/api/v1/things/join', { access_code: code.body.accessCode }, { token: other.operator });
    expect(joined.status).toBe(200);
    expect(joined.body).toEqual({ thingId: d.thingId, accountId: other.id });
    // the thing is the joining account's now, and no longer the first one's
    expect((await gw.http.get(`/api/v1/things/${d.thingId}`, { token: other.viewer })).status).toBe(200);
    expectProblem(await gw.http.get(`/api/v1/things/${d.thingId}`, { token: account.viewer }), 404);
    const [joinedEvent] = await gw.db.sql<{ account_id: string }[]>`select account_id from domain_events where actor_id = ${d.thingId} and type = 'thing.joined'`;
    expect(joinedEvent.account_id).toBe(other.id);
    // the new owner revokes it; the event belongs to the new owner
    await revokeDevice(gw, other, d.thingId);
    const [revokedEvent] = await gw.db.sql<{ account_id: string }[]>`select account_id from domain_events where actor_id = ${d.thingId} and type = 'thing.revoked'`;
    expect(revokedEvent.account_id).toBe(other.id);
    expectProblem(await gw.http.post('/api/v1/things/join', { access_code: code.body.accessCode }, { token: account.operator }), 403);
    expectProblem(await gw.http.post(`/api/v1/things/${d.thingId}/access-code`, undefined, { token: account.operator }), 404);
    expectProblem(await gw.http.post('/api/v1/things/join', { access_code: 'ac_nope' }, { token: other.viewer }), 403);
  });
});
