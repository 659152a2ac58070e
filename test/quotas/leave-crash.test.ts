import crypto from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { TestDatabase } from '../helpers/db.js';
import type { HttpClient } from '../helpers/gateway.js';
import { waitFor } from '../helpers/wait.js';
import { CrashRig, exited } from '../helpers/crashRig.js';

/**
 * The leave saga survives crashes: the gateway runs as a real child process started by the
 * test-only entry test/helpers/faultyGateway.ts, whose fault hook (from FAULT_INJECT in the
 * child's environment) exits right after a step commits; a restarted process resumes.
 */
let rig: CrashRig;
let db: TestDatabase;
let http: HttpClient;
const startProcess = (fault?: string) => rig.start(fault);
const token = (realm: string, sub: string, roles: string[]) => rig.token(realm, sub, roles);
const output = () => rig.current!.output();

/** The leave's machine state (actors) and its projection (organization_leaves), which must agree. */
async function leaveStates(id?: string): Promise<{ id: string; state: string; projected: string }[]> {
  return db.sql<{ id: string; state: string; projected: string }[]>`
    select a.id, a.state, l.state as projected from actors a join organization_leaves l on l.id = a.id::uuid
    where a.type = 'organizationLeave' ${id ? db.sql`and a.id = ${id}` : db.sql``}`;
}

/**
 * A management account with an organization whose raised quotas (approved by the platform) a
 * member account's leave must seed, and that member: what both crash tests start from.
 */
async function organizationWithMember(name: string, raised: [code: string, value: number][]) {
  const platform = await token('platform', 'crash-admin', ['platform-admin']);
  const mgmt = crypto.randomUUID();
  const member = crypto.randomUUID();
  for (const id of [mgmt, member]) expect((await http.post('/platform/v1/accounts', { id, name: id }, { token: platform })).status).toBe(201);
  const mgmtAdmin = await token(`acc-${mgmt}`, 'boss', ['admin']);
  const memberAdmin = await token(`acc-${member}`, 'leaver', ['admin']);
  const org = (await http.post('/api/v1/organizations', { name }, { token: mgmtAdmin })).body.id;
  for (const [code, value] of raised) {
    const req = await http.post(`/api/v1/organizations/${org}/quota-requests`, { quota_code: code, desired_value: value }, { token: mgmtAdmin });
    expect(req.status).toBe(201);
    expect((await http.put(`/api/v1/quota-requests/${req.body.id}/approve`, undefined, { token: platform })).status).toBe(200);
  }
  expect((await http.post(`/api/v1/organizations/${org}/members`, { account_id: member }, { token: mgmtAdmin })).status).toBe(201);
  return { platform, mgmt, mgmtAdmin, member, memberAdmin, org };
}

beforeAll(async () => {
  rig = await CrashRig.create('quotas-crash');
  db = rig.db;
  http = rig.http;
});
afterAll(async () => {
  await rig?.close();
});

describe('leave saga durability', () => {
  it('crashes after the leave starts and after the last approval, restarts twice, and converges to departed', async () => {
    // process 1: set up, then crash right after the leave's first transaction commits
    let p = await startProcess('leave-after-start');
    const { platform, mgmt, mgmtAdmin, member, memberAdmin, org } = await organizationWithMember('crashy', [['member-accounts-per-organization', 15], ['delegated-administrators-per-organization', 30]]);
    await expect(http.delete(`/api/v1/organizations/${org}/members/${member}`, { token: memberAdmin })).rejects.toThrow();
    expect(await exited(p)).toBe(86);
    expect(output()).toContain('FAULT_INJECT=leave-after-start');
    const [leaveRow] = await leaveStates();
    expect(leaveRow).toMatchObject({ state: 'seeding', projected: 'seeding' });

    // process 2: the start-up sweep resumes seeding; crash right after the final approval commits
    p = await startProcess('leave-after-decision');
    const leave = await waitFor(async () => {
      const r = await http.get(`/api/v1/organizations/${org}/leaves/${leaveRow.id}`, { token: memberAdmin });
      return r.body.state === 'awaitingDecisions' ? r.body : undefined;
    }, 30_000, 'seeding resumed');
    expect(leave.request_ids).toHaveLength(2);
    const queue = await http.get('/api/v1/quota-requests?page=0&size=20', { token: platform });
    expect(queue.body.items.filter((r: any) => r.leave_request_account_id === member)).toHaveLength(2);
    expect((await http.put(`/api/v1/quota-requests/${leave.request_ids[0]}/approve`, undefined, { token: platform })).status).toBe(200);
    await expect(http.put(`/api/v1/quota-requests/${leave.request_ids[1]}/approve`, undefined, { token: platform })).rejects.toThrow();
    expect(await exited(p)).toBe(86);
    const [mid] = await leaveStates(leaveRow.id);
    expect(mid).toMatchObject({ state: 'departing', projected: 'departing' });

    // still a member, leaving: the leave is unfinished
    const [stillMember] = await db.sql`select l.id from organization_members m join organization_leaves l on l.account_id = m.account_id and l.finished_at is null
      where m.account_id = ${member}`;
    expect(stillMember.id).toBe(leaveRow.id);

    // process 3: no fault; the departure step resumes and the account leaves with its elevated values
    await startProcess();
    const done = await waitFor(async () => {
      const r = await http.get(`/api/v1/organizations/${org}/leaves/${leaveRow.id}`, { token: memberAdmin });
      return r.body.state === 'departed' ? r.body : undefined;
    }, 30_000, 'departure resumed');
    expect(done.outcome).toBe('departed');
    expect((await http.get('/api/v1/accounts/me/organization', { token: memberAdmin })).status).toBe(404);
    const quotas = await http.get('/api/v1/accounts/me/quotas', { token: memberAdmin });
    expect(quotas.body.scope).toBe('account');
    const by = Object.fromEntries(quotas.body.items.map((q: any) => [q.quota_code, q.applied_value]));
    expect(by['member-accounts-per-organization']).toBe(15);
    expect(by['delegated-administrators-per-organization']).toBe(30);
    const members = await http.get(`/api/v1/organizations/${org}/members`, { token: mgmtAdmin });
    expect(members.body.items.map((m: any) => m.account_id)).toEqual([mgmt]);
  });
  it('crashes after seeding and after a denial, and converges to blocked with the account kept', async () => {
    await rig.stop();
    let p = await startProcess('leave-after-seed');
    const { platform, member, memberAdmin, org } = await organizationWithMember('crashy-2', [['member-accounts-per-organization', 12], ['scps-per-organization', 12_000]]);
    const started = await http.delete(`/api/v1/organizations/${org}/members/${member}`, { token: memberAdmin });
    expect(started.status).toBe(202);
    const leaveId = started.body.id;
    // the seeding job commits, then the process dies
    expect(await exited(p)).toBe(86);
    expect(output()).toContain('FAULT_INJECT=leave-after-seed');

    p = await startProcess('leave-after-decision');
    const leave = (await http.get(`/api/v1/organizations/${org}/leaves/${leaveId}`, { token: memberAdmin })).body;
    expect(leave.state).toBe('awaitingDecisions');
    await expect(http.put(`/api/v1/quota-requests/${leave.request_ids[0]}/deny`, { reason: 'keep the capacity' }, { token: platform })).rejects.toThrow();
    expect(await exited(p)).toBe(86);
    const [mid] = await leaveStates(leaveId);
    expect(mid).toMatchObject({ state: 'blocking', projected: 'blocking' });

    await startProcess();
    const done = await waitFor(async () => {
      const r = await http.get(`/api/v1/organizations/${org}/leaves/${leaveId}`, { token: memberAdmin });
      return r.body.state === 'blocked' ? r.body : undefined;
    }, 30_000, 'unblock resumed');
    expect(done.outcome).toBe('blocked');
    const me = await http.get('/api/v1/accounts/me/organization', { token: memberAdmin });
    expect(me.body).toMatchObject({ id: org, membership: { status: 'active' } });
    const second = await http.get(`/api/v1/quota-requests/${leave.request_ids[1]}`, { token: platform });
    expect(second.body.status).toBe('cancelled');
    const [n] = await db.sql`select count(*)::int as n from quotas where account_id = ${member}`;
    expect(n.n).toBe(0);
    const events = await db.sql`select account_id, payload from domain_events where type = 'organization.leaveBlocked' and actor_id = ${leaveId}`;
    expect(events).toHaveLength(1);
    expect(events[0].account_id).toBe(member);
  });
});
