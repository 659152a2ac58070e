import { expect } from 'vitest';
import type { TestGateway } from '../helpers/gateway.js';
import type { TestAccount } from '../helpers/accounts.js';

let pid = 0x3000 + Math.floor(Math.random() * 0x1000);

/** A platform operator's token. */
export const platformToken = (gw: TestGateway, sub = 'platform-op') => gw.token({ realm: 'platform', sub, roles: ['platform-operator'] });

/** The account's VID namespace and a model in it. */
export async function vendorModel(gw: TestGateway, account: TestAccount): Promise<{ id: string; descriptor: string }> {
  expect((await gw.http.post('/api/v1/vendors', {}, { token: account.admin })).status).toBe(201);
  const res = await gw.http.post('/api/v1/models', { pid: (pid++ & 0xffff).toString(16).toUpperCase().padStart(4, '0'), name: 'registry model', provisioning_method: 'none' }, { token: account.admin });
  expect(res.status, res.text).toBe(201);
  return res.body;
}

/** Requests the factory registration and has a platform operator approve it. */
export async function approvedFactory(gw: TestGateway, account: TestAccount, platform: string): Promise<void> {
  expect([200, 201]).toContain((await gw.http.post('/api/v1/factory-registrations', {}, { token: account.admin })).status);
  const res = await gw.http.post(`/api/v1/factory-registrations/${account.id}/approve`, {}, { token: platform });
  expect(res.status, res.text).toBe(200);
}

/** A registrar of the account (its factory registration approved first); approved by the platform unless `pending`. */
export async function registrar(gw: TestGateway, account: TestAccount, platform: string, opts: { pending?: boolean; modelId?: string } = {}): Promise<Record<string, any>> {
  const me = await gw.http.get('/api/v1/factory-registrations/me', { token: account.viewer });
  if (me.status !== 200 || me.body.state !== 'APPROVED') await approvedFactory(gw, account, platform);
  const res = await gw.http.post('/api/v1/registrars', { name: 'line 1' }, { token: account.operator });
  expect(res.status, res.text).toBe(201);
  let body = res.body;
  if (opts.modelId) {
    const bound = await gw.http.put(`/api/v1/registrars/${body.id}/canonical-model`, { model_id: opts.modelId }, { token: account.operator });
    expect(bound.status, bound.text).toBe(200);
    body = bound.body;
  }
  if (!opts.pending) {
    const approved = await gw.http.post(`/api/v1/registrars/${body.id}/approve`, {}, { token: platform });
    expect(approved.status, approved.text).toBe(200);
    body = approved.body;
  }
  return body;
}

/** `owner` makes `requester` an eligible accessor: artifact, redeem, approve. */
export async function eligible(gw: TestGateway, owner: TestAccount, requester: TestAccount): Promise<void> {
  const artifact = await gw.http.post('/api/v1/eligibility-artifacts', {}, { token: owner.admin });
  expect(artifact.status, artifact.text).toBe(201);
  const grant = await gw.http.post('/api/v1/eligibility-artifacts/redeem', { url: artifact.body.url }, { token: requester.admin });
  expect(grant.status, grant.text).toBe(201);
  const approved = await gw.http.post(`/api/v1/eligibility-grants/${grant.body.id}/approve`, {}, { token: owner.admin });
  expect(approved.status, approved.text).toBe(200);
}

/** Enrolls a thing of the model through the factory route. */
export async function enroll(gw: TestGateway, account: TestAccount, descriptor: string, serial: string, manufacturer?: string): Promise<string> {
  const res = await gw.http.post('/api/v1/enrollments', { model: descriptor, serial, ...(manufacturer ? { manufacturer } : {}) }, { token: account.operator });
  expect(res.status, res.text).toBe(201);
  return res.body.thing_id;
}
