import { decodeJwt } from 'jose';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestGateway, expectProblem, type TestGateway } from '../helpers/gateway.js';
import { createAccount, type TestAccount } from '../helpers/accounts.js';
import { enrollDevice, revokeDevice } from '../helpers/devices.js';

let gw: TestGateway;
let account: TestAccount;

beforeAll(async () => {
  gw = await startTestGateway();
  account = await createAccount(gw, { capabilities: ['enroll_things'] });
});
afterAll(async () => gw?.close());

const targetToken = (token: string) => ({ headers: { authorization: `TargetToken ${token}` } });
const clientCert = (pem: string) => ({ headers: { 'x-ssl-client-cert': encodeURIComponent(pem) } });

describe('device plane', () => {
  it('status with the enrollment token', async () => {
    const d = await enrollDevice(gw, account, { via: 'token' });
    const res = await gw.http.get(`/ddi/v1/${d.thingId}/device/status`, targetToken(d.enrollmentToken!));
    expect(res.status).toBe(200);
    expect(res.body).toMatchObject({ thingId: d.thingId, state: 'ROLLEDOFF', revoked: false, certificate: { serial: d.serial, revoked: false } });
    expectProblem(await gw.http.get(`/ddi/v1/${d.thingId}/device/status`), 401);
    expectProblem(await gw.http.get(`/ddi/v1/${d.thingId}/device/status`, targetToken('et_wrong')), 401);
    const other = await enrollDevice(gw, account, { via: 'token' });
    expectProblem(await gw.http.get(`/ddi/v1/${other.thingId}/device/status`, targetToken(d.enrollmentToken!)), 401);
  });

  it('status with the client certificate forwarded by an internal TLS proxy', async () => {
    const d = await enrollDevice(gw, account);
    const res = await gw.http.get(`/ddi/v1/${d.thingId}/device/status`, clientCert(d.certPem));
    expect(res.status).toBe(200);
    expect(res.body.thingId).toBe(d.thingId);
    const other = await enrollDevice(gw, account);
    expectProblem(await gw.http.get(`/ddi/v1/${other.thingId}/device/status`, clientCert(d.certPem)), 403);
    await revokeDevice(gw, account, d.thingId);
    expectProblem(await gw.http.get(`/ddi/v1/${d.thingId}/device/status`, clientCert(d.certPem)), 403);
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
    const call = (body: Record<string, string>) => gw.http.post('/ddi/v1/authn/emqx', body);
    expect((await call({ clientid: d.thingId, username: d.thingId, cert_cn: d.thingId })).body).toEqual({ result: 'allow' });
    expect((await call({ clientid: d.thingId, username: 'x', cert_cn: d.thingId })).body).toEqual({ result: 'deny' });
    expect((await call({ clientid: 'x', username: d.thingId, cert_cn: d.thingId })).body).toEqual({ result: 'deny' });
    const unknown = crypto.randomUUID();
    expect((await call({ clientid: unknown, username: unknown, cert_cn: unknown })).body).toEqual({ result: 'deny' });
    expectProblem(await call({ clientid: 'a' } as Record<string, string>), 400);
  });

  it('broker callback refuses callers outside INTERNAL_CIDRS', async () => {
    const outside = await startTestGateway({ INTERNAL_CIDRS: '10.0.0.0/8' });
    try {
      const res = await outside.http.post('/ddi/v1/authn/emqx', { clientid: 'a', username: 'a', cert_cn: 'a' });
      expectProblem(res, 403);
      // forwarded client certificates from outside are ignored too
      expectProblem(await outside.http.get(`/ddi/v1/${crypto.randomUUID()}/device/status`, clientCert('x')), 401);
    } finally {
      await outside.close();
    }
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
    expect(await gw.services.thingDirectory.accountOf(d.thingId)).toBe(other.id);
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
