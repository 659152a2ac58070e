import type { DomainModule, Gateway } from '../gateway.js';
import { Broker } from './broker.js';
import { redisAedesOptions } from './cluster.js';
import { CommandRouter } from './commands.js';
import { CrlWatcher } from './crl.js';
import { IngestBuffer } from './ingest.js';
import { registerBrokerMetrics } from './metrics.js';
import { BrokerRepo } from './repo.js';
import { brokerRoutes } from './routes.js';
import { DeviceService } from './service.js';
import { ClusterSessions } from './sessions.js';

declare module '../gateway.js' {
  interface Services {
    broker: Broker;
    devices: DeviceService;
  }
}

/** seconds without a heartbeat after which a broker node's sessions count as gone */
const NODE_TTL_SECONDS = 20;

const parts = new WeakMap<Gateway, { ingest: IngestBuffer; sessions: ClusterSessions; crl?: CrlWatcher; commands?: CommandRouter }>();

/**
 * The embedded MQTT broker (mutual TLS, CRL, per-device ACL) on MQTT_PORT, device traffic
 * (lifecycle, heartbeat, telemetry, twin, commands), the tenant device endpoints and
 * `deviceSessions` (cluster-wide disconnect).
 */
export const brokerDomain: DomainModule = {
  name: 'broker',
  init(gw: Gateway) {
    const repo = new BrokerRepo(gw.sql);
    const ingest = new IngestBuffer(repo, gw.log.child({ component: 'ingest' }));
    const devices = new DeviceService(gw, repo, ingest);
    const sessions = new ClusterSessions(gw, () => gw.services.broker, () => parts.get(gw)?.crl);
    gw.services.devices = devices;
    gw.services.deviceSessions = sessions;
    parts.set(gw, { ingest, sessions });
    registerBrokerMetrics(gw.metrics, () => gw.services.broker, ingest);
  },
  async routes(app, gw) {
    await brokerRoutes(app, gw, gw.services.devices!);
  },
  async start(gw: Gateway) {
    const p = parts.get(gw)!;
    const devices = gw.services.devices!;
    const repo = new BrokerRepo(gw.sql);
    await p.sessions.start();
    await repo.releaseDeadNodes(gw.cluster.nodeId, NODE_TTL_SECONDS);
    const broker = await Broker.start({
      host: gw.config.MQTT_HOST,
      port: gw.config.MQTT_PORT,
      pki: gw.pki,
      log: gw.log.child({ component: 'broker' }),
      aedes: { id: gw.cluster.nodeId, ...(gw.config.REDIS_URL ? redisAedesOptions(gw.config.REDIS_URL) : {}) },
      hooks: devices.hooks(),
    });
    gw.services.broker = broker;
    devices.broker = broker;
    p.crl = new CrlWatcher(gw, broker);
    await p.crl.start();
    p.commands = new CommandRouter(broker);
    await p.commands.start();
    devices.commands = p.commands;
    p.ingest.start();
  },
  async stop(gw: Gateway) {
    const p = parts.get(gw);
    if (gw.services.devices) gw.services.devices.stopping = true;
    p?.crl?.stop();
    await p?.commands?.stop().catch(() => {});
    await gw.services.broker?.close();
    await p?.ingest.stop();
    await p?.sessions.stop();
  },
  ready: (gw: Gateway) => Boolean(gw.services.broker?.server.listening),
};
