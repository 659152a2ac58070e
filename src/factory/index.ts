import { defineDomain } from '../gateway.js';
import { factoryRoutes } from './routes.js';
import { resealAll, Sealer, type SealedColumn } from '../pki/sealer.js';
import { COLLECT_JOB, DRAIN_JOB, FactoryServices, SWEEP_JOB, factoryServiceKind } from './service.js';
import { ReplayGuard, SignedRequests, SigningIdentities } from './signing.js';

declare module '../gateway.js' {
  interface Services {
    factoryServices: FactoryServices;
  }
}

/** The factory domain's sealed columns (re-sealed at start after a sealing-key rotation). */
const SEALED_COLUMNS: SealedColumn[] = [
  { table: 'factory_services', key: 'id', column: 'secret_sealed' },
  { table: 'factory_services', key: 'id', column: 'pending_secret_sealed' },
];
const sealers = new WeakMap<object, Sealer>();

/** Domain module of src/factory/: factory services and SVC-HMAC-SHA256 signed requests. */
export const factoryDomain = defineDomain({
  name: 'factory',
  provides: ['factoryServices'],
  kinds: [factoryServiceKind],
  init(gw) {
    const sealer = new Sealer(gw.pki.sealingKeys);
    sealers.set(gw, sealer);
    const { sql, actors, clock, jobs, log } = gw;
    const identities = new SigningIdentities(sql, gw.cluster);
    const factoryServices = new FactoryServices({
      sql, actors, clock, jobs, log, sealer, allowPrivateTargets: gw.config.ALLOW_PRIVATE_TARGETS, signingChanged: (key) => identities.changed(key),
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
    jobs.define(SWEEP_JOB, () => factoryServices.sweep(), { schedule: '* * * * *', retryLimit: 1 });
    return { factoryServices };
  },
  async routes(app, _gw, { factoryServices }) {
    await factoryRoutes(app, factoryServices);
  },
  async start(gw) {
    const sealed = await resealAll(gw.sql, sealers.get(gw)!, SEALED_COLUMNS);
    if (sealed.unreadable) gw.log.warn(sealed, 'some factory-service secrets open with no sealing key');
    else if (sealed.resealed) gw.log.info(sealed, 'factory-service secrets moved to the current sealing key');
  },
});
