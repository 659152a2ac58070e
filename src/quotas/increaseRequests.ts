import type { ActorStore, UnitOfWork } from '../actors/store.js';
import type { Sql } from '../db/client.js';
import { isoNow, type Clock } from '../lib/clock.js';
import { conflict, invalid, notFound, unprocessable } from '../lib/errors.js';
import type { QuotaRequestContext, QuotaRequestEvent } from '../../machines/quotaRequest.js';
import { leaveKind, requestKind } from './kinds.js';
import type { LeaveSaga } from './leaveSaga.js';
import type { OrganizationAccess } from './organizations.js';
import { repo, type QuotaRow } from './repo.js';
import { openRequest } from './requests.js';
import { presentRequest, type Caller, type Page, type RequestView } from './views.js';

export interface IncreaseRequestsDeps {
  sql: Sql;
  actors: Pick<ActorStore, 'run' | 'get'>;
  clock: Clock;
  access: OrganizationAccess;
  leaves: Pick<LeaveSaga, 'recordDecision' | 'afterDecision'>;
}

export interface IncreaseBody { service_code: string; quota_code: string; desired_value: number; reason?: string }

/** Quota increase requests: submission by accounts and organizations, the platform queue and its decisions. */
export class IncreaseRequests {
  constructor(private readonly deps: IncreaseRequestsDeps) {}

  async submitForAccount(accountId: string, caller: Caller, body: IncreaseBody): Promise<RequestView> {
    const id = await this.deps.actors.run(async (uow) => {
      await repo.lockAccount(uow.sql, accountId);
      const m = await repo.membership(uow.sql, accountId);
      if (m) {
        throw conflict(`account ${accountId} is a member of organization ${m.organization_id} and uses the organization's quotas; its management account requests increases at /api/v1/organizations/${m.organization_id}/quota-requests`, { type: 'account-in-organization' });
      }
      await repo.seedAccount(uow.sql, accountId);
      const q = validateIncrease(await repo.quotaValue(uow.sql, { accountId }, body.service_code, body.quota_code), body);
      const [dup] = await repo.pendingFor(uow.sql, { accountId, kind: 'account' }, q.service_code, q.quota_code);
      if (dup) throw conflict(`a pending increase request ${dup.id} for quota ${q.quota_code} exists; wait for its decision`, { extra: { request_id: dup.id } });
      return openRequest(uow, {
        kind: 'account', accountId, organizationId: null, leaveRequestAccountId: null, leaveId: null, serviceCode: q.service_code,
        quotaCode: q.quota_code, desiredValue: body.desired_value, reason: body.reason ?? null, createdBy: caller.sub, at: isoNow(this.deps.clock),
      });
    });
    return this.get(id);
  }

  async submitForOrganization(organizationId: string, caller: Caller, body: IncreaseBody): Promise<RequestView> {
    const org = await this.deps.access.manageable(organizationId, caller);
    const id = await this.deps.actors.run(async (uow) => {
      await repo.organization(uow.sql, organizationId, true);
      const q = validateIncrease(await repo.quotaValue(uow.sql, { organizationId }, body.service_code, body.quota_code), body);
      const [dup] = await repo.pendingFor(uow.sql, { organizationId, kind: 'organization' }, q.service_code, q.quota_code);
      if (dup) throw conflict(`a pending increase request ${dup.id} for quota ${q.quota_code} of this organization exists; wait for its decision or cancel it`, { extra: { request_id: dup.id } });
      return openRequest(uow, {
        kind: 'organization', accountId: org.management_account_id, organizationId, leaveRequestAccountId: null, leaveId: null,
        serviceCode: q.service_code, quotaCode: q.quota_code, desiredValue: body.desired_value, reason: body.reason ?? null, createdBy: caller.sub, at: isoNow(this.deps.clock),
      });
    });
    return this.get(id);
  }

  /** The organization withdraws one of its requests (the machine refuses it unless pending: 409). */
  async cancelForOrganization(organizationId: string, requestId: string, caller: Caller): Promise<RequestView> {
    await this.deps.access.manageable(organizationId, caller);
    const row = await repo.request(this.deps.sql, requestId);
    if (!row || row.organization_id !== organizationId) throw notFound(`quota request ${requestId} not found in organization ${organizationId}`);
    if (row.kind === 'leave') throw conflict(`quota request ${requestId} was submitted because account ${row.leave_request_account_id} is leaving; platform admins decide it, it cannot be cancelled`, { type: 'leave-request-not-cancellable' });
    await this.deps.actors.run((uow) => uow.send(requestKind, requestId, { type: 'CANCEL', at: isoNow(this.deps.clock), by: caller.sub }));
    return this.get(requestId);
  }

  async listForAccount(accountId: string, page: number, size: number): Promise<Page<RequestView>> {
    return this.page({ accountId }, page, size);
  }

  async listForOrganization(organizationId: string, caller: Caller, page: number, size: number): Promise<Page<RequestView>> {
    await this.deps.access.readable(organizationId, caller);
    return this.page({ organizationId }, page, size);
  }

  /** The platform admins' queue: every pending request, oldest first. */
  async queue(page: number, size: number): Promise<Page<RequestView>> {
    return this.page({ pending: true }, page, size);
  }

  async get(requestId: string): Promise<RequestView> {
    const row = await repo.request(this.deps.sql, requestId);
    if (!row) throw notFound(`quota request ${requestId} not found`);
    return presentRequest(row);
  }

  /**
   * Platform admin decision; the machine accepts it only while pending (409) and a denial only with
   * a reason (400). A leave-gated request locks its leave saga first (then the request), so
   * concurrent decisions on the requests of one leave serialize: one consistent outcome.
   */
  async decide(requestId: string, decision: 'approved' | 'denied', caller: Caller, reason?: string): Promise<RequestView> {
    const found = await this.deps.actors.get(requestKind, requestId);
    if (!found) throw notFound(`quota request ${requestId} not found`);
    const leaveId = found.snapshot.context.leaveId;
    const leaveState = await this.deps.actors.run(async (uow) => {
      if (leaveId) await uow.load(leaveKind, leaveId);
      const at = isoNow(this.deps.clock);
      const event: QuotaRequestEvent = decision === 'approved'
        ? { type: 'APPROVE', at, by: caller.sub }
        : { type: 'DENY', at, by: caller.sub, reason: reason ?? '' };
      const r = await uow.trySend(requestKind, requestId, event);
      if ('refused' in r) {
        // still pending: the only refusal there is the denial's reason guard
        if (r.state === 'pending') throw invalid('a reason is required to deny a request');
        throw conflict(`quota request ${requestId} is ${r.state}; only pending requests are decided`, { extra: { state: r.state } });
      }
      const c = r.snapshot.context;
      if (decision === 'approved') await raise(uow, c);
      return leaveId ? this.deps.leaves.recordDecision(uow, c, decision, at) : undefined;
    });
    if (leaveId && leaveState) await this.deps.leaves.afterDecision(leaveId, leaveState);
    return this.get(requestId);
  }

  private async page(where: Parameters<typeof repo.listRequests>[1], page: number, size: number): Promise<Page<RequestView>> {
    const { items, total } = await repo.listRequests(this.deps.sql, where, page, size);
    return { items: items.map(presentRequest), page, size, total };
  }
}

function validateIncrease(q: QuotaRow | undefined, body: IncreaseBody): QuotaRow {
  const desired = body.desired_value;
  if (!q) throw notFound(`unknown quota ${body.service_code}/${body.quota_code}; GET /api/v1/quotas/defaults lists the quota codes`);
  const extra = { service_code: q.service_code, quota_code: q.quota_code, applied_value: q.applied_value, max_value: q.max_value };
  if (!q.adjustable) throw unprocessable(`quota ${q.quota_code} is not adjustable (fixed at ${q.applied_value}); increase requests are not accepted`, { type: 'quota-not-adjustable', extra });
  if (q.max_value !== null && desired > q.max_value) throw unprocessable(`desired_value ${desired} exceeds the maximum ${q.max_value} of quota ${q.quota_code}`, { type: 'quota-above-maximum', extra });
  if (desired <= q.applied_value) throw unprocessable(`desired_value ${desired} must be greater than the applied value ${q.applied_value} of quota ${q.quota_code}`, { type: 'quota-not-an-increase', extra });
  return q;
}

/** An approval raises the record it targets: the organization's, or the requesting account's standalone one. */
async function raise(uow: UnitOfWork, c: QuotaRequestContext): Promise<void> {
  const owner = c.kind === 'organization' ? { organizationId: c.organizationId! } : { accountId: c.accountId };
  if (c.kind === 'account') await repo.seedAccount(uow.sql, c.accountId);
  if (!(await repo.raise(uow.sql, owner, c.serviceCode, c.quotaCode, c.desiredValue))) {
    throw conflict(`the quota record that request ${c.id} raises no longer exists`);
  }
}
