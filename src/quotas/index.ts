import { defineDomain } from '../gateway.js';
import { quotaRoutes } from './routes.js';
import { LEAVE_STEP_JOB, LEAVE_SWEEP_JOB, leaveKind, QuotasService, requestKind } from './service.js';

declare module '../gateway.js' {
  interface Services {
    quotas: QuotasService;
  }
}

/** Domain module of src/quotas/: quota records, organizations, increase requests, the leave saga. */
export const quotasDomain = defineDomain({
  name: 'quotas',
  provides: ['quotas', 'quotaGate'],
  kinds: [requestKind, leaveKind],
  init(gw) {
    const svc = new QuotasService(gw);
    // each saga step is a durable job; the sweep re-queues steps a crash left behind
    gw.jobs.define<{ leaveId: string }>(LEAVE_STEP_JOB, (data) => svc.leaveStep(data.leaveId), { retryLimit: 10, retryDelay: 1 });
    gw.jobs.define(LEAVE_SWEEP_JOB, async () => { await svc.sweep(); }, { schedule: '* * * * *', retryLimit: 1 });
    return { quotas: svc, quotaGate: svc };
  },
  async routes(app, _gw, { quotas }) {
    await quotaRoutes(app, quotas);
  },
  async start(gw, { quotas }) {
    // resume the steps of leaves a previous process left in flight
    const n = await quotas.sweep();
    if (n) gw.log.info({ leaves: n }, 'leave saga steps resumed');
  },
});
