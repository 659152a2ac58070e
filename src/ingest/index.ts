import { defineDomain } from '../gateway.js';
import { noFaults } from '../lib/faults.js';
import { ingestRoutes } from './routes.js';
import { IngestService, RUN_JOB, SWEEP_JOB, ingestJobKind } from './service.js';

declare module '../gateway.js' {
  interface Services {
    ingest: IngestService;
  }
}

/** What tests of ingest trigger below its public interface (RunningGateway.testHooks.ingest). */
export interface IngestTestHooks {
  /** switches this node's intake off or on, as start and stop do (the 503 of a starting or stopping node) */
  setAccepting(on: boolean): void;
  /** one run of the hourly retention sweep now (expired job errors and idempotency keys) */
  sweep(): Promise<void>;
}

declare module '../gateway.js' {
  interface TestHooks {
    ingest: IngestTestHooks;
  }
}

/** Domain module of src/ingest/: /wms-ingest/v1 batches, bulk jobs, quarantine, warehouses. */
export const ingestDomain = defineDomain({
  name: 'ingest',
  provides: ['ingest'],
  kinds: [ingestJobKind],
  init(gw) {
    const ingest = new IngestService({
      sql: gw.sql, actors: gw.actors, clock: gw.clock, jobs: gw.jobs, log: gw.log.child({ component: 'ingest' }), faults: gw.faults ?? noFaults,
      baseUrl: gw.config.PUBLIC_BASE_URL, jobMaxItems: gw.config.INGEST_JOB_MAX_ITEMS,
    });
    // one job runs its chunks in order; a retry resumes from the last committed chunk
    gw.jobs.define<{ id: string }>(RUN_JOB, (data) => ingest.runJob(data.id), { retryLimit: 5, retryDelay: 5, expireInSeconds: 900 });
    gw.jobs.define(SWEEP_JOB, () => ingest.sweep(), { schedule: '17 * * * *', retryLimit: 1 });
    const testHooks: IngestTestHooks = { setAccepting: (on) => ingest.setAccepting(on), sweep: () => ingest.sweep() };
    return { ingest, testHooks };
  },
  async routes(app, gw, { ingest }) {
    await ingestRoutes(app, gw, ingest);
  },
  async start(gw, { ingest }) {
    ingest.setAccepting(true);
    if (!gw.config.JOBS) return;
    const resumed = await ingest.resumeJobs();
    if (resumed) gw.log.info({ resumed }, 'ingest jobs not completed were queued again');
  },
  stop(_gw, { ingest }) {
    ingest.setAccepting(false);
    return Promise.resolve();
  },
});
