import crypto from 'node:crypto';
import type { ActorStore, UnitOfWork } from '../actors/store.js';
import type { Sql } from '../db/client.js';
import type { Jobs } from '../jobs.js';
import type { Logger } from '../log.js';
import { isoNow, type Clock } from '../lib/clock.js';
import { conflict, notFound, refused } from '../lib/errors.js';
import type { FaultHook } from '../lib/faults.js';
import type { QuotaRequestContext } from '../../machines/quotaRequest.js';
import { leaveKind } from './kinds.js';
import type { OrganizationAccess } from './organizations.js';
import { repo } from './repo.js';
import { cancelPending, openRequest } from './requests.js';
import { presentLeave, type Caller, type LeaveView } from './views.js';

export const LEAVE_STEP_JOB = 'quotas.leave-step';
export const LEAVE_SWEEP_JOB = 'quotas.leave-sweep';

/** Machine states that are a durable "step to do": a job drives each to the next state. */
const STEP_STATES = new Set(['seeding', 'departing', 'blocking']);

export interface LeaveSagaDeps {
  sql: Sql;
  actors: Pick<ActorStore, 'run' | 'get'>;
  clock: Clock;
  jobs: Pick<Jobs, 'send'>;
  log: Logger;
  /** test-only crash injection after a step commits */
  faults: FaultHook;
  access: Pick<OrganizationAccess, 'readable'>;
}

/**
 * The leave saga (rules 3-6): an account leaves or is removed; elevated organization quotas gate
 * the departure on platform decisions. The organizationLeave machine decides every step (each
 * step's event is sent first and a refusal means the step is already done); each step is one
 * transaction, run by a durable job, so a crash between two steps resumes.
 */
export class LeaveSaga {
  constructor(private readonly deps: LeaveSagaDeps) {}

  /**
   * Step 1 (one transaction): an account leaves (its own admin) or is removed (management admin).
   * No elevated organization quota: it departs in this transaction (rule 3). Otherwise the saga
   * waits in `seeding` and the membership shows `leaving` (rule 4); a job seeds and submits.
   */
  async start(organizationId: string, accountId: string, caller: Caller): Promise<LeaveView> {
    const org = await this.deps.access.readable(organizationId, caller);
    let initiatedAs: 'leave' | 'remove';
    if (caller.accountId === accountId && caller.roles.includes('admin')) initiatedAs = 'leave';
    else if (caller.accountId === org.management_account_id && caller.roles.includes('admin')) initiatedAs = 'remove';
    else throw refused(`only an admin of account ${accountId} (leave) or of the management account ${org.management_account_id} (remove) ends this membership`);
    if (accountId === org.management_account_id) throw conflict(`account ${accountId} is the management account of organization ${organizationId}; it cannot leave`, { type: 'management-account-cannot-leave' });
    const result = await this.deps.actors.run(async (uow) => {
      await repo.lockAccount(uow.sql, accountId);
      const m = await repo.membership(uow.sql, accountId);
      if (!m || m.organization_id !== organizationId) throw notFound(`account ${accountId} is not a member of organization ${organizationId}`);
      // an unfinished leave of the account (the projection of its machine) runs: one at a time
      if (m.leave_id) throw conflict(`account ${accountId} is already leaving organization ${organizationId} (leave ${m.leave_id}); wait for the platform admins' decisions`, { extra: { leave_id: m.leave_id } });
      const elevated = (await repo.orgQuotas(uow.sql, organizationId))
        .filter((q) => q.applied_value > q.default_value)
        .map((q) => ({ serviceCode: q.service_code, quotaCode: q.quota_code, value: q.applied_value }));
      const leaveId = crypto.randomUUID();
      const at = isoNow(this.deps.clock);
      await repo.insertLeave(uow.sql, { id: leaveId, organizationId, accountId, startedAt: at });
      const started = await uow.create(leaveKind, leaveId, { id: leaveId, organizationId, accountId, initiatedAs, initiatedBy: caller.sub, elevated, startedAt: at });
      // the machine accepts the departure at once only when nothing gates it (rule 3)
      const departed = await uow.trySend(leaveKind, leaveId, { type: 'DEPARTED', at });
      if ('refused' in departed) return started;
      await repo.removeMember(uow.sql, accountId, organizationId);
      return departed;
    });
    await this.deps.faults('leave-after-start');
    const view = presentLeave(result.snapshot.context, result.state);
    if (STEP_STATES.has(result.state)) await this.enqueueStep(view.id);
    return view;
  }

  async get(organizationId: string, leaveId: string, caller: Caller): Promise<LeaveView> {
    const leave = await this.deps.actors.get(leaveKind, leaveId);
    const c = leave?.snapshot.context;
    if (!c || c.organizationId !== organizationId) throw notFound(`leave ${leaveId} not found in organization ${organizationId}`);
    // the leaving account keeps reading its leave after it departed
    if (caller.accountId !== c.accountId) await this.deps.access.readable(organizationId, caller);
    return presentLeave(c, leave.state);
  }

  /**
   * A platform decision on one of the leave's requests, in the decision's transaction (the leave
   * was locked first). A denial blocks the leave and cancels its other pending requests (rule 6).
   */
  async recordDecision(uow: UnitOfWork, request: QuotaRequestContext, decision: 'approved' | 'denied', at: string): Promise<string> {
    const leaveId = request.leaveId!;
    const leave = await uow.send(leaveKind, leaveId, {
      type: 'DECIDED', at, requestId: request.id, decision, ...(request.decisionReason ? { reason: request.decisionReason } : {}),
    });
    if (leave.state === 'blocking') {
      await cancelPending(uow, await repo.pendingOfLeave(uow.sql, leaveId), request.decidedBy!, `leave of account ${request.accountId} blocked: request ${request.id} denied`, at);
    }
    return leave.state;
  }

  /** After a decision committed: queue the step the leave now calls for, if any. */
  async afterDecision(leaveId: string, state: string): Promise<void> {
    if (!STEP_STATES.has(state)) return;
    await this.deps.faults('leave-after-decision');
    await this.enqueueStep(leaveId);
  }

  async enqueueStep(leaveId: string): Promise<void> {
    try {
      await this.deps.jobs.send(LEAVE_STEP_JOB, { leaveId });
    } catch (err) {
      // the sweep (start-up and every minute) picks the step up
      this.deps.log.warn({ leaveId, error: (err as Error).message }, 'leave step not queued; the sweep will resume it');
    }
  }

  /** Re-queues every leave whose state is a step still to do (after a crash or a lost job). */
  async sweep(): Promise<number> {
    const rows = await repo.leavesWithStepDue(this.deps.sql, [...STEP_STATES]);
    for (const r of rows) await this.enqueueStep(r.id);
    return rows.length;
  }

  /** Job: runs the step the leave's state calls for. Idempotent: the machine refuses a step already done. */
  async step(leaveId: string): Promise<void> {
    const current = await this.deps.actors.get(leaveKind, leaveId);
    if (current?.state === 'seeding') {
      if (await this.seed(leaveId)) await this.deps.faults('leave-after-seed');
    } else if (current?.state === 'departing') await this.depart(leaveId);
    else if (current?.state === 'blocking') await this.unblock(leaveId);
  }

  /** Step 2 (rule 4): standalone defaults seeded; one tagged request per elevated value. */
  private async seed(leaveId: string): Promise<boolean> {
    return this.deps.actors.run(async (uow) => {
      const leave = await uow.load(leaveKind, leaveId);
      if (!leave) return false;
      const c = leave.snapshot.context;
      const at = isoNow(this.deps.clock);
      const requestIds = c.elevated.map(() => crypto.randomUUID());
      if ('refused' in (await uow.trySend(leaveKind, leaveId, { type: 'SEEDED', at, requestIds }))) return false;
      await repo.seedAccount(uow.sql, c.accountId);
      for (const [i, e] of c.elevated.entries()) {
        const platformDefault = (await repo.defaultOf(uow.sql, e.serviceCode, e.quotaCode))?.default_value;
        await openRequest(uow, {
          id: requestIds[i], kind: 'leave', accountId: c.accountId, organizationId: c.organizationId, leaveRequestAccountId: c.accountId, leaveId,
          serviceCode: e.serviceCode, quotaCode: e.quotaCode, desiredValue: e.value,
          reason: `Automatic request: account ${c.accountId} is leaving organization ${c.organizationId} and asks to keep the organization's elevated value ${e.value} of quota ${e.serviceCode}/${e.quotaCode} (platform default ${platformDefault}).`,
          createdBy: 'system:leave-saga', at,
        });
      }
      return true;
    });
  }

  /** Step 3a (rules 3, 5): the membership ends; standalone records keep the approved values. */
  private async depart(leaveId: string): Promise<void> {
    await this.deps.actors.run(async (uow) => {
      const r = await uow.trySend(leaveKind, leaveId, { type: 'DEPARTED', at: isoNow(this.deps.clock) });
      if ('refused' in r) return;
      const c = r.snapshot.context;
      await repo.lockAccount(uow.sql, c.accountId);
      await repo.removeMember(uow.sql, c.accountId, c.organizationId);
    });
  }

  /** Step 3b (rule 6): standalone records cleaned up, the account stays active; `organization.leaveBlocked` recorded. */
  private async unblock(leaveId: string): Promise<void> {
    await this.deps.actors.run(async (uow) => {
      const at = isoNow(this.deps.clock);
      const r = await uow.trySend(leaveKind, leaveId, { type: 'UNBLOCKED', at });
      if ('refused' in r) return;
      const c = r.snapshot.context;
      await repo.lockAccount(uow.sql, c.accountId);
      await cancelPending(uow, await repo.pendingOfLeave(uow.sql, leaveId), 'system:leave-saga', 'leave blocked', at);
      await repo.deleteAccountQuotas(uow.sql, c.accountId);
    });
  }
}
