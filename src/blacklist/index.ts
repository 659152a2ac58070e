import { defineDomain } from '../gateway.js';
import { BlacklistFollower } from './follower.js';
import { blacklistRoutes } from './routes.js';
import { BlacklistService, SWEEP_JOB } from './service.js';
import { SnapshotStore } from './snapshot.js';
import { ListIndex } from './listIndex.js';

/** What tests of the blacklist trigger below its public interface (RunningGateway.testHooks.blacklist). */
export interface BlacklistTestHooks {
  /** one run of the scheduled sweep (SWEEP_JOB) now: enforcement of unsettled adds, pruning, snapshot, index */
  sweep(): Promise<{ enforced: number; pruned: number }>;
}

declare module '../gateway.js' {
  interface TestHooks {
    blacklist: BlacklistTestHooks;
  }
}

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
    const index = new ListIndex({ sql, log });
    const service = new BlacklistService({ sql, actors, clock, log, snapshots, index });
    const follower = new BlacklistFollower({ bus: gw.bus, log, index, snapshots });
    gw.jobs.define(SWEEP_JOB, async () => { await service.sweep(); }, { schedule: '* * * * *', retryLimit: 1 });
    const testHooks: BlacklistTestHooks = { sweep: () => service.sweep() };
    return { blacklist: service, snapshots, follower, testHooks };
  },
  async routes(app, gw, { blacklist, snapshots }) {
    await blacklistRoutes(app, blacklist, snapshots, gw.pki.blacklistKeys);
  },
  async start(_gw, { follower }) {
    await follower.start();
  },
  async stop(_gw, { follower }) {
    follower.stop();
  },
});
