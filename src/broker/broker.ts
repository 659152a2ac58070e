import crypto from 'node:crypto';
import tls from 'node:tls';
import type net from 'node:net';
import type { AddressInfo } from 'node:net';
import type { Duplex } from 'node:stream';
import { Aedes, type AedesOptions, type AedesPublishPacket, type Client, type PublishPacket } from 'aedes';
import mqttPacket from 'mqtt-packet';
import type { DisconnectOptions } from '../gateway.js';
import type { Logger } from '../log.js';
import type { Pki } from '../pki/pki.js';
import { aedesEmitter, checkAedesContract, isTakingOver, markNotAuthorized, wrapPublish } from './aedesInternals.js';
import { attachFastLane, skipIdleTimeoutBookkeeping, type FastPublish, type LaneTaker } from './fastLane.js';
import { closeGracefully } from './linger.js';
import { cacheTopicMatches, type TopicListeners } from './matchCache.js';
import { usePlainParserList } from './parserList.js';
import { PAYLOAD_PROBLEMS, type PayloadProblem } from './payload.js';
import { devicePublishAllowed, fastLaneKind, topicAllowed, type TopicKind } from './topics.js';
import { SEES_ALL_LISTENERS } from './workerEmitter.js';
import { ProxyListener } from './proxyListener.js';
import type { ProxiedIdentity } from './proxyProtocol.js';
import { WsListener, type WsIdentity } from './wsListener.js';

export { topicAllowed } from './topics.js';

/** payloads of QoS 1 device publishes taken in authorizePublish, before their PUBACK (Aedes passes the payload on to its 'publish' event) */
const takenBeforeAck = new WeakSet<object>();

export interface BrokerHooks {
  /** a device completed CONNECT (authenticated) on this node */
  connected?(client: Client): void;
  /** a device's connection on this node ended (any reason) */
  disconnected?(client: Client): void;
  /** why the gateway cannot take this device publish (it is then refused alone), or undefined to take it */
  refusePayload?(packet: PublishPacket, client: Client): PayloadProblem | undefined;
  /** a device on this node published (already authorized) */
  published?(packet: AedesPublishPacket, client: Client): void;
  /** the fast lane's refusePayload and published in one call (the payload parsed once, passed on directly); `kind`: the topic's */
  ingest?(packet: PublishPacket, client: Client, kind: TopicKind): PayloadProblem | undefined;
  /** a device on this node subscribed (already authorized) */
  subscribed?(topics: string[], client: Client): void;
  /** backpressure of what `ingest` feeds: true to stop reading the device's socket until `resume` is called (IngestBuffer.hold) */
  hold?(resume: () => void): boolean;
  /**
   * Durable acknowledgements (IngestBuffer.whenStored): `done(true)` once what the device sent up
   * to now is stored, `done(false)` when some of it was given up. With it, a QoS 1 PUBACK (QoS 2
   * PUBREC) is written only after that: a message a device got one for survives a kill -9.
   * `topic`: the publish's, when it is known to the caller (a topic whose messages store nothing
   * waits only behind the device's earlier messages).
   */
  whenStored?(client: Client, done: (stored: boolean) => void, topic?: string): void;
  /** the number of the batch `whenStored` waits on (IngestBuffer.batch) */
  storeBatch?(): number;
}

export interface BrokerOptions {
  host: string;
  port: number;
  pki: Pki;
  log: Logger;
  /** PEM CRLs (label X509 CRL) loaded at start; swapped later with `setCrl` */
  crlPem?: string[];
  /** Aedes options: `id`, and in cluster mode `mq` and `persistence` */
  aedes?: Partial<AedesOptions>;
  hooks?: BrokerHooks;
  /** 48 bytes of TLS session ticket keys shared by the workers of a multi-core node (default: random, this broker's own) */
  ticketKeys?: Buffer;
  /** MQTT_PROXY_PORT: plain TCP from a TLS terminator in TRUSTED_PROXIES, the identity in a PROXY v2 header (proxyListener.ts) */
  proxy?: { port: number; trusted: (address: string | undefined) => boolean };
  /** MQTT_WS_PORT: MQTT over secure WebSocket (wsListener.ts); `behindProxy`: plain HTTP from a terminator with PROXY v2 headers */
  ws?: { port: number; behindProxy: boolean; trusted: (address: string | undefined) => boolean };
}

/**
 * Who a connection is, as the broker's `authenticate` reads it: the client certificate of a TLS
 * connection (MQTT_PORT, MQTT_WS_PORT) or what a trusted terminator's PROXY header says of it.
 */
export interface PeerIdentity { cn: string; serial: string; notBefore?: Date }

/** The identity of a verified TLS peer certificate (undefined without a CN or serial). */
export function certificateIdentity(cert: tls.PeerCertificate | undefined): PeerIdentity | undefined {
  const cn = Array.isArray(cert?.subject?.CN) ? cert.subject.CN[0] : cert?.subject?.CN;
  if (!cn || !cert?.serialNumber) return undefined;
  return { cn, serial: cert.serialNumber, notBefore: new Date(cert.valid_from) };
}

/** What the broker keeps of a connection's client certificate (read once, at CONNECT). */
export interface ClientCertificate { serial: string; notBefore?: Date }
const certificates = new WeakMap<Client, ClientCertificate>();

/** The serial (hex) and notBefore of the client certificate this MQTT session authenticated with. */
export const clientCertificate = (client: Client): ClientCertificate | undefined => certificates.get(client);

function peerCertificate(conn: unknown): tls.PeerCertificate | undefined {
  const socket = conn as tls.TLSSocket;
  return typeof socket.getPeerCertificate === 'function' ? socket.getPeerCertificate() : undefined;
}

/** Certificate serials compare as lower-case hex without leading zeros. */
export const normalizeSerial = (hex: string) => hex.toLowerCase().replace(/^0+(?=.)/, '');

/**
 * mqtt-packet (which Aedes writes every packet with) otherwise builds, on its first write, a cache
 * of all 65,536 two-byte numbers as separate Buffers: about 6.3 MB of JS heap for the process's
 * life (issue 19, memory per session). Without it each message id or length is a 2-byte slice of
 * Node's buffer pool, made when written.
 */
mqttPacket.writeToStream.cacheNumbers = false;

/** largest MQTT packet accepted from a device */
export const MAX_PACKET_BYTES = 256 * 1024;

const notAuthorized = (message: string) => Object.assign(new Error(message), { returnCode: 5 as const });

/**
 * Single node only: Aedes publishes every connect and disconnect on `$SYS/{broker id}/new/clients`
 * and `.../disconnect/clients` (aedes.js registerClient/unregisterClient) so that other nodes
 * close a duplicate session of the same client id. On a single node the only listener is Aedes'
 * own handler, which ignores its own broker id (devices cannot subscribe to `$SYS`: the ACL keeps
 * them on their own prefix, and the gateway subscribes to none), so those two publishes are
 * dropped before Aedes' publish pipeline. The instance's `publish` is wrapped; Aedes is untouched.
 */
function skipOwnClientAnnouncements(aedes: Aedes): void {
  const own = new Set([`$SYS/${aedes.id}/new/clients`, `$SYS/${aedes.id}/disconnect/clients`]);
  wrapPublish(aedes, (publish) => (packet, client, done) => {
    if (!own.has(packet.topic)) return publish(packet, client, done);
    const callback = typeof client === 'function' ? client : done;
    if (typeof callback === 'function') process.nextTick(callback as () => void);
  });
}

/** The broker's memo of a topic on one connection's fast lane (see fastPublish). */
interface LaneTopic {
  /** the topic's kind if the lane may take it, else undefined (fixed for the connection) */
  kind: TopicKind | undefined;
  /** the match cache's generation `listened` was read in (-1: not yet) */
  generation: number;
  /** someone subscribes to the topic: it goes to Aedes */
  listened: boolean;
}

/** MQTT 5 PUBACK/PUBREC reason code: payload format invalid */
const PAYLOAD_FORMAT_INVALID = 0x99;

/**
 * Aedes embedded behind a TLS listener that requires client certificates from the device CA
 * (and checks the current CRL). The CN must equal the MQTT client id and the username, and its
 * serial must not be revoked; a client may use only `devices/{clientId}/`.
 */
export class Broker {
  readonly aedes: Aedes;
  readonly server: tls.Server;
  /** MQTT_PROXY_PORT's listener, when configured */
  readonly proxyListener?: ProxyListener;
  /** MQTT_WS_PORT's listener, when configured */
  readonly wsListener?: WsListener;
  /** identities of the connections that are no TLS socket of `server` (PROXY header, WebSocket), by the stream Aedes reads */
  private readonly identities = new WeakMap<object, PeerIdentity>();
  private readonly clients = new Map<string, Client>();
  /** counters read by /metrics (plain numbers: they change on every device message) */
  readonly stats = {
    messagesReceived: 0,
    /** of those, taken by the fast lane (fastLane.ts) */
    fastLane: 0,
    connects: 0, connectsRefused: 0, tlsHandshakesRefused: 0,
    /** connections of MQTT_PROXY_PORT (and MQTT_WS_PORT behind a terminator) closed before CONNECT: untrusted peer, bad or missing header, no verified certificate */
    proxyRefused: 0,
    /** device publishes refused for their payload, by reason (MQTT 5: PUBACK 0x99; 3.1.1: dropped) */
    payloadsRejected: Object.fromEntries(PAYLOAD_PROBLEMS.map((p) => [p, 0])) as Record<PayloadProblem, number>,
  };
  /** serials of the current CRL: refuses a revoked certificate even on a resumed TLS session */
  private revokedSerials = new Set<string>();
  private crlPem?: string[];
  /**
   * TLS session ticket keys for the broker's life: a new secure context (every CRL load) would
   * otherwise start with new random keys and void every ticket a device holds, so a device
   * reconnecting with its ticket gets an abbreviated handshake (no certificate signature or chain
   * check; `authenticate` still checks the certificate against the current CRL serials).
   */
  private readonly ticketKeys: Buffer;

  private constructor(private readonly options: BrokerOptions, aedes: Aedes, hasListener: TopicListeners | undefined) {
    this.aedes = aedes;
    this.crlPem = options.crlPem;
    this.ticketKeys = options.ticketKeys ?? crypto.randomBytes(48);
    // Aedes' own emitter, or one whose matcher holds the other workers' listeners too (workerEmitter.ts);
    // not in cluster mode: every message goes to the Redis emitter (other nodes' listeners are invisible here)
    const mq = options.aedes?.mq as { [SEES_ALL_LISTENERS]?: boolean } | undefined;
    const fastLane = hasListener && (!mq || mq[SEES_ALL_LISTENERS]) ? this.fastPublish(hasListener) : undefined;
    this.fastLane = fastLane;
    this.server = tls.createServer(this.tlsOptions(), (socket) => {
      // small MQTT packets (PUBACK, SUBACK) must not wait for Nagle's algorithm
      socket.setNoDelay(true);
      // no idle-timeout bookkeeping per TLS record (none is set; fastLane.ts)
      skipIdleTimeoutBookkeeping(socket);
      this.handleSocket(socket);
    });
    const refused = () => void (this.stats.proxyRefused += 1);
    if (options.proxy) {
      this.proxyListener = new ProxyListener({ host: options.host, port: options.proxy.port, trusted: options.proxy.trusted, log: options.log, refused }, (socket, identity) => {
        this.identities.set(socket, identity);
        this.handleSocket(socket);
      });
    }
    if (options.ws) {
      const { port, behindProxy, trusted } = options.ws;
      this.wsListener = new WsListener({
        host: options.host, port, log: options.log, maxPayload: MAX_PACKET_BYTES + 8,
        ...(behindProxy ? { proxied: { trusted, refused } } : { tls: this.tlsOptions() }),
      }, (stream, identity) => this.handleStream(stream, identity));
    }
    this.server.on('tlsClientError', (err) => {
      this.stats.tlsHandshakesRefused += 1;
      options.log.debug({ err: err.message }, 'mqtt tls handshake refused');
    });
    if (!options.aedes?.mq) skipOwnClientAnnouncements(aedes);
    const hooks = options.hooks ?? {};
    aedes.on('client', (c) => {
      const previous = this.clients.get(c.id);
      this.clients.set(c.id, c);
      this.stats.connects += 1;
      if (previous && previous !== c) hooks.disconnected?.(previous);
      hooks.connected?.(c);
    });
    aedes.on('clientDisconnect', (c) => {
      if (this.clients.get(c.id) !== c) return;
      this.clients.delete(c.id);
      hooks.disconnected?.(c);
    });
    aedes.on('publish', (packet, client) => {
      if (!client) return;
      this.stats.messagesReceived += 1;
      // (a QoS 1 publish was taken before its PUBACK: see authorizePublish)
      if (!takenBeforeAck.has(packet.payload as object)) hooks.published?.(packet, client);
    });
    aedes.on('subscribe', (subs, client) => {
      if (client && hooks.subscribed) hooks.subscribed(subs.map((s) => s.topic), client);
    });
  }

  private readonly fastLane?: LaneTaker<LaneTopic>;

  /** A device's TLS socket (MQTT_PORT) or plain socket after its PROXY header (MQTT_PROXY_PORT): Aedes with the fast lane. */
  private handleSocket(socket: tls.TLSSocket | net.Socket): void {
    const client = this.aedes.handle(socket);
    usePlainParserList(client);
    // a plain socket has the same stream internals the lane relies on (a TLS socket is one)
    if (this.fastLane) attachFastLane(socket as tls.TLSSocket, client, this.fastLane, MAX_PACKET_BYTES);
    closeGracefully(socket as tls.TLSSocket, () => client.close());
  }

  /** A WebSocket's byte stream (MQTT_WS_PORT): Aedes alone (no fast lane: messages arrive as WebSocket frames). */
  private handleStream(stream: Duplex, identity: WsIdentity | undefined): void {
    const peer = identity && 'cn' in identity ? identity : certificateIdentity(identity as tls.PeerCertificate | undefined);
    if (!peer) return void stream.destroy();
    this.identities.set(stream, peer);
    const client = this.aedes.handle(stream as never);
    usePlainParserList(client);
  }

  /** The identity `authenticate` checks: the PROXY header's or WebSocket's, else the TLS socket's certificate. */
  private identityOf(client: Client): PeerIdentity | undefined {
    return this.identities.get(client.conn) ?? certificateIdentity(peerCertificate(client.conn));
  }

  static async start(options: BrokerOptions): Promise<Broker> {
    let self: Broker | undefined;
    const aedes = await Aedes.createBroker({
      authenticate: (client, username, _password, done) => {
        const peer = self?.identityOf(client);
        const cn = peer?.cn;
        const refuse = (message: string) => {
          if (self) self.stats.connectsRefused += 1;
          done(notAuthorized(message), false);
        };
        // no username: the certificate's CN stands in (EMQX's peer_cert_as_username); one that is sent must be the CN
        if (!cn || cn !== client.id || (username ?? cn) !== cn) return refuse('certificate CN must equal client id and username (when one is sent)');
        const serial = peer?.serial;
        if (!serial || self?.revokedSerials.has(normalizeSerial(serial))) return refuse('certificate revoked');
        certificates.set(client, { serial, ...(peer.notBefore ? { notBefore: peer.notBefore } : {}) });
        done(null, true);
      },
      authorizePublish: (client, packet, cb) => {
        if (!client) return cb(null);
        if (!devicePublishAllowed(client.id, packet.topic)) return cb(new Error(`publish to ${packet.topic} not allowed`));
        const hooks = options.hooks;
        const problem = hooks?.refusePayload?.(packet, client);
        if (problem) {
          self!.refusePublish(client, packet, problem);
          return cb(null);
        }
        // Aedes writes a QoS 1 PUBACK before it publishes: a durable one means the message is
        // taken here and the PUBACK waits until it is stored (the 'publish' event skips it then)
        if (packet.qos === 1 && hooks?.whenStored && hooks.published) {
          takenBeforeAck.add(packet.payload as object);
          hooks.published(packet as AedesPublishPacket, client);
          return hooks.whenStored(client, (stored) => {
            if (stored) return cb(null);
            // closed at once (not in order: no PUBACK of a later message may follow)
            client.conn.destroy(new Error('message not stored'));
            cb(new Error('message not stored'));
          }, packet.topic);
        }
        cb(null);
      },
      // QoS 2: the PUBREC follows Aedes' publish, whose last step is this (the 'publish' event,
      // which takes the message, comes right after it in the same turn: the same batch)
      published: (packet, client, done) => {
        const whenStored = options.hooks?.whenStored;
        if (!client || packet.qos !== 2 || !whenStored) return done();
        whenStored(client, (stored) => done(stored ? undefined : new Error('message not stored')), packet.topic);
      },
      authorizeSubscribe: (client, sub, cb) => {
        if (!topicAllowed(client.id, sub.topic)) return cb(null, null);
        cb(null, sub);
      },
      // a device cannot make the broker buffer arbitrarily large packets (MQTT 5: DISCONNECT 0x95)
      maximumPacketSize: MAX_PACKET_BYTES,
      ...options.aedes,
    });
    // every Aedes internal the broker relies on is there (aedesInternals.ts), or the start fails naming it
    try {
      await checkAedesContract(aedes);
    } catch (err) {
      await new Promise<void>((resolve) => aedes.close(() => resolve()));
      throw err;
    }
    const hasListener = cacheTopicMatches(aedesEmitter(aedes));
    const broker = (self = new Broker(options, aedes, hasListener));
    try {
      await new Promise<void>((resolve, reject) => {
        broker.server.once('error', reject);
        broker.server.listen(options.port, options.host, () => resolve());
      });
      await broker.proxyListener?.listen();
      await broker.wsListener?.listen();
    } catch (err) {
      await broker.close().catch(() => {});
      throw err;
    }
    return broker;
  }

  /**
   * The fast lane's take (see fastLane.ts): what `authorizePublish`, Aedes' publish and the
   * 'publish' event do for a device's publish that nobody subscribes to. Such a topic can only be
   * the device's own (the ACL confines every device's subscriptions to its own prefix), so with
   * no listener in the emitter (the gateway's own subscriptions and every connected client's,
   * persistent sessions included: they are online while the device publishes) nothing routes it
   * and nothing is stored for an offline session. Only the topics the broker's service consumes
   * whole qualify (`fastLaneKind`): renewal and OTA listen on the 'publish' event the lane skips.
   * Anything else goes to Aedes. Per connection and topic the lane keeps a memo: the topic's kind
   * (fixed) and whether it has a listener, asked again only after a subscribe or unsubscribe
   * anywhere (the match cache's generation).
   */
  private fastPublish(hasListener: TopicListeners): LaneTaker<LaneTopic> {
    const hooks = this.options.hooks ?? {};
    const { whenStored, storeBatch } = hooks;
    return {
      hold: hooks.hold,
      ...(whenStored && storeBatch ? { durable: { batch: storeBatch, whenStored } } : {}),
      memo: (client, topic) => ({ kind: fastLaneKind(client.id, topic), generation: -1, listened: true }),
      take: (client, packet, memo) => {
        // an exact suffix of the device's own prefix: no wildcard, no NUL
        const { kind } = memo;
        if (kind === undefined) return false;
        const generation = hasListener.generation();
        if (memo.generation !== generation) {
          memo.listened = hasListener(packet.topic);
          memo.generation = generation;
        }
        if (memo.listened) return false;
        return this.takePublish(hooks, client, packet, kind);
      },
    };
  }

  /** What `authorizePublish` (the payload check), Aedes' publish and the 'publish' event do, for a publish the lane takes. */
  private takePublish(hooks: BrokerHooks, client: Client, packet: FastPublish, kind: TopicKind): number {
    // the lane's payload is a view of a reused buffer: `ingest` copies what it keeps; `published` may keep the packet
    if (!hooks.ingest) packet.payload = Buffer.from(packet.payload);
    const publish = packet as unknown as PublishPacket;
    const problem = hooks.ingest ? hooks.ingest(publish, client, kind) : hooks.refusePayload?.(publish, client);
    if (problem) {
      // as refusePublish: MQTT 5 gets 0x99, MQTT 3.1.1 a plain acknowledgement
      this.stats.payloadsRejected[problem] += 1;
      return client.version === 5 ? PAYLOAD_FORMAT_INVALID : 0;
    }
    this.stats.messagesReceived += 1;
    this.stats.fastLane += 1;
    if (!hooks.ingest) hooks.published?.(packet as unknown as AedesPublishPacket, client);
    return 0;
  }

  /**
   * Drops one publish the gateway cannot take, without closing the connection: an MQTT 5 device
   * gets PUBACK/PUBREC 0x99 (payload format invalid) for QoS 1/2; an MQTT 3.1.1 device, which has no
   * failure code, gets a plain acknowledgement (so it does not resend) and the message is counted.
   * Aedes' `authorizePublish` can only refuse with 0x87 (and closes 3.1.1 connections), so this
   * answers itself and sets the flag Aedes' own refusal sets (`_notAuthorized`, see
   * aedes/lib/handlers/publish.js): Aedes then neither acknowledges nor publishes the message.
   */
  private refusePublish(client: Client, packet: PublishPacket, problem: PayloadProblem): void {
    this.stats.payloadsRejected[problem] += 1;
    markNotAuthorized(packet);
    if (packet.qos === 0 || !client.connected) return;
    const v5 = client.version === 5;
    const ack = { cmd: packet.qos === 1 ? 'puback' : 'pubrec', messageId: packet.messageId, ...(v5 ? { reasonCode: PAYLOAD_FORMAT_INVALID } : {}) } as const;
    mqttPacket.writeToStream(ack as mqttPacket.Packet, client.conn, { protocolVersion: v5 ? 5 : 4 });
  }

  get port(): number {
    return (this.server.address() as AddressInfo).port;
  }

  get connectedCount(): number {
    return this.clients.size;
  }

  private tlsOptions(): tls.SecureContextOptions & tls.TlsOptions {
    const { pki } = this.options;
    return {
      key: pki.serverKeyPem,
      cert: pki.serverCertPem + pki.rootPem,
      ca: [pki.deviceCaPem, pki.rootPem],
      requestCert: true,
      rejectUnauthorized: true,
      minVersion: 'TLSv1.2',
      ticketKeys: this.ticketKeys,
      ...(this.crlPem ? { crl: this.crlPem } : {}),
    };
  }

  /**
   * New handshakes are checked against these CRLs at once (no restart): the device CA's and the
   * root's (Node checks the whole chain). `serials` are the device CA CRL's entries.
   */
  setCrl(crlPem: string[] | undefined, serials: Iterable<string>): void {
    this.crlPem = crlPem;
    this.revokedSerials = new Set([...serials].map(normalizeSerial));
    this.server.setSecureContext(this.tlsOptions());
    this.wsListener?.setSecureContext(this.tlsOptions());
  }

  /**
   * Is a new connection of `clientId` taking this node's session over (Aedes closes the old one
   * first: `_takingOver`, see aedes.js registerClient)? Its close is then no disconnect of the device.
   */
  isTakenOver(clientId: string): boolean {
    return isTakingOver(this.aedes, clientId);
  }

  isConnected(clientId: string): boolean {
    return this.clients.has(clientId);
  }

  /** This node's connection of `clientId`, if it holds one. */
  client(clientId: string): Client | undefined {
    return this.clients.get(clientId);
  }

  /**
   * Publishes to one connection of this node (Aedes' `client.publish`: stored in a persistent
   * session, subject to the client's Receive Maximum). Resolves once written, or once queued
   * behind a full window (see `sendQuota`, aedesInternals.ts). `messageExpiry` (epoch ms) keeps the expiry of a
   * message the session stores and sends again on a reconnect.
   */
  sendTo(client: Client, packet: { topic: string; payload: Buffer | string; qos: 0 | 1; properties?: Record<string, unknown>; messageExpiry?: number }): Promise<void> {
    return new Promise((resolve, reject) => {
      client.publish({ cmd: 'publish', dup: false, retain: false, ...packet } as never, (err) => (err ? reject(err) : resolve()));
    });
  }

  /**
   * Disconnects a client on this node and resolves once its socket is closed; false when not here
   * (or, with `onlyRevokedCertificate`, when its certificate is not on the loaded CRL).
   */
  async disconnect(clientId: string, options: DisconnectOptions = {}): Promise<boolean> {
    const client = this.clients.get(clientId);
    if (!client) return false;
    if (options.onlyRevokedCertificate && !this.revokedSerials.has(normalizeSerial(clientCertificate(client)?.serial ?? ''))) return false;
    const conn = client.conn as tls.TLSSocket;
    const closed = conn.destroyed ? Promise.resolve() : new Promise<void>((resolve) => conn.once('close', () => resolve()));
    // MQTT 5 clients get DISCONNECT 0x98 (administrative action) before the socket closes
    // (within LINGER_MS: see linger.ts).
    client.disconnect({ reasonCode: 0x98 }, () => client.close());
    await closed;
    return true;
  }

  /** Publishes as the gateway (cluster-wide through the Aedes emitter). */
  publish(packet: { topic: string; payload: Buffer | string; qos?: 0 | 1; retain?: boolean; properties?: Record<string, unknown> }): Promise<void> {
    return new Promise((resolve, reject) => {
      this.aedes.publish({ cmd: 'publish', qos: packet.qos ?? 0, dup: false, retain: packet.retain ?? false, topic: packet.topic, payload: packet.payload, properties: packet.properties } as never, (err) => (err ? reject(err) : resolve()));
    });
  }

  /** Receives every message on `topic` (wildcards allowed) from any node; returns the unsubscribe. */
  async subscribe(topic: string, onMessage: (packet: AedesPublishPacket) => void): Promise<() => Promise<void>> {
    const deliver = (packet: AedesPublishPacket, cb: () => void) => {
      try {
        onMessage(packet);
      } finally {
        cb();
      }
    };
    await new Promise<void>((resolve) => this.aedes.subscribe(topic, deliver, () => resolve()));
    return () => new Promise<void>((resolve) => this.aedes.unsubscribe(topic, deliver, () => resolve()));
  }

  async close(): Promise<void> {
    for (const c of this.clients.values()) c.close();
    await Promise.all([
      new Promise<void>((resolve) => this.server.close(() => resolve())),
      this.proxyListener?.close(),
      this.wsListener?.close(),
    ]);
    await new Promise<void>((resolve) => this.aedes.close(() => resolve()));
  }
}
