import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ManualClock } from '../../src/lib/clock.js';
import { DomainError } from '../../src/lib/errors.js';
import { startTestGateway, type TestGateway } from '../helpers/gateway.js';
import { createAccount } from '../helpers/accounts.js';
import { addMember, createOrganization, elevate, platformToken, waitLeave } from './helpers.js';

/**
 * The lifecycle columns of quota requests and leaves are projections of their actors, written by
 * the actor store with the time of the gateway's clock (a ManualClock here), never by the services.
 */
let gw: TestGateway;
let platform: string;
const clock = new ManualClock();
const HOUR = 3_600_000;

beforeAll(async () => {
  gw = await startTestGateway({}, { clock });
  platform = await platformToken(gw);
});
afterAll(async () => {
  await gw?.close();
});

const requestRow = async (id: string) => (await gw.db.sql`select status, decided_at, decided_by, decision_reason, created_at from quota_requests where id = ${id}`)[0];
const actorOf = async (type: string, id: string) => (await gw.db.sql`select state, snapshot from actors where type = ${type} and id = ${id}`)[0];
const iso = (d: Date | null) => (d ? d.toISOString() : null);

describe('quota request projection', () => {
  it('the row follows the machine on create, deny and approve, at the clock time', async () => {
    const acc = await createAccount(gw);
    clock.advance(HOUR);
    const submittedAt = clock.now().toISOString();
    const a = await gw.http.post('/api/v1/accounts/me/quota-requests', { quota_code: 'scps-per-organization', desired_value: 20_000 }, { token: acc.admin });
    expect(a.status, a.text).toBe(201);
    const created = await requestRow(a.body.id);
    expect({ ...created, created_at: iso(created.created_at) }).toEqual({ status: 'pending', decided_at: null, decided_by: null, decision_reason: null, created_at: submittedAt });

    clock.advance(HOUR);
    const deniedAt = clock.now().toISOString();
    const denied = await gw.http.put(`/api/v1/quota-requests/${a.body.id}/deny`, { reason: 'not this quarter' }, { token: platform });
    expect(denied.status, denied.text).toBe(200);
    expect(denied.body).toMatchObject({ status: 'denied', decided_at: deniedAt, decided_by: 'quota-reviewer', decision_reason: 'not this quarter' });
    const row = await requestRow(a.body.id);
    expect({ ...row, decided_at: iso(row.decided_at) }).toMatchObject({ status: 'denied', decided_at: deniedAt, decided_by: 'quota-reviewer', decision_reason: 'not this quarter' });
    const actor = await actorOf('quotaRequest', a.body.id);
    expect(actor.state).toBe(row.status);
    expect(actor.snapshot.context).toMatchObject({ decidedAt: deniedAt, decidedBy: 'quota-reviewer', decisionReason: 'not this quarter' });

    const b = await gw.http.post('/api/v1/accounts/me/quota-requests', { quota_code: 'scps-per-organization', desired_value: 15_000 }, { token: acc.admin });
    clock.advance(HOUR);
    const approved = await gw.http.put(`/api/v1/quota-requests/${b.body.id}/approve`, undefined, { token: platform });
    expect(approved.body).toMatchObject({ status: 'approved', decided_at: clock.now().toISOString(), decision_reason: null });
    expect((await requestRow(b.body.id)).status).toBe('approved');
  });

  it('a cancellation by the organization is projected; the machine refuses a second one (409)', async () => {
    const { org, management } = await createOrganization(gw);
    const req = await gw.http.post(`/api/v1/organizations/${org}/quota-requests`, { quota_code: 'scps-per-organization', desired_value: 12_000 }, { token: management.admin });
    clock.advance(HOUR);
    const del = await gw.http.delete(`/api/v1/organizations/${org}/quota-requests/${req.body.id}`, { token: management.admin });
    expect(del.body).toMatchObject({ status: 'cancelled', decided_at: clock.now().toISOString(), decision_reason: null });
    expect((await requestRow(req.body.id)).status).toBe('cancelled');
    expect((await gw.http.delete(`/api/v1/organizations/${org}/quota-requests/${req.body.id}`, { token: management.admin })).status).toBe(409);
  });

  it('the machine decides that a denial needs a reason: refused, nothing written', async () => {
    const acc = await createAccount(gw);
    const req = await gw.http.post('/api/v1/accounts/me/quota-requests', { quota_code: 'scps-per-organization', desired_value: 20_000 }, { token: acc.admin });
    const caller = { sub: 'quota-reviewer', roles: ['platform-admin'], platform: true };
    const err = await gw.testHooks.quotas.decideRequest(req.body.id, 'denied', caller, '   ').catch((e) => e);
    expect(err).toBeInstanceOf(DomainError);
    expect(err).toMatchObject({ kind: 'invalid', detail: 'a reason is required to deny a request' });
    expect(await requestRow(req.body.id)).toMatchObject({ status: 'pending', decided_at: null });
    expect((await actorOf('quotaRequest', req.body.id)).state).toBe('pending');
  });
});

describe('leave projection', () => {
  it('organization_leaves follows the leave actor; the membership shows leaving while it is unfinished', async () => {
    const { org, management } = await createOrganization(gw);
    await elevate(gw, org, management, 'scps-per-organization', 12_000);
    const member = await addMember(gw, org, management);
    clock.advance(HOUR);
    const startedAt = clock.now().toISOString();
    const res = await gw.http.delete(`/api/v1/organizations/${org}/members/${member.id}`, { token: member.admin });
    expect(res.status, res.text).toBe(202);
    const leave = await waitLeave(gw, org, res.body.id, member.viewer, ['awaitingDecisions']);
    const [row] = await gw.db.sql`select state, started_at, finished_at, account_id from organization_leaves where id = ${leave.id}`;
    expect({ ...row, started_at: iso(row.started_at) }).toEqual({ state: 'awaitingDecisions', started_at: startedAt, finished_at: null, account_id: member.id });
    const members = await gw.http.get(`/api/v1/organizations/${org}/members`, { token: management.viewer });
    expect(members.body.items.find((m: any) => m.account_id === member.id)).toMatchObject({ status: 'leaving', leave_id: leave.id });
    // one unfinished leave per account, also in the database
    await expect(gw.db.sql`insert into organization_leaves (id, organization_id, account_id, started_at) values (gen_random_uuid(), ${org}, ${member.id}, now())`).rejects.toThrow(/organization_leaves_unfinished/);

    clock.advance(HOUR);
    const departedAt = clock.now().toISOString();
    expect((await gw.http.put(`/api/v1/quota-requests/${leave.request_ids[0]}/approve`, undefined, { token: platform })).status).toBe(200);
    const done = await waitLeave(gw, org, leave.id, member.viewer, ['departed']);
    expect(done.finished_at).toBe(departedAt);
    const [after] = await gw.db.sql`select state, finished_at from organization_leaves where id = ${leave.id}`;
    expect({ state: after.state, finished_at: iso(after.finished_at) }).toEqual({ state: 'departed', finished_at: departedAt });
    expect((await actorOf('organizationLeave', leave.id)).state).toBe('departed');
  });
});
