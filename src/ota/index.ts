import { defineDomain } from '../gateway.js';
import type { StoredEvent } from '../actors/store.js';
import { Listening } from '../lib/listening.js';
import { OtaReports, OtaSender } from './delivery.js';
import { TargetFilters } from './filters.js';
import { rolloutGroupKind, rolloutKind } from './kinds.js';
import { Rollouts } from './rollouts.js';
import { otaRoutes } from './routes.js';

/** scheduled sweep: tallies the running groups (an evaluation lost with a crash) and re-sends pending actions */
export const OTA_SWEEP_JOB = 'ota.sweep';

/** What tests of OTA wait for below its public interface (RunningGateway.testHooks.ota). */
export interface OtaTestHooks {
  /** resolves once the devices' buffered status reports are written and the groups they ended evaluated */
  drain(): Promise<void>;
}

declare module '../gateway.js' {
  interface TestHooks {
    ota: OtaTestHooks;
  }
}

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
    const sender = new OtaSender(gw, deviceMessaging);
    const rollouts = new Rollouts(gw, filters, thingSearch, sender);
    const reports = new OtaReports(gw, deviceMessaging, rollouts, gw.metrics);
    gw.jobs.define(OTA_SWEEP_JOB, async () => {
      for (const groupId of await rollouts.runningGroups()) await rollouts.evaluate(groupId);
      await sender.resend();
    }, { schedule: '* * * * *', retryLimit: 1 });
    // every node hears every revocation; skipping is idempotent and the sweep's evaluations catch a lost one
    const revocations = new Listening(gw.bus, ['thing.revoked'], (ev: StoredEvent) => {
      void rollouts.revoked(ev.actorId).catch((err) => gw.log.error({ err, thingId: ev.actorId }, 'OTA actions of a revoked thing not skipped (the sweep retries)'));
    });
    const testHooks: OtaTestHooks = { drain: () => reports.drain() };
    return { filters, rollouts, reports, revocations, testHooks };
  },
  async routes(app, _gw, { filters, rollouts }) {
    await otaRoutes(app, filters, rollouts);
  },
  async start(_gw, { revocations }) {
    revocations.start();
  },
  async stop(_gw, { revocations, reports }) {
    revocations.stop();
    await reports.drain();
  },
});
