import crypto from 'node:crypto';
import { isIP } from 'node:net';
import mqtt, { type MqttClient } from 'mqtt';
import { CredentialStore, type DeviceCredentials } from './credentials.js';
import { Stats } from './stats.js';
import { joinOta } from './ota.js';
import { gatewayClient, type GatewayClient } from '../clients/api.js';

export type Scenario = 'steady' | 'reconnect-storm' | 'revoke';

export interface SimOptions {
  baseUrl: string;
  /** tenant bearer token; without it a development token of `accountId` is fetched (dev issuer) */
  token?: string;
  accountId?: string;
  devices: number;
  concurrency: number;
  dir: string;
  /** telemetry messages per second per device */
  rate: number;
  durationSeconds: number;
  scenario: Scenario;
  /** devices revoked mid-run in the `revoke` scenario */
  revokeCount: number;
  protocolVersion: 4 | 5;
  manufacturer: string;
  model: string;
  serialPrefix: string;
  /** override the broker address of the enrollment response */
  mqttHost?: string;
  mqttPort?: number;
  /** share of OTA updates that fail (0 to 1) */
  otaFailRate?: number;
  /** milliseconds between two OTA reports of a device */
  otaStepMs?: number;
  /** called once the fleet is connected, before its traffic starts, with the tenant it runs as (the CLI's --bridge sets up its rule here) */
  beforeTraffic?: (tenant: { baseUrl: string; token: string; accountId: string }) => Promise<void>;
}

/** Progress callbacks (the CLI draws bars; tests pass none). */
export interface Progress {
  start(phase: string, total: number): void;
  increment(phase: string, n?: number): void;
  update(phase: string, value: number, payload?: Record<string, unknown>): void;
  stop(): void;
}

const noProgress: Progress = { start() {}, increment() {}, update() {}, stop() {} };

export interface SimSummary {
  scenario: Scenario;
  devices: number;
  enrolled: number;
  reused: number;
  enrollmentsPerSecond: number | null;
  connected: number;
  connectLatencyMs: { p50: number | null; p99: number | null };
  reconnectLatencyMs: { p50: number | null; p99: number | null };
  messagesSent: number;
  /** of them telemetry (the rest heartbeats) */
  telemetrySent: number;
  messagesPerSecond: number;
  commandsAnswered: number;
  desiredReceived: number;
  otaUpdated: number;
  otaFailed: number;
  revoked: number;
  revokedReconnectsRefused: number;
  /** serials revoked before this run (by an earlier run or an operator): not used again */
  revokedSkipped: string[];
  /** new serials enrolled in place of the revoked ones, so the fleet keeps its size */
  replacements: string[];
  /** connections the platform closed (a kick, a node going away) */
  kicked: number;
  /** kicked devices that connected again (with backoff) */
  reconnectedAfterKick: number;
  /** kicked devices still disconnected when the run ended */
  kickedNotReconnected: number;
  errorCount: number;
  errors: Record<string, number>;
  durationSeconds: number;
}

/** a sensor's reading at its resolution (0.01 °C, 0.1 %RH), as real devices send them */
const round = (v: number, decimals: number) => Math.round(v * 10 ** decimals) / 10 ** decimals;

async function pool<T>(items: T[], concurrency: number, work: (item: T) => Promise<void>): Promise<void> {
  let next = 0;
  const workers = Array.from({ length: Math.min(concurrency, items.length) }, async () => {
    while (next < items.length) await work(items[next++]);
  });
  await Promise.all(workers);
}

/**
 * The gateway's HTTP API through the typed client generated from its OpenAPI document
 * (src/clients/api.ts): a contract change breaks the simulator at compile time. `anon` calls the
 * routes without a bearer token (the development issuer, the device's enrollment).
 */
class Api {
  readonly anon: GatewayClient;
  private client: GatewayClient;

  constructor(private readonly baseUrl: string, private token?: string) {
    this.anon = gatewayClient(baseUrl);
    this.client = gatewayClient(baseUrl, { bearer: token });
  }

  setToken(token: string): void {
    this.token = token;
    this.client = gatewayClient(this.baseUrl, { bearer: token });
  }

  get bearer(): string | undefined {
    return this.token;
  }

  /** the client with the tenant's bearer token */
  get authed(): GatewayClient {
    return this.client;
  }
}

/** A problem's detail, or the answer's text. */
const detailOf = (error: unknown) => (typeof error === 'object' && error !== null ? (error as { detail?: string }).detail : error);

/** Like mqtt.connectAsync, but a connection closed before CONNACK (refused TLS handshake) rejects too. */
function connectOrFail(url: string, options: mqtt.IClientOptions): Promise<MqttClient> {
  return new Promise((resolve, reject) => {
    const client = mqtt.connect(url, options);
    // a refused TLS 1.3 client certificate surfaces only as a closed socket, which mqtt.js may not report
    const timer = setTimeout(() => fail(new Error('no CONNACK (connection refused or timed out)')), (options.connectTimeout ?? 30_000) + 1000);
    const fail = (err: Error) => {
      clearTimeout(timer);
      client.removeAllListeners();
      client.on('error', () => {});
      client.end(true);
      reject(err);
    };
    client.once('connect', () => {
      clearTimeout(timer);
      client.removeAllListeners('offline');
      client.removeAllListeners('end');
      client.removeAllListeners('close');
      client.removeAllListeners('error');
      resolve(client);
    });
    client.once('error', fail);
    client.once('close', () => fail(new Error('connection closed before CONNACK')));
    client.once('offline', () => fail(new Error('connection closed before CONNACK')));
    client.once('end', () => fail(new Error('connection ended before CONNACK')));
    (client.stream as unknown as NodeJS.EventEmitter | undefined)?.once?.('close', () => fail(new Error('socket closed before CONNACK')));
  });
}

/** One simulated device: MQTT 5 over mutual TLS; telemetry, heartbeat, twin; answers commands. */
class SimDevice {
  client?: MqttClient;
  /** set before this device is revoked: the broker's disconnect that follows is not an error */
  revoked = false;
  /** the run is ending: closes are ours, nothing reconnects */
  private stopping = false;
  /** kicked and not connected again yet */
  down = false;
  private timer?: NodeJS.Timeout;
  private retry?: NodeJS.Timeout;
  private trafficOn = false;
  private sent = 0;

  constructor(readonly creds: DeviceCredentials, private readonly opts: SimOptions, private readonly stats: Stats) {}

  private get topic() {
    return `devices/${this.creds.thingId}`;
  }

  async connect(): Promise<void> {
    const host = this.opts.mqttHost ?? this.creds.mqttBrokerUrl.replace(/^mqtts?:\/\//, '').replace(/:\d+$/, '');
    const port = this.opts.mqttPort ?? this.creds.mqttBrokerPort;
    const client = await connectOrFail(`mqtts://${host}:${port}`, {
      key: this.creds.privateKey,
      cert: this.creds.certificate,
      ca: this.creds.caBundlePem,
      servername: isIP(host) ? 'localhost' : host,
      clientId: this.creds.thingId,
      username: this.creds.thingId,
      protocolVersion: this.opts.protocolVersion,
      reconnectPeriod: 0,
      connectTimeout: 30_000,
    });
    this.client = client;
    client.on('error', (err) => {
      if (!this.revoked && this.client === client) this.stats.error('mqtt', err);
    });
    client.once('close', () => {
      if (this.client === client && !this.revoked && !this.stopping) this.kicked();
    });
    client.on('message', (topic, payload, packet) => this.onMessage(topic, payload, packet));
    await client.subscribeAsync([`${this.topic}/commands`, `${this.topic}/twin/desired`], { qos: 1 });
    await joinOta(client, this.creds.thingId, {
      fails: () => Math.random() < (this.opts.otaFailRate ?? 0),
      stepMs: this.opts.otaStepMs,
      onApplied: (_id, ok) => this.stats.count(ok ? 'otaUpdated' : 'otaFailed'),
      onError: (_id, err) => this.stats.error('ota', err),
    });
    await client.publishAsync(`${this.topic}/twin/reported`, JSON.stringify({ firmware: '1.0.0', simulated: true }), { qos: 1 });
    this.stats.count('messages');
  }

  /**
   * The platform closed the connection (a kick from the sessions API, a node stopping): count it
   * and connect again with exponential backoff and jitter (0.5 s doubling up to 30 s), as firmware
   * should, until it works or the run ends.
   */
  private kicked(): void {
    this.stats.count('kicked');
    this.client = undefined;
    this.down = true;
    const traffic = this.trafficOn;
    this.stopTraffic();
    const attempt = (n: number) => {
      const delay = Math.min(30_000, 500 * 2 ** n) * (0.5 + Math.random() / 2);
      this.retry = setTimeout(async () => {
        if (this.stopping) return;
        const t0 = performance.now();
        try {
          await this.connect();
          if (this.stopping) return void this.end(true);
          this.down = false;
          this.stats.count('reconnectedAfterKick');
          this.stats.sample('reconnect', performance.now() - t0);
          if (traffic) this.startTraffic();
        } catch {
          if (!this.stopping) attempt(n + 1);
        }
      }, delay);
      this.retry.unref();
    };
    attempt(0);
  }

  startTraffic(): void {
    this.trafficOn = true;
    const interval = 1000 / this.opts.rate;
    const tick = () => {
      const c = this.client;
      if (!c?.connected) return;
      this.sent += 1;
      // every 10th message is a heartbeat, the rest telemetry (QoS 0, as sensors do)
      if (this.sent % 10 === 0) c.publish(`${this.topic}/heartbeat`, '', { qos: 0 });
      else {
        c.publish(`${this.topic}/telemetry`, JSON.stringify({ temperature: round(20 + Math.random() * 5, 2), humidity: round(40 + Math.random() * 10, 1), seq: this.sent }), { qos: 0 });
        this.stats.count('telemetry');
      }
      this.stats.count('messages');
    };
    // spread the devices over the interval
    setTimeout(() => {
      tick();
      this.timer = setInterval(tick, interval);
      this.timer.unref();
    }, Math.random() * interval).unref();
  }

  stopTraffic(): void {
    this.trafficOn = false;
    clearInterval(this.timer);
  }

  private onMessage(topic: string, payload: Buffer, packet: mqtt.IPublishPacket): void {
    if (topic === `${this.topic}/commands`) {
      let request: { id?: string; name?: string } = {};
      try { request = JSON.parse(payload.toString()); } catch { /* answer anyway */ }
      const responseTopic = packet.properties?.responseTopic ?? `${this.topic}/commands/response`;
      const correlationData = packet.properties?.correlationData;
      this.client?.publish(responseTopic, JSON.stringify({ id: request.id, ok: true, name: request.name }), { qos: 1, properties: correlationData ? { correlationData } : undefined });
      this.stats.count('commands');
    } else if (topic === `${this.topic}/twin/desired`) {
      this.stats.count('desired');
      try {
        const { desired } = JSON.parse(payload.toString()) as { desired: Record<string, unknown> };
        this.client?.publish(`${this.topic}/twin/reported`, JSON.stringify({ firmware: '1.0.0', simulated: true, applied: desired }), { qos: 1 });
      } catch (err) {
        this.stats.error('desired payload', err);
      }
    }
  }

  /** Closes the connection; errors of a connection being closed by us are not counted. */
  async end(force = false): Promise<void> {
    this.stopTraffic();
    clearTimeout(this.retry);
    const c = this.client;
    this.client = undefined;
    if (c) await c.endAsync(force).catch(() => {});
  }

  /** The run ends: no reconnects after this. */
  async finish(): Promise<void> {
    this.stopping = true;
    await this.end();
  }

  /** Resolves when the broker closes the connection. */
  closed(): Promise<void> {
    const c = this.client;
    return new Promise((resolve) => (!c || !c.connected ? resolve() : c.once('close', () => resolve())));
  }
}

/**
 * Runs a fleet: claim group (created or reused through the tenant API), concurrent enrollment
 * (`POST /ddi/v1/enroll`, claim_token; credentials kept in `dir`), MQTT 5 mTLS connections,
 * traffic at `rate`, and the scenario. Returns the summary.
 */
export async function runSimulation(opts: SimOptions, progress: Progress = noProgress): Promise<SimSummary> {
  const stats = new Stats();
  const store = new CredentialStore(opts.dir);
  const api = new Api(opts.baseUrl, opts.token);
  const started = Date.now();

  // 1. tenant identity and claim group
  let group = store.readGroup();
  if (group && group.baseUrl !== opts.baseUrl) group = undefined;
  const accountId = opts.accountId ?? group?.accountId ?? crypto.randomUUID();
  if (!opts.token) {
    const { data, response } = await api.anon.POST('/dev/token', { body: { realm: `acc-${accountId}`, sub: 'fleet-simulator', roles: ['operator'] } });
    if (response.status !== 200 || !data) throw new Error(`no --token given and the development issuer refused (${response.status}); pass --token`);
    api.setToken(data.access_token);
  }
  if (group) {
    const { data, response } = await api.authed.GET('/api/v1/things/claim-groups/{id}', { params: { path: { id: group.claimGroupId } } });
    if (response.status !== 200 || data?.status !== 'active') group = undefined;
  }
  if (!group) {
    const { data, error, response } = await api.authed.POST('/api/v1/things/claim-groups', { body: { name: `simulator ${new Date().toISOString()}`, maxDevices: Math.max(opts.devices * 2, 1000), ttlDays: 30 } });
    if (response.status !== 201 || !data) throw new Error(`claim group create failed: ${response.status} ${JSON.stringify(error)}`);
    group = { baseUrl: opts.baseUrl, accountId, claimGroupId: data.id, sharedSecret: data.sharedSecret };
    store.writeGroup(group);
  }

  // 2. enrollment (reusing the folder's credentials). Serials of revoked things are skipped: a
  // revoked thing cannot enroll again, so new serials (after the fleet's range) take their place.
  const serialOf = (i: number) => `${opts.serialPrefix}-${String(i).padStart(6, '0')}`;
  const revokedBefore = store.revokedSerials();
  const revokedSkipped: string[] = [];
  const replacements: string[] = [];
  let nextIndex = 0;
  /** the next serial not known to be revoked; those past the fleet's range are replacements */
  const nextSerial = (): string => {
    for (;;) {
      const i = nextIndex++;
      const serial = serialOf(i);
      if (revokedBefore.has(serial)) {
        revokedSkipped.push(serial);
        continue;
      }
      if (i >= opts.devices) replacements.push(serial);
      return serial;
    }
  };
  const creds: DeviceCredentials[] = [];
  const missing: string[] = [];
  for (let n = 0; n < opts.devices; n++) {
    const serial = nextSerial();
    const c = store.readDevice(serial);
    if (c) creds.push(c);
    else missing.push(serial);
  }
  const reused = creds.length;
  progress.start('enroll', missing.length);
  const enrollStart = Date.now();
  await pool(missing, opts.concurrency, async (first) => {
    let serial = first;
    try {
      let res = await enroll(serial);
      // revoked meanwhile (by an operator): remembered, and a new serial enrolls in its place
      for (let tries = 0; res.response.status === 403 && /revoked/i.test(String(detailOf(res.error))) && tries < 10; tries++) {
        store.markRevoked(serial);
        revokedSkipped.push(serial);
        serial = nextSerial();
        res = await enroll(serial);
      }
      const body = res.data;
      if (res.response.status !== 200 || !body) throw new Error(`${res.response.status} ${detailOf(res.error)}`);
      // the gateway generates the key when the device sends no CSR (the simulator sends none)
      if (body.privateKey === undefined) throw new Error('the enrollment answered no private key');
      const c: DeviceCredentials = {
        thingId: String(body.twinTopicPrefix).slice('devices/'.length), serial,
        certificate: body.certificate, privateKey: body.privateKey, caBundlePem: body.caBundlePem,
        mqttBrokerUrl: body.mqttBrokerUrl, mqttBrokerPort: body.mqttBrokerPort,
      };
      store.writeDevice(c);
      creds.push(c);
      stats.count('enrolled');
    } catch (err) {
      stats.error('enroll', err);
    }
    progress.increment('enroll');
  });
  const enrollSeconds = (Date.now() - enrollStart) / 1000;

  function enroll(serial: string) {
    return api.anon.POST('/ddi/v1/enroll', { body: { provisioningMethod: 'claim_token', claimSecret: group!.sharedSecret, manufacturer: opts.manufacturer, model: opts.model, serial } });
  }

  // 3. connect
  const fleet = creds.map((c) => new SimDevice(c, opts, stats));
  progress.start('connect', fleet.length);
  const connectAll = (devices: SimDevice[], sample: string) => pool(devices, opts.concurrency, async (d) => {
    const t0 = performance.now();
    try {
      await d.connect();
      stats.sample(sample, performance.now() - t0);
      stats.count(sample === 'connect' ? 'connected' : 'reconnected');
    } catch (err) {
      // kicked by the platform after its CONNACK, while it subscribed: connected, and reconnecting with backoff (kicked())
      if (d.down) {
        stats.sample(sample, performance.now() - t0);
        stats.count(sample === 'connect' ? 'connected' : 'reconnected');
        progress.increment('connect');
        return;
      }
      // a reused device an operator revoked since: remembered and skipped, not a failure
      const thing = await api.authed.GET('/api/v1/things/{thingId}', { params: { path: { thingId: d.creds.thingId } } }).catch(() => undefined);
      if (thing?.response.status === 200 && thing.data?.revoked === true) {
        store.markRevoked(d.creds.serial);
        revokedSkipped.push(d.creds.serial);
      } else stats.error(sample, err);
    }
    progress.increment('connect');
  });
  await connectAll(fleet, 'connect');

  // 4. traffic and scenario
  if (opts.beforeTraffic) await opts.beforeTraffic({ baseUrl: opts.baseUrl, token: api.bearer!, accountId });
  const trafficStart = Date.now();
  let kickedDown = 0;
  const sentBefore = stats.get('messages');
  // a device kicked while it connected is reconnecting: it joins the traffic once back
  for (const d of fleet) if (d.client || d.down) d.startTraffic();
  progress.start('run', opts.durationSeconds);
  const wait = (s: number) => new Promise((r) => setTimeout(r, s * 1000));
  const ticker = setInterval(() => progress.update('run', Math.min(opts.durationSeconds, Math.round((Date.now() - trafficStart) / 1000)), { msgs: stats.get('messages') }), 500);
  try {
    const half = opts.durationSeconds / 2;
    await wait(half);
    if (opts.scenario === 'reconnect-storm') {
      await Promise.all(fleet.map((d) => d.end(true)));
      progress.start('connect', fleet.length);
      await pool(fleet, fleet.length, async (d) => {
        const t0 = performance.now();
        try {
          await d.connect();
          stats.sample('reconnect', performance.now() - t0);
          d.startTraffic();
        } catch (err) {
          stats.error('reconnect', err);
        }
        progress.increment('connect');
      });
    } else if (opts.scenario === 'revoke') {
      const victims = fleet.filter((d) => d.client).slice(0, opts.revokeCount);
      await Promise.all(victims.map(async (d) => {
        const gone = d.closed();
        d.revoked = true;
        const { response } = await api.authed.DELETE('/api/v1/things/{thingId}', { params: { path: { thingId: d.creds.thingId } } });
        if (response.status !== 200) return stats.error('revoke', new Error(`DELETE ${response.status}`));
        await gone;
        d.stopTraffic();
        stats.count('revoked');
        store.markRevoked(d.creds.serial);
        try {
          await d.connect();
          stats.error('revoked device reconnected');
          await d.end(true);
        } catch {
          stats.count('revokedRefused');
        }
      }));
    }
    await wait(opts.durationSeconds - half);
  } finally {
    clearInterval(ticker);
    progress.update('run', opts.durationSeconds, { msgs: stats.get('messages') });
    for (const d of fleet) d.stopTraffic();
    kickedDown = fleet.filter((d) => d.down).length;
    await Promise.all(fleet.map((d) => d.finish()));
    progress.stop();
  }
  const trafficSeconds = (Date.now() - trafficStart) / 1000;
  const sent = stats.get('messages') - sentBefore;
  return {
    scenario: opts.scenario,
    devices: opts.devices,
    enrolled: stats.get('enrolled'),
    reused,
    enrollmentsPerSecond: missing.length ? Math.round((stats.get('enrolled') / enrollSeconds) * 10) / 10 : null,
    connected: stats.get('connected'),
    connectLatencyMs: { p50: stats.percentile('connect', 50), p99: stats.percentile('connect', 99) },
    reconnectLatencyMs: { p50: stats.percentile('reconnect', 50), p99: stats.percentile('reconnect', 99) },
    messagesSent: stats.get('messages'),
    telemetrySent: stats.get('telemetry'),
    messagesPerSecond: Math.round(sent / trafficSeconds),
    commandsAnswered: stats.get('commands'),
    desiredReceived: stats.get('desired'),
    otaUpdated: stats.get('otaUpdated'),
    otaFailed: stats.get('otaFailed'),
    revoked: stats.get('revoked'),
    revokedReconnectsRefused: stats.get('revokedRefused'),
    revokedSkipped: revokedSkipped.sort(),
    replacements: replacements.sort(),
    kicked: stats.get('kicked'),
    reconnectedAfterKick: stats.get('reconnectedAfterKick'),
    kickedNotReconnected: kickedDown,
    errorCount: stats.errorCount,
    errors: Object.fromEntries(stats.errors),
    durationSeconds: Math.round((Date.now() - started) / 100) / 10,
  };
}
