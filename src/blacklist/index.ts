import { defineDomain, type Gateway } from '../gateway.js';
import { blacklistRoutes } from './routes.js';
import { BlacklistService, SWEEP_JOB } from './service.js';
import { SnapshotStore } from './snapshot.js';

const byGateway = new WeakMap<Gateway, { service: BlacklistService; snapshots: SnapshotStore }>();

/**
 * Domain module of src/blacklist/: the identity blacklist. It comes before trust in
 * src/domains.ts: trust asks `blacklist.refuseListed` at enrollment and registers, through
 * `blacklist.onAdded`, the revocation of things whose identity is added.
 */
export const blacklistDomain = defineDomain({
  name: 'blacklist',
  provides: ['blacklist'],
  init(gw) {
    const { sql, actors, clock, log, cluster } = gw;
    const snapshots = new SnapshotStore({ sql, keys: gw.pki.blacklistKeys, cluster, clock, log });
    const service = new BlacklistService({ sql, actors, clock, log, snapshots });
    byGateway.set(gw, { service, snapshots });
    gw.jobs.define(SWEEP_JOB, async () => { await service.sweep(); }, { schedule: '* * * * *', retryLimit: 1 });
    return { blacklist: service };
  },
  async routes(app, gw) {
    const { service, snapshots } = byGateway.get(gw)!;
    await blacklistRoutes(app, service, snapshots, gw.pki.blacklistKeys);
  },
  async start(gw) {
    // a first snapshot (or one behind the log, or signed by a retired key) before edges ask
    await byGateway.get(gw)!.snapshots.ensureFresh().catch((err: unknown) => gw.log.error({ err }, 'identity-blacklist snapshot could not be built at start; the sweep retries'));
  },
});
