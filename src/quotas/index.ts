import { defineDomain } from '../gateway.js';
import { noFaults } from '../lib/faults.js';
import { IncreaseRequests } from './increaseRequests.js';
import { leaveKind, requestKind } from './kinds.js';
import { LEAVE_STEP_JOB, LEAVE_SWEEP_JOB, LeaveSaga } from './leaveSaga.js';
import { Organizations } from './organizations.js';
import type { Quotas } from './parts.js';
import { QuotaValues } from './quotaValues.js';
import { quotaRoutes } from './routes.js';
import type { Caller, RequestView } from './views.js';

declare module '../gateway.js' {
  interface Services {
    quotas: Quotas;
  }
}

/** What tests of quotas ask below its public interface (RunningGateway.testHooks.quotas). */
export interface QuotasTestHooks {
  /** the applied value other domains enforce (quotaGate), beside the account's view the routes show */
  limit(accountId: string, serviceCode: string, quotaCode: string): Promise<number | null>;
  /** a decision past the route's schema (which refuses a blank reason first), so a test sees the machine's own refusal */
  decideRequest(requestId: string, decision: 'approved' | 'denied', caller: Caller, reason?: string): Promise<RequestView>;
}

declare module '../gateway.js' {
  interface TestHooks {
    quotas: QuotasTestHooks;
  }
}

/** Domain module of src/quotas/: quota records, organizations, increase requests, the leave saga. */
export const quotasDomain = defineDomain({
  name: 'quotas',
  provides: ['quotas', 'quotaGate'],
  kinds: [requestKind, leaveKind],
  init(gw) {
    const { sql, actors, clock } = gw;
    const values = new QuotaValues(sql);
    const organizations = new Organizations({ sql, actors, clock });
    const leaves = new LeaveSaga({ sql, actors, clock, jobs: gw.jobs, log: gw.log, faults: gw.faults ?? noFaults, access: organizations });
    const requests = new IncreaseRequests({ sql, actors, clock, access: organizations, leaves });
    // each saga step is a durable job; the sweep re-queues steps a crash left behind
    gw.jobs.define<{ leaveId: string }>(LEAVE_STEP_JOB, (data) => leaves.step(data.leaveId), { retryLimit: 10, retryDelay: 1 });
    gw.jobs.define(LEAVE_SWEEP_JOB, async () => { await leaves.sweep(); }, { schedule: '* * * * *', retryLimit: 1 });
    const testHooks: QuotasTestHooks = {
      limit: (accountId, serviceCode, quotaCode) => values.limit(accountId, serviceCode, quotaCode),
      decideRequest: (requestId, decision, caller, reason) => requests.decide(requestId, decision, caller, reason),
    };
    return { quotas: { values, organizations, requests, leaves }, quotaGate: values, testHooks };
  },
  async routes(app, _gw, { quotas }) {
    await quotaRoutes(app, quotas);
  },
  async start(gw, { quotas }) {
    // resume the steps of leaves a previous process left in flight
    const n = await quotas.leaves.sweep();
    if (n) gw.log.info({ leaves: n }, 'leave saga steps resumed');
  },
});
