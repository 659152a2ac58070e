import crypto from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { expectProblem, startTestGateway, type TestGateway } from '../helpers/gateway.js';
import { expiredDevToken } from '../helpers/tokens.js';

let gw: TestGateway;
beforeAll(async () => {
  gw = await startTestGateway();
});
afterAll(() => gw?.close());

describe('identity plumbing', () => {
  it('a development token is accepted by a protected route', async () => {
    const token = await gw.token({ realm: 'platform', sub: 'root', roles: ['platform-admin'] });
    const created = await gw.http.post('/platform/v1/accounts', { name: 'Acme' }, { token });
    expect(created.status).toBe(201);
    expect(created.body.name).toBe('Acme');
    const read = await gw.http.get(`/platform/v1/accounts/${created.body.id}`, { token });
    expect(read.body.id).toBe(created.body.id);
  });

  it('a tampered token gets 401', async () => {
    const token = await gw.token({ realm: 'platform', sub: 'root', roles: ['platform-admin'] });
    const [h, p, s] = token.split('.');
    const claims = JSON.parse(Buffer.from(p, 'base64url').toString());
    claims.sub = 'mallory';
    const forged = [h, Buffer.from(JSON.stringify(claims)).toString('base64url'), s].join('.');
    const b = expectProblem(await gw.http.get('/platform/v1/accounts', { token: forged }), 401);
    expect(b.detail).toMatch(/signature/);
  });

  it('missing, malformed, expired and foreign tokens get 401 with distinct details', async () => {
    expect(expectProblem(await gw.http.get('/platform/v1/accounts'), 401).detail).toMatch(/missing Authorization/);
    expect(expectProblem(await gw.http.get('/platform/v1/accounts', { token: 'abc' }), 401).detail).toMatch(/malformed/);
    const expired = await expiredDevToken(gw, { realm: 'platform', sub: 'root', roles: ['platform-admin'] });
    expect(expectProblem(await gw.http.get('/platform/v1/accounts', { token: expired }), 401).detail).toMatch(/expired/);
    const { privateKey } = crypto.generateKeyPairSync('ec', { namedCurve: 'P-256' });
    const { SignJWT } = await import('jose');
    const foreign = await new SignJWT({ realm_access: { roles: ['platform-admin'] } })
      .setProtectedHeader({ alg: 'ES256' }).setIssuer('https://evil.example/realms/platform').setSubject('x').setExpirationTime('1h').sign(privateKey);
    expect(expectProblem(await gw.http.get('/platform/v1/accounts', { token: foreign }), 401).detail).toMatch(/not trusted/);
    const res = await gw.http.get('/platform/v1/accounts', { headers: { authorization: 'Basic dTpw' } });
    expect(expectProblem(res, 401).detail).toMatch(/unsupported Authorization scheme/);
  });

  it('role check: no roles and the wrong role are 403 insufficient role', async () => {
    const none = await gw.token({ realm: 'platform', sub: 'nobody', roles: [] });
    expect(expectProblem(await gw.http.get('/platform/v1/accounts', { token: none }), 403).detail).toMatch(/insufficient role.*no roles/);
    const operator = await gw.token({ realm: 'platform', sub: 'op', roles: ['platform-operator'] });
    expect((await gw.http.get('/platform/v1/accounts', { token: operator })).status).toBe(200);
    expect(expectProblem(await gw.http.post('/platform/v1/accounts', { name: 'x' }, { token: operator }), 403).detail).toMatch(/insufficient role.*platform-admin/);
    const tenant = await gw.token({ realm: `acc-${crypto.randomUUID()}`, sub: 'alice', roles: ['admin'] });
    expectProblem(await gw.http.get('/platform/v1/accounts', { token: tenant }), 403);
  });

  it('dev mode creates the account on first use of an acc-* token', async () => {
    const accountId = crypto.randomUUID();
    const platform = await gw.token({ realm: 'platform', sub: 'root', roles: ['platform-admin'] });
    expectProblem(await gw.http.get(`/platform/v1/accounts/${accountId}`, { token: platform }), 404);
    const tenant = await gw.token({ realm: `acc-${accountId}`, sub: 'alice', roles: ['viewer'] });
    await gw.http.get('/platform/v1/accounts', { token: tenant }); // 403 for the role, but authenticated
    expect((await gw.http.get(`/platform/v1/accounts/${accountId}`, { token: platform })).status).toBe(200);
  });

  it('rejects dev tokens for realms the gateway does not serve', async () => {
    const b = expectProblem(await gw.http.post('/dev/token', { realm: 'acc-notauuid', sub: 'a', roles: [] }), 400);
    expect(b.detail).toMatch(/realm must be/);
  });

  it('serves the development JWKS in the Keycloak layout', async () => {
    const res = await gw.http.get('/realms/platform/protocol/openid-connect/certs');
    expect(res.body.keys[0]).toMatchObject({ kty: 'EC', crv: 'P-256', alg: 'ES256' });
    expect(res.body.keys[0].d).toBeUndefined();
  });
});
