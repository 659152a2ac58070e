import { Counter, Gauge } from 'prom-client';
import type { Client } from 'aedes';
import { defineDomain, type CertificateUse, type Gateway } from '../gateway.js';
import { Broker, clientCertificate, type BrokerHooks } from './broker.js';
import type { Logger } from '../log.js';
import { redisAedesOptions } from './cluster.js';
import { CommandRouter } from './commands.js';
import { ConnectivityHub } from './connectivityStream.js';
import { CrlWatcher } from './crl.js';
import { DeviceMessageLog } from './deviceLog.js';
import { HaproxyRuntime } from './haproxyRuntime.js';
import { isTrustedProxy } from '../http/trustedProxies.js';
import { DeviceChannel } from './messaging.js';
import { BrokerHost } from './host.js';
import { IngestBuffer } from './ingest.js';
import { registerBrokerMetrics } from './metrics.js';
import { MqttRenewal } from './renewal.js';
import { OfflineCommands, EXPIRE_COMMANDS_JOB, deviceCommandKind } from './offlineCommands.js';
import { offlineCommandRoutes } from './offlineCommandRoutes.js';
import { BrokerRepo } from './repo.js';
import { workerEmitter } from './workerEmitter.js';
import { isNodeWorker, nodeTicketKeys } from '../multicore.js';
import { brokerRoutes, connectivityStreamRoute } from './routes.js';
import { ConnectedDeviceService } from './service.js';
import { ClusterSessions } from './sessions.js';
import { TelemetryHistory, TelemetryHistoryRepo, TelemetryLog } from './telemetryHistory.js';
import { RecentHistory } from './recentHistory.js';

declare module '../gateway.js' {
  interface Services {
    /** the broker's runtime (the running Broker once started) */
    brokerHost: BrokerHost;
    devices: ConnectedDeviceService;
    /** the telemetry history as a durable log read from a position (data bridges) */
    telemetryLog: TelemetryLog;
    /** the twin reports and command replies devices published, as a durable log read from a position (data bridges) */
    deviceLog: DeviceMessageLog;
  }
}

/** seconds without a heartbeat after which a broker node's sessions count as gone */
const NODE_TTL_SECONDS = 20;
/** creates telemetry history partitions ahead and drops those past retention */
const HISTORY_PARTITIONS_JOB = 'telemetry.partitions';
/** deletes the device message log's rows past the telemetry history's retention */
const DEVICE_LOG_JOB = 'broker.device-log-retention';

/** What tests of the broker observe and do below its public interface (RunningGateway.testHooks.broker); each throws while the broker is not running. */
export interface BrokerTestHooks {
  /** device publishes the fast lane took on this node (a figure of the implementation: no metric) */
  fastLaneTaken(): number;
  /** whether this node holds an MQTT session of the device now (the connectivity route reads the log written in batches) */
  isConnected(thingId: string): boolean;
  /** publishes as the gateway on any topic */
  publish(packet: Parameters<Broker['publish']>[0]): Promise<void>;
  /** Aedes' client of a device connected to this node: the socket and parser the fast lane works on */
  aedesClient(thingId: string): Client | undefined;
  /** loads the CRL again now (a new TLS secure context) */
  reloadCrl(): Promise<void>;
  /** ports of MQTT_PROXY_PORT and MQTT_WS_PORT when configured (0 in the settings: the port picked) */
  listenerPorts(): { proxy?: number; ws?: number };
}

declare module '../gateway.js' {
  interface TestHooks {
    broker: BrokerTestHooks;
  }
}

/**
 * Cluster-wide device sessions: a disconnect reaches whichever node holds the device. Its own
 * module, before trust (revocation disconnects), while the broker itself needs trust's CRL.
 */
export const deviceSessionsDomain = defineDomain({
  name: 'device-sessions',
  provides: ['deviceSessions', 'mqttEndpoint', 'brokerHost'],
  init(gw) {
    const host = new BrokerHost();
    const sessions = new ClusterSessions(gw, host);
    return { deviceSessions: sessions, mqttEndpoint: host, brokerHost: host };
  },
  async start(_gw, { deviceSessions }) {
    await deviceSessions.start();
  },
  async stop(_gw, { deviceSessions }) {
    await deviceSessions.stop();
  },
});

/**
 * The embedded MQTT broker (mutual TLS, CRL, per-device ACL) on MQTT_PORT, device traffic
 * (lifecycle, heartbeat, telemetry, twin, commands) and the tenant device endpoints.
 */
export const brokerDomain = defineDomain({
  name: 'broker',
  provides: ['devices', 'deviceMessaging', 'telemetryLog', 'deviceLog'],
  requires: ['brokerHost', 'crl', 'thingDirectory', 'deviceSessions', 'certificateUse', 'certificateRenewal'],
  kinds: [deviceCommandKind],
  init(gw, { brokerHost, thingDirectory, certificateRenewal }) {
    const repo = new BrokerRepo(gw.sql);
    const historyRepo = new TelemetryHistoryRepo(gw.sql);
    const history = new TelemetryHistory(historyRepo, gw.config.TELEMETRY_RETENTION_DAYS, gw.log.child({ component: 'telemetry-history' }));
    // the rows written last, in memory for the log's readers at its head (data bridges)
    const recent = new RecentHistory(gw.config.TELEMETRY_RECENT_MB * 1024 * 1024);
    const ingest = new IngestBuffer(repo, gw.log.child({ component: 'ingest' }), gw.config.TELEMETRY_HISTORY ? historyRepo : undefined, gw.config.TELEMETRY_BATCH_BYTES, undefined, recent);
    const deviceLog = new DeviceMessageLog(gw.sql, gw.log.child({ component: 'device-log' }));
    const devices = new ConnectedDeviceService(gw, repo, ingest, brokerHost, thingDirectory, deviceLog);
    const offline = new OfflineCommands(gw, brokerHost);
    const streamsCut = new Counter({ name: 'device_streams_cut_total', help: 'Connectivity and telemetry streams dropped because their unsent backlog passed 1 MiB', labelNames: ['stream'], registers: [gw.metrics] });
    const connectivity = new ConnectivityHub(gw.bus, gw.config.SSE_HEARTBEAT_SECONDS * 1000, () => streamsCut.inc({ stream: 'connectivity' }));
    const channel = new DeviceChannel(brokerHost, gw.log.child({ component: 'device-messaging' }));
    const renewal = new MqttRenewal(gw, certificateRenewal);
    gw.jobs.define(DEVICE_LOG_JOB, async () => void (await deviceLog.prune(gw.config.TELEMETRY_RETENTION_DAYS)), { schedule: '17 * * * *', retryLimit: 1 });
    gw.jobs.define(EXPIRE_COMMANDS_JOB, async () => void (await offline.expireDue()), { schedule: '* * * * *', retryLimit: 1 });
    // hourly: partitions stay DAYS_AHEAD days ahead and retention is applied (also run at start)
    gw.jobs.define(HISTORY_PARTITIONS_JOB, () => history.maintain(), { schedule: '7 * * * *', retryLimit: 1 });
    const telemetryLog = new TelemetryLog(gw.sql, recent);
    registerBrokerMetrics(gw.metrics, () => brokerHost.broker, ingest, telemetryLog);
    new Gauge({ name: 'connectivity_streams_open', help: 'Open connectivity streams (WebSocket) on this node', registers: [gw.metrics], collect() {
      this.set(connectivity.size);
    } });
    return { devices, deviceMessaging: channel, telemetryLog, deviceLog, repo, history, ingestBuffer: ingest, offline, connectivity, renewal, streamsCut, testHooks: brokerTestHooks(brokerHost) };
  },
  async routes(app, gw, { devices, deviceSessions, offline, history, connectivity, streamsCut }) {
    await brokerRoutes(app, gw, devices, deviceSessions, offline, history, () => streamsCut.inc({ stream: 'telemetry' }));
    await offlineCommandRoutes(app, devices, offline);
    await connectivityStreamRoute(app, devices, connectivity);
  },
  async start(gw, { devices, brokerHost, crl: crlSource, certificateUse, repo, history, ingestBuffer, offline, connectivity, renewal, deviceMessaging: channel, deviceLog }) {
    await repo.releaseDeadNodes(gw.cluster.nodeId, NODE_TTL_SECONDS);
    // the partitions of today and the next days exist before the first message is written
    await history.maintain();
    // the TLS terminators allowed to send PROXY headers (the same list and parsing as HTTP's forwarding headers)
    const trusted = (address: string | undefined) => isTrustedProxy(address, gw.config.TRUSTED_PROXIES);
    const broker = await Broker.start({
      host: gw.config.MQTT_HOST,
      port: gw.config.MQTT_PORT,
      pki: gw.pki,
      log: gw.log.child({ component: 'broker' }),
      aedes: { id: gw.cluster.nodeId, ...aedesEmitter(gw) },
      hooks: withCertificateUse(devices.hooks(), certificateUse, gw.log),
      // the workers of a multi-core node share one set: a device resumes its TLS session on any of them
      ...(isNodeWorker(gw.config) ? { ticketKeys: await nodeTicketKeys() } : {}),
      // behind a TLS terminator (docs/haproxy-mqtt-tls.cfg) and MQTT over WebSocket: off unless configured
      ...(gw.config.MQTT_PROXY_PORT !== undefined ? { proxy: { port: gw.config.MQTT_PROXY_PORT, trusted } } : {}),
      ...(gw.config.MQTT_WS_PORT !== undefined ? { ws: { port: gw.config.MQTT_WS_PORT, behindProxy: gw.config.MQTT_WS_BEHIND_PROXY, trusted } } : {}),
    });
    const haproxy = gw.config.HAPROXY_RUNTIME_API.length > 0 && gw.config.HAPROXY_CRL_PATH
      ? new HaproxyRuntime({ sockets: gw.config.HAPROXY_RUNTIME_API, crlFile: gw.config.HAPROXY_CRL_PATH, log: gw.log.child({ component: 'haproxy-runtime' }) })
      : undefined;
    const crl = new CrlWatcher(gw, broker, crlSource, haproxy);
    await crl.start();
    const commands = new CommandRouter(broker);
    await commands.start();
    brokerHost.attach({ broker, crl, commands });
    await offline.start(broker);
    renewal.start(broker);
    await channel.start(broker);
    ingestBuffer.start();
    connectivity.start();
  },
  async stop(_gw, { devices, brokerHost, ingestBuffer, offline, connectivity, renewal, deviceMessaging: channel, deviceLog }) {
    // stop runs only after start succeeded: the broker is running
    const { broker, crl, commands } = brokerHost.runtime();
    devices.beginStop();
    connectivity.stop();
    crl.stop();
    await offline.stop().catch(() => {});
    renewal.stop();
    await channel.stop().catch(() => {});
    await commands.stop().catch(() => {});
    await broker.close();
    brokerHost.detach();
    // the devices of this node are disconnected now: record it before the database closes
    await devices.drainDisconnects();
    await deviceLog.stop();
    await ingestBuffer.stop();
  },
  ready: (_gw, { brokerHost }) => brokerHost.listening,
});

function brokerTestHooks(host: BrokerHost): BrokerTestHooks {
  const broker = () => host.runtime().broker;
  return {
    fastLaneTaken: () => broker().stats.fastLane,
    isConnected: (thingId) => broker().isConnected(thingId),
    publish: (packet) => broker().publish(packet),
    aedesClient: (thingId) => broker().client(thingId),
    reloadCrl: () => host.runtime().crl.refresh(),
    listenerPorts: () => ({ proxy: broker().proxyListener?.port, ws: broker().wsListener?.port }),
  };
}

/**
 * Where Aedes routes messages between nodes: Redis in cluster mode (REDIS_URL, also between the
 * workers of a multi-core node), IPC between the workers of a multi-core node without Redis, or
 * nowhere (one process: Aedes' in-memory emitter).
 */
function aedesEmitter(gw: Gateway) {
  if (gw.config.REDIS_URL) return redisAedesOptions(gw.config.REDIS_URL);
  if (isNodeWorker(gw.config)) return { mq: workerEmitter() as never };
  return {};
}

/** Tells trust of every accepted CONNECT's certificate: a renewed certificate's first use revokes the older ones. */
function withCertificateUse(hooks: BrokerHooks, use: CertificateUse, log: Logger): BrokerHooks {
  return {
    ...hooks,
    connected(client) {
      hooks.connected?.(client);
      const cert = clientCertificate(client);
      // notBefore: certificates older than the last renewal need no database round trip (trust/firstUse.ts)
      if (cert) use.used(client.id, cert.serial, cert.notBefore).catch((err) => log.error({ err, thingId: client.id }, 'certificate use not recorded'));
    },
  };
}
