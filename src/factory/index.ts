import { defineDomain } from '../gateway.js';
import { factoryRoutes, provisioningRoutes } from './routes.js';
import { noFaults } from '../lib/faults.js';
import { FactoryBackends } from './backend.js';
import { ProvisioningSaga, provisioningRunKind } from './provisioning.js';
import { SAGA_JOB, type QueuedJob } from './sagaJobs.js';
import { resealAll, Sealer, type SealedColumn } from '../pki/sealer.js';
import { COLLECT_JOB, DRAIN_JOB, FactoryServices, SWEEP_JOB, factoryServiceKind } from './service.js';
import { ReplayGuard, SignedRequests, SigningIdentities } from './signing.js';
import { servicesOfModel } from './repo.js';

declare module '../gateway.js' {
  interface Services {
    factoryServices: FactoryServices;
    provisioningSaga: ProvisioningSaga;
  }
}

/** What tests of the factory domain trigger below its public interface (RunningGateway.testHooks.factory). */
export interface FactoryTestHooks {
  /** one run of the per-minute sweep (SWEEP_JOB) now: old signatures forgotten, due drains done, deleted services collected */
  sweep(): Promise<void>;
}

declare module '../gateway.js' {
  interface TestHooks {
    factory: FactoryTestHooks;
  }
}

/** The factory domain's sealed columns (re-sealed at start after a sealing-key rotation). */
const SEALED_COLUMNS: SealedColumn[] = [
  { table: 'factory_services', key: 'id', column: 'secret_sealed' },
  { table: 'factory_services', key: 'id', column: 'pending_secret_sealed' },
];

/** Domain module of src/factory/: factory services, SVC-HMAC-SHA256 signed requests, the PROVISION saga. */
export const factoryDomain = defineDomain({
  name: 'factory',
  provides: ['factoryServices', 'provisioningSaga'],
  requires: ['thingLifecycle', 'registrarDirectory', 'models'],
  kinds: [factoryServiceKind, provisioningRunKind],
  init(gw, { thingLifecycle, registrarDirectory, models }) {
    const sealer = new Sealer(gw.pki.sealingKeys);
    const { sql, actors, clock, jobs, log } = gw;
    // a model bound to factory services cannot be deleted: trust's 409 counts them through us
    models.referencedBy('factory_services', (modelId) => servicesOfModel(sql, modelId));
    const identities = new SigningIdentities(sql, gw.cluster);
    const factoryServices = new FactoryServices({
      sql, actors, clock, jobs, log, sealer, allowPrivateTargets: gw.config.ALLOW_PRIVATE_TARGETS, signingChanged: (key) => identities.changed(key), registrars: registrarDirectory, models,
      declaredAction: (action) => gw.auth.declares(action),
    });
    const signed = new SignedRequests({ identities, replays: new ReplayGuard(sql), clock, sealer });

    // signed requests carry no Authorization header; verified once the body bytes are read
    gw.auth.registerHeaderScheme('SVC-HMAC-SHA256', (request) => SignedRequests.presents(request.headers), (request) => signed.verify({
      method: request.method,
      target: request.url,
      host: request.headers.host,
      headers: request.headers,
      body: request.rawBody,
    }));

    jobs.define<{ id: string }>(DRAIN_JOB, (data) => factoryServices.drainJob(data.id), { retryLimit: 10, retryDelay: 600 });
    jobs.define<{ id: string }>(COLLECT_JOB, (data) => factoryServices.collect(data.id), { retryLimit: 5 });
    const { config } = gw;
    const provisioningSaga = new ProvisioningSaga({
      sql, actors, clock, jobs, log, sealer, faults: gw.faults ?? noFaults, lifecycle: thingLifecycle,
      backends: new FactoryBackends({ allowPrivateTargets: config.ALLOW_PRIVATE_TARGETS, caFile: config.OUTBOUND_CA_FILE }),
      settings: { attempts: config.PROVISION_LEG_ATTEMPTS, retrySeconds: config.PROVISION_LEG_RETRY_SECONDS, timeoutSeconds: config.PROVISION_LEG_TIMEOUT_SECONDS },
      publicBaseUrl: config.PUBLIC_BASE_URL,
    });
    // the saga's one job kind: each step its run's machine made due. A failed leg call is an answer
    // the machine records, never a job failure; pg-boss redelivers a step only when its handler
    // failed (database error, crash), and the step then does what the machine says at that time.
    // Steps of many runs run side by side (a leg waits on its backend for up to 10 s).
    jobs.define<QueuedJob>(SAGA_JOB, (job) => provisioningSaga.runStep(job), { retryLimit: 5, retryDelay: 5, batchSize: 50 });
    jobs.define(SWEEP_JOB, () => factoryServices.sweep(), { schedule: '* * * * *', retryLimit: 1 });
    const testHooks: FactoryTestHooks = { sweep: () => factoryServices.sweep() };
    return { factoryServices, provisioningSaga, sealer, testHooks };
  },
  async routes(app, _gw, { factoryServices, provisioningSaga }) {
    await factoryRoutes(app, factoryServices);
    await provisioningRoutes(app, provisioningSaga);
  },
  async start(gw, { provisioningSaga, sealer }) {
    // every running run's next step is queued again (duplicates collapse): see ProvisioningSaga.recover
    await provisioningSaga.recover();
    const sealed = await resealAll(gw.sql, sealer, SEALED_COLUMNS);
    if (sealed.unreadable) gw.log.warn(sealed, 'some factory-service secrets open with no sealing key');
    else if (sealed.resealed) gw.log.info(sealed, 'factory-service secrets moved to the current sealing key');
  },
});
