import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { expectProblem, startTestGateway, type TestGateway } from '../helpers/gateway.js';
import { createAccount } from '../helpers/accounts.js';
import { addMember, createOrganization, elevate, platformToken, waitLeave } from './helpers.js';

let gw: TestGateway;
let platform: string;

beforeAll(async () => {
  gw = await startTestGateway();
  platform = await platformToken(gw);
});
afterAll(async () => {
  await gw?.close();
});

const CODES = [
  'member-accounts-per-organization', 'organizational-units-per-organization', 'ou-nesting-depth', 'scps-per-organization',
  'scps-attached-per-entity', 'scp-document-size', 'delegated-administrators-per-organization',
];

describe('quota defaults and standalone quotas', () => {
  it('serves the platform defaults table', async () => {
    const acc = await createAccount(gw);
    const res = await gw.http.get('/api/v1/quotas/defaults', { token: acc.viewer });
    expect(res.status).toBe(200);
    expect(res.body.items.map((d: any) => d.quota_code)).toEqual(CODES);
    expect(res.body.items.find((d: any) => d.quota_code === 'scp-document-size')).toMatchObject({ service_code: 'organizations', default_value: 5120, max_value: 5120, adjustable: false });
    expect(res.body.items.find((d: any) => d.quota_code === 'member-accounts-per-organization')).toMatchObject({ default_value: 10, max_value: null, adjustable: true });
  });

  it('rule 1: a standalone account is seeded with the platform defaults on first access', async () => {
    const acc = await createAccount(gw);
    const [before] = await gw.db.sql`select count(*)::int as n from quotas where account_id = ${acc.id}`;
    expect(before.n).toBe(0);
    const res = await gw.http.get('/api/v1/accounts/me/quotas', { token: acc.viewer });
    expect(res.status).toBe(200);
    expect(res.body).toMatchObject({ scope: 'account', account_id: acc.id, organization_id: null });
    expect(res.body.items).toHaveLength(7);
    for (const q of res.body.items) expect(q.applied_value).toBe(q.default_value);
    const [after] = await gw.db.sql`select count(*)::int as n from quotas where account_id = ${acc.id}`;
    expect(after.n).toBe(7);
    expect(await gw.testHooks.quotas.limit(acc.id, 'organizations', 'scps-attached-per-entity')).toBe(5);
  });

  it('refuses bad increase requests with clear 4xx problems', async () => {
    const acc = await createAccount(gw);
    const post = (body: unknown, token = acc.admin) => gw.http.post('/api/v1/accounts/me/quota-requests', body, { token });
    expect(expectProblem(await post({ quota_code: 'ou-nesting-depth', desired_value: 6 }), 422).detail).toMatch(/not adjustable/);
    expect(expectProblem(await post({ quota_code: 'scp-document-size', desired_value: 10_000 }), 422).detail).toMatch(/scp-document-size/);
    expect(expectProblem(await post({ quota_code: 'member-accounts-per-organization', desired_value: 10 }), 422).detail).toMatch(/greater than the applied value 10/);
    expect(expectProblem(await post({ quota_code: 'no-such-quota', desired_value: 10 }), 404).detail).toMatch(/unknown quota/);
    expectProblem(await post({ quota_code: 'member-accounts-per-organization', desired_value: -1 }), 400);
    expectProblem(await post({ quota_code: 'member-accounts-per-organization', desired_value: 20, extra: 1 }), 400);
    expectProblem(await post({ quota_code: 'member-accounts-per-organization', desired_value: 20 }, acc.operator), 403);

    const ok = await post({ quota_code: 'member-accounts-per-organization', desired_value: 20, reason: 'more members' });
    expect(ok.status).toBe(201);
    expect(ok.body).toMatchObject({ status: 'pending', kind: 'account', leave_request_account_id: null, desired_value: 20 });
    expectProblem(await post({ quota_code: 'member-accounts-per-organization', desired_value: 30 }), 409);

    // deny needs a reason; tenants cannot decide
    expect(expectProblem(await gw.http.put(`/api/v1/quota-requests/${ok.body.id}/deny`, {}, { token: platform }), 400).detail).toMatch(/reason/);
    expectProblem(await gw.http.put(`/api/v1/quota-requests/${ok.body.id}/deny`, { reason: '   ' }, { token: platform }), 400);
    expectProblem(await gw.http.put(`/api/v1/quota-requests/${ok.body.id}/approve`, undefined, { token: acc.admin }), 403);
    expectProblem(await gw.http.put(`/api/v1/quota-requests/00000000-0000-4000-8000-000000000000/approve`, undefined, { token: platform }), 404);
    expectProblem(await gw.http.get('/api/v1/quota-requests?size=1000', { token: platform }), 400);

    expectProblem(await gw.http.put(`/api/v1/quota-requests/${ok.body.id}/deny`, undefined, { token: platform }), 400);
    const denied = await gw.http.put(`/api/v1/quota-requests/${ok.body.id}/deny`, { reason: 'not justified' }, { token: platform });
    expect(denied.status).toBe(200);
    expect(denied.body).toMatchObject({ status: 'denied', decision_reason: 'not justified' });
    expect(expectProblem(await gw.http.put(`/api/v1/quota-requests/${ok.body.id}/approve`, undefined, { token: platform }), 409).detail).toMatch(/denied/);
    const [ev] = await gw.db.sql`select account_id, payload from domain_events where type = 'quotaRequest.decided' and actor_id = ${ok.body.id}`;
    expect(ev.account_id).toBe(acc.id);
    expect(ev.payload).toMatchObject({ requestId: ok.body.id, decision: 'denied', reason: 'not justified', quotaCode: 'member-accounts-per-organization', desiredValue: 20 });
  });

  it('approval raises the applied value; the queue lists pending requests', async () => {
    const acc = await createAccount(gw);
    const req = await gw.http.post('/api/v1/accounts/me/quota-requests', { quota_code: 'scps-per-organization', desired_value: 20_000 }, { token: acc.admin });
    expect(req.status).toBe(201);
    const queue = await gw.http.get('/api/v1/quota-requests?page=0&size=100', { token: platform });
    expect(queue.status).toBe(200);
    expect(queue.body.items.some((r: any) => r.id === req.body.id && r.leave_gated === false)).toBe(true);
    expect(queue.body.items.every((r: any) => r.status === 'pending')).toBe(true);
    const ok = await gw.http.put(`/api/v1/quota-requests/${req.body.id}/approve`, undefined, { token: platform });
    expect(ok.body.status).toBe('approved');
    const quotas = await gw.http.get('/api/v1/accounts/me/quotas', { token: acc.viewer });
    expect(quotas.body.items.find((q: any) => q.quota_code === 'scps-per-organization').applied_value).toBe(20_000);
    const mine = await gw.http.get('/api/v1/accounts/me/quota-requests', { token: acc.viewer });
    expect(mine.body).toMatchObject({ total: 1, page: 0, size: 20 });
  });
});

describe('organizations', () => {
  it('rule 2: org defaults seeded, the greater of default and approved value taken, standalone records deleted', async () => {
    const acc = await createAccount(gw);
    const req = await gw.http.post('/api/v1/accounts/me/quota-requests', { quota_code: 'member-accounts-per-organization', desired_value: 15 }, { token: acc.admin });
    await gw.http.put(`/api/v1/quota-requests/${req.body.id}/approve`, undefined, { token: platform });
    const created = await gw.http.post('/api/v1/organizations', { name: 'acme' }, { token: acc.admin });
    expect(created.status).toBe(201);
    expect(created.body).toMatchObject({ name: 'acme', management_account_id: acc.id, member_count: 1 });
    const org = created.body.id;
    const quotas = await gw.http.get(`/api/v1/organizations/${org}/quotas`, { token: acc.viewer });
    expect(quotas.status).toBe(200);
    const by = Object.fromEntries(quotas.body.items.map((q: any) => [q.quota_code, q]));
    expect(by['member-accounts-per-organization']).toMatchObject({ applied_value: 15, default_value: 10, scope: 'organization', organization_id: org });
    expect(by['delegated-administrators-per-organization'].applied_value).toBe(20);
    const [n] = await gw.db.sql`select count(*)::int as n from quotas where account_id = ${acc.id}`;
    expect(n.n).toBe(0);
    const one = await gw.http.get(`/api/v1/organizations/${org}/quotas/member-accounts-per-organization`, { token: acc.viewer });
    expect(one.body.applied_value).toBe(15);
    const byId = await gw.http.get(`/api/v1/organizations/${org}/quotas/${one.body.id}`, { token: acc.viewer });
    expect(byId.body.quota_code).toBe('member-accounts-per-organization');
    // a member cannot create another organization
    expectProblem(await gw.http.post('/api/v1/organizations', { name: 'again' }, { token: acc.admin }), 409);
    // outsiders do not see it
    const outsider = await createAccount(gw);
    expectProblem(await gw.http.get(`/api/v1/organizations/${org}/quotas`, { token: outsider.admin }), 404);
  });

  it('rule 7: a member account uses the organization quotas', async () => {
    const { org, management } = await createOrganization(gw);
    await elevate(gw, org, management, 'scps-per-organization', 12_000);
    const member = await addMember(gw, org, management);
    const mine = await gw.http.get('/api/v1/accounts/me/quotas', { token: member.viewer });
    expect(mine.body).toMatchObject({ scope: 'organization', organization_id: org });
    expect(mine.body.items.find((q: any) => q.quota_code === 'scps-per-organization').applied_value).toBe(12_000);
    expect(await gw.testHooks.quotas.limit(member.id, 'organizations', 'scps-per-organization')).toBe(12_000);
    const [n] = await gw.db.sql`select count(*)::int as n from quotas where account_id = ${member.id}`;
    expect(n.n).toBe(0);
    // members request through the organization, not as standalone accounts
    expectProblem(await gw.http.post('/api/v1/accounts/me/quota-requests', { quota_code: 'scps-per-organization', desired_value: 20_000 }, { token: member.admin }), 409);
    // only the management account manages the organization's requests
    expectProblem(await gw.http.post(`/api/v1/organizations/${org}/quota-requests`, { quota_code: 'scps-per-organization', desired_value: 20_000 }, { token: member.admin }), 403);
    const me = await gw.http.get('/api/v1/accounts/me/organization', { token: member.viewer });
    expect(me.body).toMatchObject({ id: org, membership: { status: 'active', management: false } });
  });

  it('enforces member-accounts-per-organization (409 naming the quota)', async () => {
    const { org, management } = await createOrganization(gw);
    for (let i = 0; i < 9; i++) await addMember(gw, org, management);
    const extra = await createAccount(gw);
    const res = await gw.http.post(`/api/v1/organizations/${org}/members`, { account_id: extra.id }, { token: management.admin });
    const p = expectProblem(res, 409);
    expect(p.quota_code).toBe('member-accounts-per-organization');
    expect(p.detail).toMatch(/member-accounts-per-organization/);
    await elevate(gw, org, management, 'member-accounts-per-organization', 11);
    const ok = await gw.http.post(`/api/v1/organizations/${org}/members`, { account_id: extra.id }, { token: management.admin });
    expect(ok.status).toBe(201);
  });

  it('concurrent additions never exceed member-accounts-per-organization', async () => {
    const { org, management } = await createOrganization(gw);
    for (let i = 0; i < 8; i++) await addMember(gw, org, management);
    const candidates = await Promise.all([createAccount(gw), createAccount(gw), createAccount(gw)]);
    const results = await Promise.all(candidates.map((c) => gw.http.post(`/api/v1/organizations/${org}/members`, { account_id: c.id }, { token: management.admin })));
    expect(results.map((r) => r.status).sort()).toEqual([201, 409, 409]);
    const members = await gw.http.get(`/api/v1/organizations/${org}/members`, { token: management.viewer });
    expect(members.body.items).toHaveLength(10);
  });

  it('organization requests can be cancelled by the organization', async () => {
    const { org, management } = await createOrganization(gw);
    const req = await gw.http.post(`/api/v1/organizations/${org}/quota-requests`, { quota_code: 'organizational-units-per-organization', desired_value: 3000 }, { token: management.admin });
    expect(req.status).toBe(201);
    expect(req.body).toMatchObject({ kind: 'organization', organization_id: org, account_id: management.id });
    const del = await gw.http.delete(`/api/v1/organizations/${org}/quota-requests/${req.body.id}`, { token: management.admin });
    expect(del.status).toBe(200);
    expect(del.body.status).toBe('cancelled');
    expectProblem(await gw.http.delete(`/api/v1/organizations/${org}/quota-requests/${req.body.id}`, { token: management.admin }), 409);
    expectProblem(await gw.http.put(`/api/v1/quota-requests/${req.body.id}/approve`, undefined, { token: platform }), 409);
    const list = await gw.http.get(`/api/v1/organizations/${org}/quota-requests`, { token: management.viewer });
    expect(list.body.items.map((r: any) => r.status)).toEqual(['cancelled']);
  });
});

describe('leaving an organization', () => {
  it('rule 3: no elevated quota: the account leaves at once', async () => {
    const { org, management } = await createOrganization(gw);
    const member = await addMember(gw, org, management);
    expectProblem(await gw.http.delete(`/api/v1/organizations/${org}/members/${management.id}`, { token: management.admin }), 409);
    const res = await gw.http.delete(`/api/v1/organizations/${org}/members/${member.id}`, { token: member.admin });
    expect(res.status, res.text).toBe(200);
    expect(res.body).toMatchObject({ outcome: 'departed', state: 'departed', initiated_as: 'leave', request_ids: [] });
    expectProblem(await gw.http.get('/api/v1/accounts/me/organization', { token: member.viewer }), 404);
    const mine = await gw.http.get('/api/v1/accounts/me/quotas', { token: member.viewer });
    expect(mine.body.scope).toBe('account');
    for (const q of mine.body.items) expect(q.applied_value).toBe(q.default_value);
    // removal by the management account works the same way
    const other = await addMember(gw, org, management);
    const removed = await gw.http.delete(`/api/v1/organizations/${org}/members/${other.id}`, { token: management.admin });
    expect(removed.body).toMatchObject({ outcome: 'departed', initiated_as: 'remove' });
  });

  it('rules 4 and 5: elevated quotas gate the leave; all approved -> departs with the elevated values', async () => {
    const { org, management } = await createOrganization(gw);
    await elevate(gw, org, management, 'member-accounts-per-organization', 15);
    await elevate(gw, org, management, 'delegated-administrators-per-organization', 30);
    const member = await addMember(gw, org, management);
    const res = await gw.http.delete(`/api/v1/organizations/${org}/members/${member.id}`, { token: member.admin });
    expect(res.status, res.text).toBe(202);
    expect(res.body.outcome).toBe('pending');
    const leave = await waitLeave(gw, org, res.body.id, member.viewer, ['awaitingDecisions']);
    expect(leave.request_ids).toHaveLength(2);
    // standalone defaults seeded; still a member (status leaving) using the organization's quotas
    const [n] = await gw.db.sql`select count(*)::int as n from quotas where account_id = ${member.id}`;
    expect(n.n).toBe(7);
    const me = await gw.http.get('/api/v1/accounts/me/organization', { token: member.viewer });
    expect(me.body.membership).toMatchObject({ status: 'leaving', leave_id: res.body.id });
    expect(await gw.testHooks.quotas.limit(member.id, 'organizations', 'member-accounts-per-organization')).toBe(15);
    // in the platform admin queue, tagged, with an auto-generated reason
    const queue = await gw.http.get('/api/v1/quota-requests?page=0&size=100', { token: platform });
    const mine = queue.body.items.filter((r: any) => r.leave_request_account_id === member.id);
    expect(mine).toHaveLength(2);
    for (const r of mine) {
      expect(r).toMatchObject({ kind: 'leave', leave_gated: true, account_id: member.id, organization_id: org, status: 'pending' });
      expect(r.reason).toMatch(/is leaving organization/);
    }
    expect(mine.map((r: any) => [r.quota_code, r.desired_value]).sort()).toEqual([['delegated-administrators-per-organization', 30], ['member-accounts-per-organization', 15]]);
    // the organization cannot cancel them; a second leave is refused while this one runs
    expectProblem(await gw.http.delete(`/api/v1/organizations/${org}/quota-requests/${mine[0].id}`, { token: management.admin }), 409);
    expectProblem(await gw.http.delete(`/api/v1/organizations/${org}/members/${member.id}`, { token: member.admin }), 409);

    await gw.http.put(`/api/v1/quota-requests/${mine[0].id}/approve`, undefined, { token: platform });
    expect((await gw.http.get('/api/v1/accounts/me/organization', { token: member.viewer })).status).toBe(200);
    await gw.http.put(`/api/v1/quota-requests/${mine[1].id}/approve`, undefined, { token: platform });
    const done = await waitLeave(gw, org, res.body.id, member.viewer, ['departed']);
    expect(done.outcome).toBe('departed');
    expectProblem(await gw.http.get('/api/v1/accounts/me/organization', { token: member.viewer }), 404);
    const quotas = await gw.http.get('/api/v1/accounts/me/quotas', { token: member.viewer });
    expect(quotas.body.scope).toBe('account');
    const by = Object.fromEntries(quotas.body.items.map((q: any) => [q.quota_code, q.applied_value]));
    expect(by['member-accounts-per-organization']).toBe(15);
    expect(by['delegated-administrators-per-organization']).toBe(30);
    expect(by['scps-per-organization']).toBe(10_000);
  });

  it('rule 6: a denial cancels the other leave requests, cleans up, keeps the account and records leaveBlocked', async () => {
    const { org, management } = await createOrganization(gw);
    await elevate(gw, org, management, 'member-accounts-per-organization', 15);
    await elevate(gw, org, management, 'scps-per-organization', 20_000);
    const member = await addMember(gw, org, management);
    const res = await gw.http.delete(`/api/v1/organizations/${org}/members/${member.id}`, { token: management.admin });
    expect(res.status).toBe(202);
    const leave = await waitLeave(gw, org, res.body.id, member.viewer, ['awaitingDecisions']);
    const [first, second] = leave.request_ids;
    const denied = await gw.http.put(`/api/v1/quota-requests/${first}/deny`, { reason: 'capacity reserved for the organization' }, { token: platform });
    expect(denied.status).toBe(200);
    const other = await gw.http.get(`/api/v1/quota-requests/${second}`, { token: platform });
    expect(other.body.status).toBe('cancelled');
    const blocked = await waitLeave(gw, org, res.body.id, member.viewer, ['blocked']);
    expect(blocked.outcome).toBe('blocked');
    const me = await gw.http.get('/api/v1/accounts/me/organization', { token: member.viewer });
    expect(me.body).toMatchObject({ id: org, membership: { status: 'active', leave_id: null } });
    const [n] = await gw.db.sql`select count(*)::int as n from quotas where account_id = ${member.id}`;
    expect(n.n).toBe(0);
    const [ev] = await gw.db.sql`select account_id, payload from domain_events where type = 'organization.leaveBlocked' and actor_id = ${res.body.id}`;
    expect(ev.account_id).toBe(member.id);
    expect(ev.payload).toMatchObject({ organizationId: org, accountId: member.id, deniedRequestIds: [first] });
    expect(ev.payload.reason).toMatch(/capacity reserved/);
    // the account may try again later
    const again = await gw.http.delete(`/api/v1/organizations/${org}/members/${member.id}`, { token: member.admin });
    expect(again.status).toBe(202);
  });

  it('concurrent approve and deny of the leave requests of one account give one consistent outcome', async () => {
    for (let round = 0; round < 3; round++) {
      const { org, management } = await createOrganization(gw);
      await elevate(gw, org, management, 'member-accounts-per-organization', 15);
      await elevate(gw, org, management, 'scps-per-organization', 20_000);
      const member = await addMember(gw, org, management);
      const res = await gw.http.delete(`/api/v1/organizations/${org}/members/${member.id}`, { token: member.admin });
      const leave = await waitLeave(gw, org, res.body.id, member.viewer, ['awaitingDecisions']);
      const [a, b] = leave.request_ids;
      const [approve, deny] = await Promise.all([
        gw.http.put(`/api/v1/quota-requests/${a}/approve`, undefined, { token: platform }),
        gw.http.put(`/api/v1/quota-requests/${b}/deny`, { reason: 'no' }, { token: platform }),
      ]);
      expect(deny.status, deny.text).toBe(200);
      expect([200, 409], approve.text).toContain(approve.status);
      const done = await waitLeave(gw, org, res.body.id, member.viewer, ['blocked', 'departed']);
      expect(done.state).toBe('blocked');
      const statusA = (await gw.http.get(`/api/v1/quota-requests/${a}`, { token: platform })).body.status;
      expect(statusA).toBe(approve.status === 200 ? 'approved' : 'cancelled');
      const me = await gw.http.get('/api/v1/accounts/me/organization', { token: member.viewer });
      expect(me.body.membership.status).toBe('active');
      const [pending] = await gw.db.sql`select count(*)::int as n from quota_requests where leave_id = ${res.body.id} and status = 'pending'`;
      expect(pending.n).toBe(0);
      const [n] = await gw.db.sql`select count(*)::int as n from quotas where account_id = ${member.id}`;
      expect(n.n).toBe(0);
    }
  });

  it('concurrent approvals of all leave requests depart exactly once', async () => {
    const { org, management } = await createOrganization(gw);
    await elevate(gw, org, management, 'member-accounts-per-organization', 15);
    await elevate(gw, org, management, 'scps-per-organization', 20_000);
    await elevate(gw, org, management, 'organizational-units-per-organization', 2500);
    const member = await addMember(gw, org, management);
    const res = await gw.http.delete(`/api/v1/organizations/${org}/members/${member.id}`, { token: member.admin });
    const leave = await waitLeave(gw, org, res.body.id, member.viewer, ['awaitingDecisions']);
    const results = await Promise.all(leave.request_ids.map((id: string) => gw.http.put(`/api/v1/quota-requests/${id}/approve`, undefined, { token: platform })));
    expect(results.map((r) => r.status)).toEqual([200, 200, 200]);
    await waitLeave(gw, org, res.body.id, member.viewer, ['departed']);
    const [ev] = await gw.db.sql`select count(*)::int as n from domain_events where type = 'organization.memberDeparted' and actor_id = ${res.body.id}`;
    expect(ev.n).toBe(1);
  });
});

describe('OpenAPI', () => {
  it('documents the quota and organization routes', async () => {
    const res = await gw.http.get('/docs/json');
    expect(res.status).toBe(200);
    for (const p of ['/api/v1/quotas/defaults', '/api/v1/accounts/me/quotas', '/api/v1/quota-requests', '/api/v1/quota-requests/{requestId}/deny', '/api/v1/organizations/{orgId}/members/{accountId}']) {
      expect(Object.keys(res.body.paths)).toContain(p);
    }
  });
});
