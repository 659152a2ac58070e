import { defineDomain, type Gateway } from '../gateway.js';
import type { StoredEvent } from '../actors/store.js';
import { OtaDelivery } from './delivery.js';
import { TargetFilters } from './filters.js';
import { rolloutGroupKind, rolloutKind } from './kinds.js';
import { Rollouts } from './rollouts.js';
import { otaRoutes } from './routes.js';

/** scheduled sweep: tallies the running groups (an evaluation lost with a crash) and re-sends pending actions */
export const OTA_SWEEP_JOB = 'ota.sweep';

interface OtaParts { filters: TargetFilters; rollouts: Rollouts; delivery: OtaDelivery; unsubscribe?: () => void }
const parts = new WeakMap<Gateway, OtaParts>();

/** The OTA parts of a gateway (tests and the benchmark drain its report buffer). */
export const otaOf = (gw: Gateway): OtaParts | undefined => parts.get(gw);

/**
 * OTA rollouts (issue 20 items 2 and 3): target filters over the fleet registry, rollouts in groups
 * with success and error thresholds (actors), update actions delivered over MQTT through the
 * broker's `deviceMessaging`. After the broker: it uses the broker's service.
 */
export const otaDomain = defineDomain({
  name: 'ota',
  requires: ['thingSearch', 'deviceMessaging'],
  kinds: [rolloutKind, rolloutGroupKind],
  init(gw, { thingSearch, deviceMessaging }) {
    const filters = new TargetFilters(gw.sql, thingSearch, () => gw.clock.now());
    const rollouts = new Rollouts(gw, filters, thingSearch);
    const delivery = new OtaDelivery(gw, deviceMessaging, rollouts, gw.metrics);
    parts.set(gw, { filters, rollouts, delivery });
    gw.jobs.define(OTA_SWEEP_JOB, async () => {
      for (const groupId of await rollouts.runningGroups()) await rollouts.evaluate(groupId);
      await delivery.resend();
    }, { schedule: '* * * * *', retryLimit: 1 });
  },
  async routes(app, gw) {
    const p = parts.get(gw)!;
    await otaRoutes(app, p.filters, p.rollouts);
  },
  async start(gw) {
    const p = parts.get(gw)!;
    // every node hears every revocation; skipping is idempotent and the sweep's evaluations catch a lost one
    const handler = (ev: StoredEvent) => {
      void p.rollouts.revoked(ev.actorId).catch((err) => gw.log.error({ err, thingId: ev.actorId }, 'OTA actions of a revoked thing not skipped (the sweep retries)'));
    };
    gw.bus.on('thing.revoked', handler);
    p.unsubscribe = () => gw.bus.off('thing.revoked', handler);
  },
  async stop(gw) {
    const p = parts.get(gw);
    p?.unsubscribe?.();
    await p?.delivery.drain();
  },
});
