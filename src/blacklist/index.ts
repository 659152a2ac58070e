import { defineDomain, type Gateway } from '../gateway.js';
import type { StoredEvent } from '../actors/store.js';
import { blacklistRoutes } from './routes.js';
import { BlacklistService, SWEEP_JOB, TICK_MS } from './service.js';
import { SnapshotStore } from './snapshot.js';
import { ListIndex } from './listIndex.js';

interface Parts { service: BlacklistService; snapshots: SnapshotStore; index: ListIndex; tick?: NodeJS.Timeout; off?: () => void }
const byGateway = new WeakMap<Gateway, Parts>();

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
    byGateway.set(gw, { service, snapshots, index });
    gw.jobs.define(SWEEP_JOB, async () => { await service.sweep(); }, { schedule: '* * * * *', retryLimit: 1 });
    return { blacklist: service };
  },
  async routes(app, gw) {
    const { service, snapshots } = byGateway.get(gw)!;
    await blacklistRoutes(app, service, snapshots, gw.pki.blacklistKeys);
  },
  async start(gw) {
    const parts = byGateway.get(gw)!;
    const { index, snapshots } = parts;
    const fail = (what: string) => (err: unknown) => gw.log.error({ err }, `identity blacklist: ${what} failed; retried within a minute`);
    // every node's copy follows every node's changes (domain events reach each node once)
    const follow = (_event: StoredEvent) => { index.catchUp().catch(fail('index catch-up')); };
    gw.bus.on('blacklist.added', follow);
    gw.bus.on('blacklist.removed', follow);
    parts.off = () => {
      gw.bus.off('blacklist.added', follow);
      gw.bus.off('blacklist.removed', follow);
    };
    // without a notification too: a lost NOTIFY leaves a copy behind for one tick at most
    parts.tick = setInterval(() => {
      index.catchUp().catch(fail('index catch-up'));
      snapshots.recheck().catch(fail('snapshot recheck'));
    }, TICK_MS).unref();
    await index.catchUp().catch(fail('index load'));
    // a first snapshot (or one behind the log, or signed by a retired key) before edges ask
    await snapshots.ensureFresh().catch(fail('snapshot build'));
  },
  async stop(gw) {
    const parts = byGateway.get(gw)!;
    clearInterval(parts.tick);
    parts.off?.();
  },
});
