import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestGateway, expectProblem, type TestGateway } from '../helpers/gateway.js';
import { createAccount, type TestAccount } from '../helpers/accounts.js';
import { createClaimGroup, enrollDevice } from '../helpers/devices.js';

let gw: TestGateway;
let account: TestAccount;

beforeAll(async () => {
  gw = await startTestGateway();
  account = await createAccount(gw, { capabilities: ['enroll_things'] });
});
afterAll(async () => gw?.close());

describe('claim enrollment', () => {
  it('returns exactly the enrollment response fields', async () => {
    const d = await enrollDevice(gw, account);
    expect(Object.keys(d.response).sort()).toEqual(['caBundlePem', 'caCertificate', 'certificate', 'mqttBrokerPort', 'mqttBrokerUrl', 'privateKey', 'thingId', 'twinTopicPrefix']);
    expect(d.response.thingId).toBe(d.thingId);
    expect(d.response.twinTopicPrefix).toMatch(/^devices\/[0-9a-f-]{36}$/);
    expect(d.thingId).toMatch(/^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/);
    expect(d.response.privateKey).toContain('BEGIN PRIVATE KEY');
    const state = await gw.gw.actors.get((await import('../../src/trust/kinds.js')).thingKind, d.thingId);
    expect(state?.state).toBe('ROLLEDOFF');
  });

  it('repeat claim returns the same thing and certificate', async () => {
    const g = await createClaimGroup(gw, account);
    const a = await enrollDevice(gw, account, { claimSecret: g.sharedSecret, serial: 'SN-REPEAT' });
    const b = await enrollDevice(gw, account, { claimSecret: g.sharedSecret, serial: 'SN-REPEAT' });
    expect(b.thingId).toBe(a.thingId);
    expect(b.certPem).toBe(a.certPem);
    expect(b.keyPem).toBe(a.keyPem);
    const status = await gw.http.get(`/api/v1/things/claim-groups/${g.id}`, { token: account.viewer });
    expect(status.body.consumed).toBe(1);
  });

  it('bad secret is 403 problem', async () => {
    const res = await gw.http.post('/ddi/v1/enroll', { provisioningMethod: 'claim_token', claimSecret: 'cgs_nope', manufacturer: 'a', model: 'b', serial: 'c' });
    expectProblem(res, 403);
  });
});

describe('OpenAPI', () => {
  it('documents the trust routes', async () => {
    const res = await gw.http.get('/docs/json');
    expect(res.status).toBe(200);
    for (const p of ['/ddi/v1/enroll', '/api/v1/things', '/api/v1/things/{thingId}', '/api/v1/things/claim-groups', '/api/v1/things/claim-groups/{id}',
      '/api/v1/certificates/crl', '/api/v1/certificates/ca', '/ddi/v1/authn/emqx', '/ddi/v1/{thingId}/device/status', '/api/v1/models']) {
      expect(Object.keys(res.body.paths)).toContain(p);
    }
    // the answer is the named DeviceCredentials component (issue 39)
    expect(res.body.paths['/ddi/v1/enroll'].post.responses['200'].content['application/json'].schema).toEqual({ $ref: '#/components/schemas/DeviceCredentials' });
    expect(JSON.stringify(res.body.components.schemas.DeviceCredentials)).toContain('twinTopicPrefix');
  });
});
