import crypto from 'node:crypto';
import type { ActorKind, UnitOfWork } from '../actors/store.js';
import type { Gateway, QuotaGate } from '../gateway.js';
import { conflict, notFound, refused, unprocessable } from '../lib/errors.js';
import { isUuid } from '../http/auth/principal.js';
import { quotaRequestMachine, type QuotaRequestKind } from '../../machines/quotaRequest.js';
import { organizationLeaveMachine, type OrganizationLeaveContext } from '../../machines/organizationLeave.js';
import { repo, type QuotaRow, type RequestRow, type OrganizationRow, type MemberRow } from './repo.js';

export const requestKind: ActorKind<typeof quotaRequestMachine> = {
  type: 'quotaRequest', machine: quotaRequestMachine, accountOf: (c) => c.accountId,
};
export const leaveKind: ActorKind<typeof organizationLeaveMachine> = {
  type: 'organizationLeave', machine: organizationLeaveMachine, accountOf: (c) => c.accountId,
};

export const ORGANIZATIONS = 'organizations';
export const MEMBER_QUOTA = 'member-accounts-per-organization';
export const LEAVE_STEP_JOB = 'quotas.leave-step';
export const LEAVE_SWEEP_JOB = 'quotas.leave-sweep';

/** Who calls (built by the routes from the principal). */
export interface Caller {
  sub: string;
  accountId?: string;
  roles: string[];
  /** a `platform` realm principal with a platform role */
  platform: boolean;
}

export interface QuotaView {
  id: string;
  service_code: string;
  quota_code: string;
  name: string;
  default_value: number;
  applied_value: number;
  max_value: number | null;
  adjustable: boolean;
  scope: 'account' | 'organization';
  account_id: string | null;
  organization_id: string | null;
  updated_at: string;
}

export interface RequestView {
  id: string;
  kind: QuotaRequestKind;
  status: RequestRow['status'];
  account_id: string;
  organization_id: string | null;
  leave_request_account_id: string | null;
  leave_gated: boolean;
  leave_id: string | null;
  service_code: string;
  quota_code: string;
  desired_value: number;
  reason: string | null;
  decision_reason: string | null;
  decided_by: string | null;
  decided_at: string | null;
  created_by: string | null;
  created_at: string;
}

export interface OrganizationView {
  id: string;
  name: string;
  management_account_id: string;
  member_count: number;
  created_at: string;
}

export interface MemberView {
  account_id: string;
  organization_id: string;
  status: 'active' | 'leaving';
  management: boolean;
  leave_id: string | null;
  joined_at: string;
}

export interface LeaveView {
  id: string;
  organization_id: string;
  account_id: string;
  state: string;
  outcome: 'pending' | 'departed' | 'blocked';
  initiated_as: 'leave' | 'remove';
  elevated: { service_code: string; quota_code: string; value: number }[];
  request_ids: string[];
  decisions: Record<string, 'approved' | 'denied'>;
  started_at: string;
  finished_at: string | null;
}

export interface Page<T> { items: T[]; page: number; size: number; total: number }

const iso = (d: Date | string | null) => (d === null ? null : new Date(d).toISOString());

export function presentQuota(q: QuotaRow): QuotaView {
  return {
    id: q.id, service_code: q.service_code, quota_code: q.quota_code, name: q.name, default_value: q.default_value,
    applied_value: q.applied_value, max_value: q.max_value, adjustable: q.adjustable,
    scope: q.organization_id ? 'organization' : 'account', account_id: q.account_id, organization_id: q.organization_id,
    updated_at: iso(q.updated_at)!,
  };
}

export function presentRequest(r: RequestRow): RequestView {
  return {
    id: r.id, kind: r.kind, status: r.status, account_id: r.account_id, organization_id: r.organization_id,
    leave_request_account_id: r.leave_request_account_id, leave_gated: r.leave_request_account_id !== null, leave_id: r.leave_id,
    service_code: r.service_code, quota_code: r.quota_code, desired_value: r.desired_value, reason: r.reason,
    decision_reason: r.decision_reason, decided_by: r.decided_by, decided_at: iso(r.decided_at), created_by: r.created_by,
    created_at: iso(r.created_at)!,
  };
}

function presentLeave(c: OrganizationLeaveContext, state: string): LeaveView {
  return {
    id: c.id, organization_id: c.organizationId, account_id: c.accountId, state,
    outcome: state === 'departed' ? 'departed' : state === 'blocked' ? 'blocked' : 'pending',
    initiated_as: c.initiatedAs,
    elevated: c.elevated.map((e) => ({ service_code: e.serviceCode, quota_code: e.quotaCode, value: e.value })),
    request_ids: c.requestIds, decisions: c.decisions, started_at: c.startedAt, finished_at: c.finishedAt,
  };
}

/**
 * Test-only fault injection for the leave saga's crash test: when the environment variable
 * `FAULT_INJECT` names this point, the process exits at once (as a crash would), right after the
 * preceding step committed. Points: `leave-after-start`, `leave-after-seed`, `leave-after-decision`.
 */
function faultPoint(point: string): void {
  if (process.env.FAULT_INJECT === point) {
    process.stderr.write(`FAULT_INJECT=${point}: exiting now (test-only crash injection)\n`);
    process.exit(86);
  }
}

const now = () => new Date().toISOString();

/** Quotas, organizations, increase requests and the leave saga (spec document 1, rules 1-7). */
export class QuotasService implements QuotaGate {
  constructor(private readonly gw: Gateway) {}

  private get sql() { return this.gw.sql; }

  // ---- quota records ----------------------------------------------------------------------

  async defaults() {
    return (await repo.defaults(this.sql)).map((d) => ({ ...d }));
  }

  /** QuotaGate: the applied value for an account (its organization's when a member: rule 7). */
  async limit(accountId: string, serviceCode: string, quotaCode: string): Promise<number | null> {
    const d = await repo.defaultOf(this.sql, serviceCode, quotaCode);
    if (!d) throw notFound(`unknown quota ${serviceCode}/${quotaCode}`);
    if (!isUuid(accountId)) return d.default_value;
    const m = await repo.membership(this.sql, accountId);
    if (m) {
      const q = await repo.quotaValue(this.sql, { organizationId: m.organization_id }, serviceCode, quotaCode);
      return q ? q.applied_value : d.default_value;
    }
    let q = await repo.quotaValue(this.sql, { accountId }, serviceCode, quotaCode);
    if (!q) {
      if (!(await repo.accountExists(this.sql, accountId))) return d.default_value;
      await repo.seedAccount(this.sql, accountId);
      q = await repo.quotaValue(this.sql, { accountId }, serviceCode, quotaCode);
    }
    return q ? q.applied_value : d.default_value;
  }

  /** The quotas an account works with: its organization's (rule 7) or its own, seeded on first access (rule 1). */
  async accountQuotas(accountId: string): Promise<{ scope: 'account' | 'organization'; account_id: string; organization_id: string | null; items: QuotaView[] }> {
    const m = await repo.membership(this.sql, accountId);
    if (m) {
      return { scope: 'organization', account_id: accountId, organization_id: m.organization_id, items: (await repo.orgQuotas(this.sql, m.organization_id)).map(presentQuota) };
    }
    let rows = await repo.accountQuotas(this.sql, accountId);
    if (rows.length === 0) {
      await repo.seedAccount(this.sql, accountId);
      rows = await repo.accountQuotas(this.sql, accountId);
    }
    return { scope: 'account', account_id: accountId, organization_id: null, items: rows.map(presentQuota) };
  }

  async organizationQuotas(organizationId: string): Promise<{ items: QuotaView[] }> {
    return { items: (await repo.orgQuotas(this.sql, organizationId)).map(presentQuota) };
  }

  /** One organization quota, by record id or by quota_code. */
  async organizationQuota(organizationId: string, quotaId: string): Promise<QuotaView> {
    const q = (await repo.orgQuotas(this.sql, organizationId)).find((r) => r.id === quotaId.toLowerCase() || r.quota_code === quotaId);
    if (!q) throw notFound(`quota ${quotaId} not found in organization ${organizationId}`);
    return presentQuota(q);
  }

  private validateIncrease(q: QuotaRow | undefined, serviceCode: string, quotaCode: string, desired: number): QuotaRow {
    if (!q) throw notFound(`unknown quota ${serviceCode}/${quotaCode}; GET /api/v1/quotas/defaults lists the quota codes`);
    const extra = { service_code: q.service_code, quota_code: q.quota_code, applied_value: q.applied_value, max_value: q.max_value };
    if (!q.adjustable) throw unprocessable(`quota ${q.quota_code} is not adjustable (fixed at ${q.applied_value}); increase requests are not accepted`, { type: 'quota-not-adjustable', extra });
    if (q.max_value !== null && desired > q.max_value) throw unprocessable(`desired_value ${desired} exceeds the maximum ${q.max_value} of quota ${q.quota_code}`, { type: 'quota-above-maximum', extra });
    if (desired <= q.applied_value) throw unprocessable(`desired_value ${desired} must be greater than the applied value ${q.applied_value} of quota ${q.quota_code}`, { type: 'quota-not-an-increase', extra });
    return q;
  }

  private async createRequest(uow: UnitOfWork, r: {
    kind: QuotaRequestKind; accountId: string; organizationId: string | null; leaveRequestAccountId: string | null; leaveId: string | null;
    serviceCode: string; quotaCode: string; desiredValue: number; reason: string | null; createdBy: string; at: string;
  }): Promise<string> {
    const id = crypto.randomUUID();
    await uow.create(requestKind, id, {
      id, kind: r.kind, accountId: r.accountId, organizationId: r.organizationId, leaveRequestAccountId: r.leaveRequestAccountId, leaveId: r.leaveId,
      serviceCode: r.serviceCode, quotaCode: r.quotaCode, desiredValue: r.desiredValue, reason: r.reason, createdAt: r.at, createdBy: r.createdBy,
    });
    await repo.insertRequest(uow.sql, {
      id, kind: r.kind, account_id: r.accountId, organization_id: r.organizationId, leave_request_account_id: r.leaveRequestAccountId,
      leave_id: r.leaveId, service_code: r.serviceCode, quota_code: r.quotaCode, desired_value: r.desiredValue, reason: r.reason,
      created_by: r.createdBy, created_at: r.at,
    });
    return id;
  }

  /** Cancels pending requests (locking each; ones decided meanwhile are left as they are). */
  private async cancelPending(uow: UnitOfWork, rows: RequestRow[], by: string, why: string, at: string): Promise<string[]> {
    const cancelled: string[] = [];
    for (const r of rows) {
      const cur = await uow.load(requestKind, r.id);
      if (!cur || cur.state !== 'pending') continue;
      await uow.send(requestKind, r.id, { type: 'CANCEL', at, by, why });
      await repo.setRequestStatus(uow.sql, r.id, 'cancelled', by, at, why);
      cancelled.push(r.id);
    }
    return cancelled;
  }

  // ---- increase requests ------------------------------------------------------------------

  async submitAccountRequest(accountId: string, caller: Caller, body: { service_code: string; quota_code: string; desired_value: number; reason?: string }): Promise<RequestView> {
    const id = await this.gw.actors.run(async (uow) => {
      await repo.lockAccount(uow.sql, accountId);
      const m = await repo.membership(uow.sql, accountId);
      if (m) {
        throw conflict(`account ${accountId} is a member of organization ${m.organization_id} and uses the organization's quotas; its management account requests increases at /api/v1/organizations/${m.organization_id}/quota-requests`, { type: 'account-in-organization' });
      }
      await repo.seedAccount(uow.sql, accountId);
      const q = this.validateIncrease(await repo.quotaValue(uow.sql, { accountId }, body.service_code, body.quota_code), body.service_code, body.quota_code, body.desired_value);
      const [dup] = await repo.pendingFor(uow.sql, { accountId, kind: 'account' }, q.service_code, q.quota_code);
      if (dup) throw conflict(`a pending increase request ${dup.id} for quota ${q.quota_code} exists; wait for its decision`, { extra: { request_id: dup.id } });
      return this.createRequest(uow, {
        kind: 'account', accountId, organizationId: null, leaveRequestAccountId: null, leaveId: null, serviceCode: q.service_code,
        quotaCode: q.quota_code, desiredValue: body.desired_value, reason: body.reason ?? null, createdBy: caller.sub, at: now(),
      });
    });
    return presentRequest((await repo.request(this.sql, id))!);
  }

  async submitOrgRequest(organizationId: string, caller: Caller, body: { service_code: string; quota_code: string; desired_value: number; reason?: string }): Promise<RequestView> {
    const org = await this.manageable(organizationId, caller);
    const id = await this.gw.actors.run(async (uow) => {
      await repo.organization(uow.sql, organizationId, true);
      const q = this.validateIncrease(await repo.quotaValue(uow.sql, { organizationId }, body.service_code, body.quota_code), body.service_code, body.quota_code, body.desired_value);
      const [dup] = await repo.pendingFor(uow.sql, { organizationId, kind: 'organization' }, q.service_code, q.quota_code);
      if (dup) throw conflict(`a pending increase request ${dup.id} for quota ${q.quota_code} of this organization exists; wait for its decision or cancel it`, { extra: { request_id: dup.id } });
      return this.createRequest(uow, {
        kind: 'organization', accountId: org.management_account_id, organizationId, leaveRequestAccountId: null, leaveId: null,
        serviceCode: q.service_code, quotaCode: q.quota_code, desiredValue: body.desired_value, reason: body.reason ?? null, createdBy: caller.sub, at: now(),
      });
    });
    return presentRequest((await repo.request(this.sql, id))!);
  }

  async cancelOrgRequest(organizationId: string, requestId: string, caller: Caller): Promise<RequestView> {
    await this.manageable(organizationId, caller);
    const row = await repo.request(this.sql, requestId);
    if (!row || row.organization_id !== organizationId) throw notFound(`quota request ${requestId} not found in organization ${organizationId}`);
    if (row.kind === 'leave') throw conflict(`quota request ${requestId} was submitted because account ${row.leave_request_account_id} is leaving; platform admins decide it, it cannot be cancelled`, { type: 'leave-request-not-cancellable' });
    await this.gw.actors.run(async (uow) => {
      const at = now();
      await uow.send(requestKind, requestId, { type: 'CANCEL', at, by: caller.sub, why: 'cancelled by the organization' });
      await repo.setRequestStatus(uow.sql, requestId, 'cancelled', caller.sub, at, null);
    });
    return presentRequest((await repo.request(this.sql, requestId))!);
  }

  async listAccountRequests(accountId: string, page: number, size: number): Promise<Page<RequestView>> {
    const { items, total } = await repo.listRequests(this.sql, { accountId }, page, size);
    return { items: items.map(presentRequest), page, size, total };
  }

  async listOrgRequests(organizationId: string, caller: Caller, page: number, size: number): Promise<Page<RequestView>> {
    await this.readable(organizationId, caller);
    const { items, total } = await repo.listRequests(this.sql, { organizationId }, page, size);
    return { items: items.map(presentRequest), page, size, total };
  }

  async queue(page: number, size: number): Promise<Page<RequestView>> {
    const { items, total } = await repo.listRequests(this.sql, { pending: true }, page, size);
    return { items: items.map(presentRequest), page, size, total };
  }

  async request(requestId: string): Promise<RequestView> {
    const row = await repo.request(this.sql, requestId);
    if (!row) throw notFound(`quota request ${requestId} not found`);
    return presentRequest(row);
  }

  /**
   * Platform admin decision. A leave-gated request locks its leave saga first (then the request),
   * so concurrent decisions on the requests of one leave serialize: one consistent outcome.
   */
  async decide(requestId: string, decision: 'approved' | 'denied', caller: Caller, reason?: string): Promise<RequestView> {
    const row = await repo.request(this.sql, requestId);
    if (!row) throw notFound(`quota request ${requestId} not found`);
    const leaveState = await this.gw.actors.run(async (uow) => {
      if (row.leave_id) await uow.load(leaveKind, row.leave_id);
      const current = await uow.load(requestKind, requestId);
      if (current && current.state !== 'pending') {
        throw conflict(`quota request ${requestId} is ${current.state}; only pending requests are decided`, { extra: { state: current.state } });
      }
      const at = now();
      if (decision === 'approved') {
        await uow.send(requestKind, requestId, { type: 'APPROVE', at, by: caller.sub });
        const owner = row.kind === 'organization' ? { organizationId: row.organization_id! } : { accountId: row.account_id };
        if (row.kind === 'account') await repo.seedAccount(uow.sql, row.account_id);
        if (!(await repo.raise(uow.sql, owner, row.service_code, row.quota_code, row.desired_value))) {
          throw conflict(`the quota record that request ${requestId} raises no longer exists`);
        }
      } else {
        await uow.send(requestKind, requestId, { type: 'DENY', at, by: caller.sub, reason: reason ?? '' });
      }
      await repo.setRequestStatus(uow.sql, requestId, decision, caller.sub, at, decision === 'denied' ? reason!.trim() : null);
      if (!row.leave_id) return undefined;
      const leave = await uow.send(leaveKind, row.leave_id, { type: 'DECIDED', at, requestId, decision, ...(reason ? { reason: reason.trim() } : {}) });
      if (leave.state === 'blocking') {
        // rule 6: every remaining pending leave request is cancelled in this same transaction
        await this.cancelPending(uow, await repo.pendingOfLeave(uow.sql, row.leave_id), caller.sub, `leave of account ${row.account_id} blocked: request ${requestId} denied`, at);
      }
      return leave.state;
    });
    if (row.leave_id && (leaveState === 'departing' || leaveState === 'blocking')) {
      faultPoint('leave-after-decision');
      await this.enqueueStep(row.leave_id);
    }
    return presentRequest((await repo.request(this.sql, requestId))!);
  }

  // ---- organizations ----------------------------------------------------------------------

  private async presentOrg(o: OrganizationRow): Promise<OrganizationView> {
    return { id: o.id, name: o.name, management_account_id: o.management_account_id, member_count: await repo.memberCount(this.sql, o.id), created_at: iso(o.created_at)! };
  }

  /** Platform principals and members of the organization read it; anyone else gets 404. */
  async readable(organizationId: string, caller: Caller): Promise<OrganizationRow> {
    const org = await repo.organization(this.sql, organizationId);
    if (org && caller.platform) return org;
    if (org && caller.accountId) {
      const m = await repo.membership(this.sql, caller.accountId);
      if (m?.organization_id === organizationId) return org;
    }
    throw notFound(`organization ${organizationId} not found`);
  }

  /** Admins of the management account manage the organization (403 for other members). */
  async manageable(organizationId: string, caller: Caller): Promise<OrganizationRow> {
    const org = await this.readable(organizationId, caller);
    if (caller.accountId !== org.management_account_id || !caller.roles.includes('admin')) {
      throw refused(`only admins of the organization's management account ${org.management_account_id} manage organization ${organizationId}`);
    }
    return org;
  }

  async getOrganization(organizationId: string, caller: Caller): Promise<OrganizationView> {
    return this.presentOrg(await this.readable(organizationId, caller));
  }

  async organizationOf(accountId: string): Promise<OrganizationView & { membership: MemberView }> {
    const m = await repo.membership(this.sql, accountId);
    if (!m) throw notFound(`account ${accountId} is standalone: it belongs to no organization`);
    const org = (await repo.organization(this.sql, m.organization_id))!;
    return { ...(await this.presentOrg(org)), membership: this.presentMember(m, org) };
  }

  private presentMember(m: MemberRow, org: OrganizationRow): MemberView {
    return { account_id: m.account_id, organization_id: m.organization_id, status: m.status, management: m.account_id === org.management_account_id, leave_id: m.leave_id, joined_at: iso(m.joined_at)! };
  }

  /** Rule 2: a standalone account creates an organization and becomes its management account. */
  async createOrganization(accountId: string, caller: Caller, name: string): Promise<OrganizationView> {
    const org = await this.gw.actors.run(async (uow) => {
      await repo.lockAccount(uow.sql, accountId);
      const m = await repo.membership(uow.sql, accountId);
      if (m) throw conflict(`account ${accountId} is already a member of organization ${m.organization_id}; only a standalone account creates an organization`, { extra: { organization_id: m.organization_id } });
      const at = now();
      // the account's own pending requests target records that are about to go: cancelled first
      await this.cancelPending(uow, await repo.pendingFor(uow.sql, { accountId, kind: 'account' }), caller.sub, 'the account created an organization', at);
      await repo.seedAccount(uow.sql, accountId);
      const values = new Map((await repo.accountQuotas(uow.sql, accountId)).map((q) => [`${q.service_code}/${q.quota_code}`, q.applied_value]));
      const created = await repo.createOrganization(uow.sql, { id: crypto.randomUUID(), name, managementAccountId: accountId, createdBy: caller.sub });
      await repo.seedOrganization(uow.sql, created.id, values);
      await repo.deleteAccountQuotas(uow.sql, accountId);
      await repo.addMember(uow.sql, created.id, accountId);
      await uow.emit('organization', created.id, { type: 'organization.created', organizationId: created.id, managementAccountId: accountId, name }, accountId);
      return created;
    });
    return this.presentOrg(org);
  }

  async listMembers(organizationId: string, caller: Caller): Promise<MemberView[]> {
    const org = await this.readable(organizationId, caller);
    return (await repo.members(this.sql, organizationId)).map((m) => this.presentMember(m, org));
  }

  /** Adds a standalone account; enforces member-accounts-per-organization (409 naming the quota). */
  async addMember(organizationId: string, accountId: string, caller: Caller): Promise<MemberView> {
    await this.manageable(organizationId, caller);
    return this.gw.actors.run(async (uow) => {
      const org = (await repo.organization(uow.sql, organizationId, true))!;
      if (!(await repo.lockAccount(uow.sql, accountId))) throw notFound(`account ${accountId} not found`);
      const m = await repo.membership(uow.sql, accountId);
      if (m) {
        throw conflict(m.organization_id === organizationId
          ? `account ${accountId} is already a member of this organization`
          : `account ${accountId} is a member of another organization; it must leave it first`);
      }
      const quota = await repo.quotaValue(uow.sql, { organizationId }, ORGANIZATIONS, MEMBER_QUOTA);
      const limit = quota?.applied_value ?? 10;
      const count = await repo.memberCount(uow.sql, organizationId);
      if (count >= limit) {
        throw conflict(`quota ${ORGANIZATIONS}/${MEMBER_QUOTA} reached: organization ${organizationId} has ${count} member accounts, the applied value is ${limit}; request an increase at /api/v1/organizations/${organizationId}/quota-requests`, {
          type: 'quota-exceeded', extra: { service_code: ORGANIZATIONS, quota_code: MEMBER_QUOTA, applied_value: limit, current: count },
        });
      }
      const at = now();
      // rule 7: inside the organization the account uses the organization's quotas
      await this.cancelPending(uow, await repo.pendingFor(uow.sql, { accountId, kind: 'account' }), caller.sub, 'the account joined an organization', at);
      await repo.deleteAccountQuotas(uow.sql, accountId);
      await repo.addMember(uow.sql, organizationId, accountId);
      await uow.emit('organization', organizationId, { type: 'organization.memberAdded', organizationId, accountId, by: caller.sub }, accountId);
      return this.presentMember((await repo.membership(uow.sql, accountId))!, org);
    });
  }

  // ---- the leave saga (rules 3-6) ---------------------------------------------------------

  /**
   * Step 1 (one transaction): an account leaves (its own admin) or is removed (management admin).
   * No elevated organization quota: it departs in this transaction (rule 3). Otherwise the saga
   * starts in `seeding` and the account is marked `leaving` (rule 4); a job seeds and submits.
   */
  async startLeave(organizationId: string, accountId: string, caller: Caller): Promise<LeaveView> {
    const org = await this.readable(organizationId, caller);
    let initiatedAs: 'leave' | 'remove';
    if (caller.accountId === accountId && caller.roles.includes('admin')) initiatedAs = 'leave';
    else if (caller.accountId === org.management_account_id && caller.roles.includes('admin')) initiatedAs = 'remove';
    else throw refused(`only an admin of account ${accountId} (leave) or of the management account ${org.management_account_id} (remove) ends this membership`);
    if (accountId === org.management_account_id) throw conflict(`account ${accountId} is the management account of organization ${organizationId}; it cannot leave`, { type: 'management-account-cannot-leave' });
    const result = await this.gw.actors.run(async (uow) => {
      await repo.lockAccount(uow.sql, accountId);
      const m = await repo.membership(uow.sql, accountId);
      if (!m || m.organization_id !== organizationId) throw notFound(`account ${accountId} is not a member of organization ${organizationId}`);
      if (m.status === 'leaving') throw conflict(`account ${accountId} is already leaving organization ${organizationId} (leave ${m.leave_id}); wait for the platform admins' decisions`, { extra: { leave_id: m.leave_id } });
      const elevated = (await repo.orgQuotas(uow.sql, organizationId))
        .filter((q) => q.applied_value > q.default_value)
        .map((q) => ({ serviceCode: q.service_code, quotaCode: q.quota_code, value: q.applied_value }));
      const leaveId = crypto.randomUUID();
      const at = now();
      let r = await uow.create(leaveKind, leaveId, { id: leaveId, organizationId, accountId, initiatedAs, initiatedBy: caller.sub, elevated, startedAt: at });
      if (r.state === 'departing') {
        await repo.removeMember(uow.sql, accountId, organizationId);
        r = await uow.send(leaveKind, leaveId, { type: 'DEPARTED', at });
      } else {
        await repo.setMemberStatus(uow.sql, accountId, 'leaving', leaveId);
      }
      return r;
    });
    faultPoint('leave-after-start');
    const view = presentLeave(result.snapshot.context, result.state);
    if (result.state === 'seeding') await this.enqueueStep(view.id);
    return view;
  }

  async getLeave(organizationId: string, leaveId: string, caller: Caller): Promise<LeaveView> {
    const leave = await this.gw.actors.get(leaveKind, leaveId);
    const c = leave?.snapshot.context;
    if (!c || c.organizationId !== organizationId) throw notFound(`leave ${leaveId} not found in organization ${organizationId}`);
    // the leaving account keeps reading its leave after it departed
    if (!(caller.accountId === c.accountId)) await this.readable(organizationId, caller);
    return presentLeave(c, leave.state);
  }

  async enqueueStep(leaveId: string): Promise<void> {
    try {
      await this.gw.jobs.send(LEAVE_STEP_JOB, { leaveId });
    } catch (err) {
      // the sweep (start-up and every minute) picks the step up
      this.gw.log.warn({ leaveId, error: (err as Error).message }, 'leave step not queued; the sweep will resume it');
    }
  }

  /** Re-queues every leave whose state is a step still to do (after a crash or a lost job). */
  async sweep(): Promise<number> {
    const rows = await repo.unfinishedLeaves(this.sql);
    for (const r of rows) await this.enqueueStep(r.id);
    return rows.length;
  }

  /** Job: runs the step the leave's durable state calls for. Idempotent: a step already done is a no-op. */
  async leaveStep(leaveId: string): Promise<void> {
    const current = await this.gw.actors.get(leaveKind, leaveId);
    if (!current) return;
    if (current.state === 'seeding') {
      if (await this.seedLeave(leaveId)) faultPoint('leave-after-seed');
    } else if (current.state === 'departing') await this.depart(leaveId);
    else if (current.state === 'blocking') await this.unblock(leaveId);
  }

  /** Step 2 (rule 4): standalone defaults seeded; one tagged request per elevated value. */
  private async seedLeave(leaveId: string): Promise<boolean> {
    return this.gw.actors.run(async (uow) => {
      const leave = await uow.load(leaveKind, leaveId);
      if (!leave || leave.state !== 'seeding') return false;
      const c = leave.snapshot.context;
      await repo.seedAccount(uow.sql, c.accountId);
      const at = now();
      const ids: string[] = [];
      for (const e of c.elevated) {
        ids.push(await this.createRequest(uow, {
          kind: 'leave', accountId: c.accountId, organizationId: c.organizationId, leaveRequestAccountId: c.accountId, leaveId,
          serviceCode: e.serviceCode, quotaCode: e.quotaCode, desiredValue: e.value,
          reason: `Automatic request: account ${c.accountId} is leaving organization ${c.organizationId} and asks to keep the organization's elevated value ${e.value} of quota ${e.serviceCode}/${e.quotaCode} (platform default ${await this.defaultValue(uow, e.serviceCode, e.quotaCode)}).`,
          createdBy: 'system:leave-saga', at,
        }));
      }
      await uow.send(leaveKind, leaveId, { type: 'SEEDED', at, requestIds: ids });
      return true;
    });
  }

  private async defaultValue(uow: UnitOfWork, serviceCode: string, quotaCode: string): Promise<number | undefined> {
    return (await repo.defaultOf(uow.sql, serviceCode, quotaCode))?.default_value;
  }

  /** Step 3a (rules 3, 5): the membership ends; standalone records keep the approved values. */
  private async depart(leaveId: string): Promise<void> {
    await this.gw.actors.run(async (uow) => {
      const leave = await uow.load(leaveKind, leaveId);
      if (!leave || leave.state !== 'departing') return;
      const c = leave.snapshot.context;
      await repo.lockAccount(uow.sql, c.accountId);
      await repo.removeMember(uow.sql, c.accountId, c.organizationId);
      await uow.send(leaveKind, leaveId, { type: 'DEPARTED', at: now() });
    });
  }

  /** Step 3b (rule 6): standalone records cleaned up, the account stays; `organization.leaveBlocked` recorded. */
  private async unblock(leaveId: string): Promise<void> {
    await this.gw.actors.run(async (uow) => {
      const leave = await uow.load(leaveKind, leaveId);
      if (!leave || leave.state !== 'blocking') return;
      const c = leave.snapshot.context;
      await repo.lockAccount(uow.sql, c.accountId);
      await this.cancelPending(uow, await repo.pendingOfLeave(uow.sql, leaveId), 'system:leave-saga', 'leave blocked', now());
      await repo.deleteAccountQuotas(uow.sql, c.accountId);
      await repo.setMemberStatus(uow.sql, c.accountId, 'active', null);
      await uow.send(leaveKind, leaveId, { type: 'UNBLOCKED', at: now() });
    });
  }
}
