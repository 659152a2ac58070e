import { expect } from 'vitest';
import type { TestGateway } from '../helpers/gateway.js';
import { createAccount, type TestAccount } from '../helpers/accounts.js';
import { waitFor } from '../helpers/wait.js';

export const platformToken = (gw: TestGateway) => gw.token({ realm: 'platform', sub: 'quota-reviewer', roles: ['platform-admin'] });

/** A standalone account that creates an organization; returns both. */
export async function createOrganization(gw: TestGateway, name = 'org'): Promise<{ org: string; management: TestAccount }> {
  const management = await createAccount(gw);
  const res = await gw.http.post('/api/v1/organizations', { name }, { token: management.admin });
  expect(res.status, res.text).toBe(201);
  return { org: res.body.id, management };
}

export async function addMember(gw: TestGateway, org: string, management: TestAccount): Promise<TestAccount> {
  const member = await createAccount(gw);
  const res = await gw.http.post(`/api/v1/organizations/${org}/members`, { account_id: member.id }, { token: management.admin });
  expect(res.status, res.text).toBe(201);
  return member;
}

/** Raises an organization quota through a request approved by a platform admin. */
export async function elevate(gw: TestGateway, org: string, management: TestAccount, quotaCode: string, value: number): Promise<void> {
  const req = await gw.http.post(`/api/v1/organizations/${org}/quota-requests`, { quota_code: quotaCode, desired_value: value, reason: 'growth' }, { token: management.admin });
  expect(req.status, req.text).toBe(201);
  const ok = await gw.http.put(`/api/v1/quota-requests/${req.body.id}/approve`, undefined, { token: await platformToken(gw) });
  expect(ok.status, ok.text).toBe(200);
}

export async function waitLeave(gw: TestGateway, org: string, leaveId: string, token: string, states: string[]): Promise<any> {
  return waitFor(async () => {
    const res = await gw.http.get(`/api/v1/organizations/${org}/leaves/${leaveId}`, { token });
    return states.includes(res.body?.state) ? res.body : undefined;
  }, 20_000, `leave ${leaveId} in ${states.join('|')}`);
}
