import { defineDomain } from '../gateway.js';
import { resealAll, Sealer, type SealedColumn } from '../pki/sealer.js';
import { BridgesRepo } from './repo.js';
import { bridgeRoutes } from './routes.js';
import { BridgesService, bridgeRuleKind } from './service.js';
import { BridgeWorker, DEFAULT_WORKER } from './worker.js';

const SEALED_COLUMNS: SealedColumn[] = [{ table: 'bridges', key: 'id', column: 'secret_sealed' }];

/**
 * Domain module of src/bridges/: data bridges (NATS JetStream, RabbitMQ sinks), the rules routing
 * an account's telemetry and events to them, and their delivery from durable positions (issue 34).
 */
export const bridgesDomain = defineDomain({
  name: 'bridges',
  kinds: [bridgeRuleKind],
  requires: ['telemetryLog', 'deviceLog', 'thingSearch'],
  init(gw, { telemetryLog, deviceLog, thingSearch }) {
    const { sql, actors, clock, log, config } = gw;
    const sealer = new Sealer(gw.pki.sealingKeys);
    const repo = new BridgesRepo(sql);
    const service = new BridgesService({
      sql, repo, actors, clock, log: log.child({ component: 'bridges' }), sealer, telemetryLog, deviceLog,
      failingAfterMs: config.BRIDGE_FAILING_AFTER_SECONDS * 1000, telemetryHistory: config.TELEMETRY_HISTORY, onChange: () => worker.wake(),
    });
    const worker = new BridgeWorker({
      repo, service, telemetryLog, deviceLog, thingSearch, clock, log: log.child({ component: 'bridge-delivery' }), node: gw.cluster.nodeId, registry: gw.metrics,
      settings: { ...DEFAULT_WORKER, retryMaxMs: config.BRIDGE_RETRY_MAX_MS, leaseSeconds: config.BRIDGE_LEASE_SECONDS, leaseEveryMs: config.BRIDGE_LEASE_SECONDS * 250, deliveryThread: config.BRIDGE_DELIVERY_THREAD },
    });
    return { sealer, service, worker };
  },
  async routes(app, _gw, { service }) {
    await bridgeRoutes(app, service);
  },
  async start(gw, { sealer, worker }) {
    const sealed = await resealAll(gw.sql, sealer, SEALED_COLUMNS);
    if (sealed.unreadable) gw.log.warn(sealed, 'some bridge credentials open with no sealing key');
    if (!gw.config.JOBS) return;
    worker.start();
  },
  async stop(_gw, { worker }) {
    await worker.stop();
  },
});
