import { defineDomain } from '../gateway.js';
import { noFaults } from '../lib/faults.js';
import { IncreaseRequests } from './increaseRequests.js';
import { leaveKind, requestKind } from './kinds.js';
import { LEAVE_STEP_JOB, LEAVE_SWEEP_JOB, LeaveSaga } from './leaveSaga.js';
import { Organizations } from './organizations.js';
import type { Quotas } from './parts.js';
import { QuotaValues } from './quotaValues.js';
import { quotaRoutes } from './routes.js';

declare module '../gateway.js' {
  interface Services {
    quotas: Quotas;
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
    return { quotas: { values, organizations, requests, leaves }, quotaGate: values };
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
