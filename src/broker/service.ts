import crypto from 'node:crypto';
import type { Client, PublishPacket } from 'aedes';
import type { Gateway, ThingDirectory } from '../gateway.js';
import type { BrokerHost } from './host.js';
import { conflict, notFound, unavailable } from '../lib/errors.js';
import type { Principal } from '../http/auth/principal.js';
import type { Broker, BrokerHooks } from './broker.js';
import { ConnectivityLog, type ConnectivityChange } from './connectivityLog.js';
import type { DeviceMessageLog } from './deviceLog.js';
import type { IngestBuffer } from './ingest.js';
import { scanProblem, scanTelemetry } from './jsonScan.js';
import { MAX_JSON_BYTES, parseJsonPayload, type PayloadProblem } from './payload.js';
import type { BrokerRepo } from './repo.js';
import { deviceTopic, ownTopicKind, parseDeviceTopic, type TopicKind } from './topics.js';

/**
 * Device topics whose payload must be JSON: stored as jsonb (telemetry, reported state) or returned
 * to tenants as JSON (command replies). Other topics (heartbeat, the device's own) take any payload.
 */
/**
 * A checked JSON payload: telemetry is checked but not parsed (its bytes and the signature of its
 * keys go to the ingest batch, see scanJsonObject); other JSON topics are parsed.
 */
type Parsed = { telemetry: true; bytes: Buffer; keys: number } | { telemetry?: undefined; value: Record<string, unknown> };

/** how long after a subscription's desired-state read its versions are still deduplicated (see desiredReads) */
const DESIRED_READ_LINGER_MS = 2_000;

const JSON_TOPICS: Partial<Record<TopicKind, { object: boolean }>> = {
  telemetry: { object: true },
  twinReported: { object: true },
  commandResponse: { object: false },
  otaStatus: { object: true },
};

function jsonObject(payload: Buffer | string): Record<string, unknown> | undefined {
  if (payload.length > MAX_JSON_BYTES) return undefined;
  try {
    const value: unknown = JSON.parse(payload.toString());
    return value && typeof value === 'object' && !Array.isArray(value) ? (value as Record<string, unknown>) : undefined;
  } catch {
    return undefined;
  }
}

/**
 * What the gateway does with device traffic (connectivity, lifecycle, heartbeat, telemetry, twin)
 * and what tenants read and change through HTTP (connectivity, twin, commands, telemetry).
 */
export class ConnectedDeviceService {
  /** per MQTT connection: its session id */
  private readonly sessions = new WeakMap<Client, string>();
  /** set on shutdown (beginStop): disconnects are still recorded, but no lifecycle message goes to a closing broker */
  private stopping = false;
  /** connects and disconnects, written in batches off the handshake path (connectivityLog.ts) */
  private readonly connectivityLog: ConnectivityLog;
  /** Aedes' path: payloads parsed when their publish was checked, by payload buffer (Aedes passes it on), so onPublish does not parse again */
  private readonly parsed = new WeakMap<object, Parsed>();
  /** the topics whose payload is checked and parsed (TELEMETRY_INGEST=false leaves telemetry unread) */
  private readonly jsonTopics: Partial<Record<TopicKind, { object: boolean }>>;
  private readonly telemetryIngest: boolean;

  constructor(
    private readonly gw: Gateway,
    private readonly repo: BrokerRepo,
    private readonly ingest: IngestBuffer,
    private readonly host: BrokerHost,
    private readonly things: ThingDirectory,
    private readonly replies: DeviceMessageLog,
  ) {
    this.jsonTopics = gw.config.TELEMETRY_INGEST ? JSON_TOPICS : { ...JSON_TOPICS, telemetry: undefined };
    this.telemetryIngest = gw.config.TELEMETRY_INGEST;
    this.connectivityLog = new ConnectivityLog((chunk) => this.record(chunk), gw.log.child({ component: 'connectivity' }));
  }

  hooks(): BrokerHooks {
    return {
      connected: (client) => {
        const sessionId = crypto.randomUUID();
        this.sessions.set(client, sessionId);
        this.connectivityLog.add({ state: 'connected', thingId: client.id, sessionId, protocolVersion: client.version, at: Date.now() });
      },
      disconnected: (client) => {
        const sessionId = this.sessions.get(client);
        if (!sessionId) return;
        this.sessions.delete(client);
        // a takeover (e.g. reconnecting with a renewed certificate) keeps the device connected: the new session records itself
        if (this.host.broker?.isTakenOver(client.id)) return;
        this.connectivityLog.add({ state: 'disconnected', thingId: client.id, sessionId, at: Date.now() });
      },
      refusePayload: (packet, client) => {
        const checked = this.checkPayload(packet, client);
        if (checked.problem) return checked.problem;
        if (checked.parsed) this.parsed.set(checked.payload, checked.parsed);
        return undefined;
      },
      published: (packet, client) => this.take(client, ownTopicKind(client.id, packet.topic), this.parsed.get(packet.payload as object), packet),
      // the fast lane: checked and taken in one call, the parsed value passed on directly
      ingest: (packet, client, kind) => {
        // telemetry, most of the traffic: checked and batched without an object per message
        if (this.telemetryIngest && kind === 'telemetry' && typeof packet.payload !== 'string') {
          const keys = this.checkTelemetry(client, packet.payload);
          if (typeof keys !== 'number') return keys;
          this.ingest.addTelemetry(client.id, packet.payload, keys);
          return undefined;
        }
        const checked = this.checkPayload(packet, client, kind);
        if (checked.problem) return checked.problem;
        this.take(client, checked.kind, checked.parsed, packet);
        return undefined;
      },
      hold: (resume) => this.ingest.hold(resume),
      // a PUBACK waits for the device's messages to be stored: its telemetry batch, its reported-state and reply writes
      whenStored: (client, done, topic) => {
        const kind = topic === undefined ? undefined : ownTopicKind(client.id, topic);
        // (the fast lane's publishes are all stored ones; another topic waits only behind earlier messages)
        const stores = kind === undefined || kind === 'telemetry' || kind === 'twinReported' || kind === 'commandResponse';
        const wait = stores ? this.ingest.whenStored.bind(this.ingest) : this.ingest.afterEarlier.bind(this.ingest);
        const reported = this.reportedWrites.get(client.id);
        const replied = this.replies.written(client.id);
        if (!reported && !replied) return wait(client.id, done);
        const writes = Promise.all([reported ?? true, replied ?? true]);
        wait(client.id, (stored) => void writes.then(([r, c]) => done(stored && r && c)));
      },
      storeBatch: () => this.ingest.batch,
      subscribed: (topics, client) => {
        if (topics.some((t) => parseDeviceTopic(t)?.kind === 'twinDesired' || t === `devices/${client.id}/#` || t === `devices/${client.id}/twin/#`)) {
          void this.deliverDesired(client.id).catch((err) => this.gw.log.error({ err, thingId: client.id }, 'desired state not delivered'));
        }
      },
    };
  }

  /** Shutdown begins: from now on no lifecycle message is published (the broker is closing). */
  beginStop(): void {
    this.stopping = true;
  }

  /** Waits until the connects and disconnects seen so far are written (shutdown, tests). */
  async drainDisconnects(): Promise<void> {
    await this.connectivityLog.flush();
  }

  /**
   * One chunk of connectivity changes (each thing once, see connectivityLog.ts): the connectivity
   * rows in two statements, then for each change that took effect (a disconnect of a session that
   * is no longer the thing's current one did not) the retained lifecycle message on the device's
   * topic and the domain event, all events of the chunk in one transaction.
   */
  private async record(chunk: ConnectivityChange[]): Promise<void> {
    const node = this.gw.cluster.nodeId;
    const connects = chunk.filter((c) => c.state === 'connected');
    const disconnects = chunk.filter((c) => c.state === 'disconnected');
    await this.repo.markConnectedMany(node, connects.map((c) => ({ thing_id: c.thingId, session_id: c.sessionId, protocol_version: c.protocolVersion ?? 0 })));
    const ended = await this.repo.markDisconnectedMany(disconnects.map((c) => ({ thing_id: c.thingId, session_id: c.sessionId })));
    const changed = chunk.filter((c) => c.state === 'connected' || ended.has(c.thingId));
    if (changed.length === 0) return;
    const events = changed.map((c) => {
      const extra = c.state === 'connected' ? { node, protocolVersion: c.protocolVersion } : { node };
      return { change: c, body: { state: c.state, at: new Date(c.at).toISOString(), ...extra } };
    });
    if (!this.stopping && this.host.broker) {
      const broker = this.host.broker;
      await Promise.all(events.map(({ change, body }) =>
        broker.publish({ topic: deviceTopic(change.thingId, 'lifecycle'), payload: JSON.stringify(body), qos: 0, retain: true })
          .catch((err) => this.gw.log.error({ err, thingId: change.thingId }, 'lifecycle message not published'))));
    }
    const accounts = await this.things.accountsOf(changed.map((c) => c.thingId));
    await this.gw.actors.run((uow) => uow.emitMany(events.map(({ change, body: { state, ...rest } }) => ({
      actorType: 'device', actorId: change.thingId, accountId: accounts.get(change.thingId) ?? null,
      event: { type: `device.${state}`, thingId: change.thingId, ...rest },
    }))));
  }

  /** A telemetry payload's key signature (scanTelemetry), or why it is refused (the device was seen all the same). */
  private checkTelemetry(client: Client, payload: Buffer): number | PayloadProblem {
    const keys = scanTelemetry(payload);
    if (keys >= 0) return keys;
    this.ingest.seenNow(client.id);
    return scanProblem(payload, keys);
  }

  /** A device publish's topic kind (given, or read from its topic) and, on the JSON topics, its checked payload (or why it is refused). */
  private checkPayload(packet: PublishPacket, client: Client, kind = ownTopicKind(client.id, packet.topic)): { kind: TopicKind | 'other' | undefined; payload: Buffer; parsed?: Parsed; problem?: PayloadProblem } {
    const payload = typeof packet.payload === 'string' ? Buffer.from(packet.payload) : packet.payload;
    const rule = kind && kind !== 'other' ? this.jsonTopics[kind] : undefined;
    if (!rule) return { kind, payload };
    if (kind === 'telemetry') {
      const keys = this.checkTelemetry(client, payload);
      return typeof keys === 'number' ? { kind, payload, parsed: { telemetry: true, bytes: payload, keys } } : { kind, payload, problem: keys };
    }
    const result = parseJsonPayload(payload, rule.object);
    if (result.ok) return { kind, payload, parsed: { value: result.value as Record<string, unknown> } };
    // refused, but the device was seen
    this.ingest.seenNow(client.id);
    return { kind, payload, problem: result.problem };
  }

  /** A device publish the broker took; `parsed` is its checked payload on the JSON topics (a payload that failed never gets here). */
  private take(client: Client, kind: TopicKind | 'other' | undefined, parsed: Parsed | undefined, packet: Pick<PublishPacket, 'payload' | 'properties'>): void {
    switch (kind) {
      case 'commandResponse':
        this.ingest.seenNow(client.id);
        this.replies.recordReply(client.id, packet);
        return;
      case 'telemetry':
        if (parsed?.telemetry) this.ingest.addTelemetry(client.id, parsed.bytes, parsed.keys);
        else this.ingest.seenNow(client.id);
        return;
      case 'twinReported':
        this.ingest.seenNow(client.id);
        if (parsed && !parsed.telemetry) this.storeReported(client.id, parsed.value);
        return;
      default:
        this.ingest.seenNow(client.id);
    }
  }

  /** Reported-state writes of one device are chained, so they commit in the order it published them; each tells whether it was stored. */
  private readonly reportedWrites = new Map<string, Promise<boolean>>();
  private storeReported(thingId: string, reported: Record<string, unknown>): void {
    const previous = this.reportedWrites.get(thingId) ?? Promise.resolve(true);
    const next = previous
      .then(() => this.repo.setReported(thingId, reported))
      .then(() => true, (err) => {
        this.gw.log.error({ err, thingId }, 'reported state not stored');
        return false;
      });
    this.reportedWrites.set(thingId, next);
    void next.then(() => {
      if (this.reportedWrites.get(thingId) === next) this.reportedWrites.delete(thingId);
    });
  }

  /**
   * Per thing whose subscription is being answered with its desired state (deliverDesired), the
   * newest version published to it since: while it lasts (and a moment after, for an update
   * committed before the read whose own publish comes later), a version is published once and
   * never after a newer one. Without it, an update committed while the subscription's read ran
   * reached the device twice, or an older one after a newer (seen: versions 1, 2, 2, 3).
   */
  private readonly desiredReads = new Map<string, { newest: number }>();

  private async deliverDesired(thingId: string): Promise<void> {
    const read = { newest: 0 };
    this.desiredReads.set(thingId, read);
    try {
      const twin = await this.repo.twin(thingId);
      if (!twin || twin.desired_version === 0) return;
      await this.publishDesired(thingId, twin.desired_version, twin.desired);
    } finally {
      setTimeout(() => {
        if (this.desiredReads.get(thingId) === read) this.desiredReads.delete(thingId);
      }, DESIRED_READ_LINGER_MS).unref();
    }
  }

  private async publishDesired(thingId: string, version: number, desired: Record<string, unknown>): Promise<void> {
    const read = this.desiredReads.get(thingId);
    if (read) {
      if (version <= read.newest) return;
      read.newest = version;
    }
    await this.host.broker?.publish({ topic: deviceTopic(thingId, 'twinDesired'), payload: JSON.stringify({ version, desired }), qos: 1 });
  }

  /** 404 unless the thing belongs to the caller's account (other accounts' things do not exist for them). */
  async requireThing(principal: Principal, thingId: string): Promise<void> {
    const owner = principal.accountId ? await this.things.accountOf(thingId) : undefined;
    if (!owner || owner !== principal.accountId) throw notFound(`thing ${thingId} not found`);
  }

  async connectivity(thingId: string) {
    // this node's connects and disconnects of the thing not yet written go first (read your writes)
    await this.connectivityLog.written(thingId);
    const row = await this.repo.connectivity(thingId);
    return {
      thingId,
      connected: row?.connected ?? false,
      protocolVersion: row?.connected ? row.protocol_version : null,
      connectedAt: iso(row?.connected_at),
      disconnectedAt: iso(row?.disconnected_at),
      lastSeen: iso(row?.last_seen),
    };
  }

  async telemetry(thingId: string) {
    await this.ingest.flush();
    const row = await this.repo.telemetry(thingId);
    return { thingId, telemetry: row?.telemetry ?? {}, updatedAt: iso(row?.updated_at) };
  }

  async twin(thingId: string) {
    const row = await this.repo.twin(thingId);
    return {
      thingId,
      reported: { version: row?.reported_version ?? 0, state: row?.reported ?? {}, updatedAt: iso(row?.reported_at) },
      desired: { version: row?.desired_version ?? 0, state: row?.desired ?? {}, updatedAt: iso(row?.desired_at) },
    };
  }

  /** Stores the desired state (optionally only if `ifVersion` is current) and sends it to the device. */
  async setDesired(thingId: string, desired: Record<string, unknown>, ifVersion?: number) {
    const row = await this.repo.setDesired(thingId, desired, ifVersion);
    if (!row) {
      const current = (await this.repo.twin(thingId))?.desired_version ?? 0;
      throw conflict(`desired state is at version ${current}, not ${ifVersion}; read it again and retry`, { extra: { currentVersion: current } });
    }
    await this.publishDesired(thingId, row.desired_version, desired);
    return { version: row.desired_version, state: desired, updatedAt: row.desired_at.toISOString() };
  }

  /** Live telemetry of one thing from any node; returns the unsubscribe. */
  streamTelemetry(thingId: string, onMessage: (m: { thingId: string; at: string; telemetry: unknown }) => void): Promise<() => Promise<void>> {
    if (!this.host.broker) throw unavailable("the MQTT broker is not running on this node");
    return this.host.broker.subscribe(deviceTopic(thingId, 'telemetry'), (packet) => {
      const telemetry = jsonObject(packet.payload);
      if (telemetry) onMessage({ thingId, at: new Date().toISOString(), telemetry });
    });
  }

  /** Sends a command to a connected device and waits for its reply (undefined on timeout). */
  invokeCommand(thingId: string, name: string, payload: unknown, timeoutMs: number) {
    const commands = this.host.commands;
    if (!commands) throw unavailable('the MQTT broker is not running on this node');
    return commands.invoke(thingId, name, payload, timeoutMs);
  }
}

const iso = (d: Date | null | undefined) => (d ? new Date(d).toISOString() : null);
