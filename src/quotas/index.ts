import type { DomainModule, Gateway, ZodApp } from '../gateway.js';
import { quotaRoutes } from './routes.js';
import { LEAVE_STEP_JOB, LEAVE_SWEEP_JOB, QuotasService } from './service.js';

declare module '../gateway.js' {
  interface Services {
    quotas: QuotasService;
  }
}

/** Domain module of src/quotas/: quota records, organizations, increase requests, the leave saga. */
export const quotasDomain: DomainModule = {
  name: 'quotas',
  init(gw: Gateway) {
    const svc = new QuotasService(gw);
    gw.services.quotas = svc;
    gw.services.quotaGate = svc;
    // each saga step is a durable job; the sweep re-queues steps a crash left behind
    gw.jobs.define<{ leaveId: string }>(LEAVE_STEP_JOB, (data) => svc.leaveStep(data.leaveId), { retryLimit: 10, retryDelay: 1 });
    gw.jobs.define(LEAVE_SWEEP_JOB, async () => { await svc.sweep(); }, { schedule: '* * * * *', retryLimit: 1 });
  },
  async routes(app: ZodApp, gw: Gateway) {
    await quotaRoutes(app, gw);
  },
  async start(gw: Gateway) {
    // resume the steps of leaves a previous process left in flight
    const n = await gw.services.quotas!.sweep();
    if (n) gw.log.info({ leaves: n }, 'leave saga steps resumed');
  },
};
