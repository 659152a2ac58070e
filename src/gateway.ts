import type { FastifyBaseLogger, FastifyInstance, RawReplyDefaultExpression, RawRequestDefaultExpression, RawServerDefault } from 'fastify';
import type { ZodTypeProvider } from 'fastify-type-provider-zod';
import type { Registry } from 'prom-client';
import type { Config } from './config.js';
import type { Logger } from './log.js';
import type { Sql } from './db/client.js';
import type { Cluster, DomainBus } from './actors/cluster.js';
import type { ActorStore } from './actors/store.js';
import type { Jobs } from './jobs.js';
import type { Pki } from './pki/pki.js';
import type { Auth } from './http/auth/plugin.js';
import type { DevIssuer } from './http/auth/devIssuer.js';
import type { AnyActorKind } from './actors/store.js';
import type { Clock } from './lib/clock.js';
import type { FaultHook } from './lib/faults.js';

/**
 * Services of the domains, returned by each domain's `init` and declared in its `provides`
 * (declaration merging keeps this file free of domain imports:
 * `declare module '../gateway.js' { interface Services { trust: TrustService } }`).
 * Cross-domain calls go through these services, never through another domain's files.
 */
export interface Services {
  /** broker domain: the MQTT listener's port once it runs (devices are told it at enrollment) */
  mqttEndpoint: MqttEndpoint;
  /** broker domain: disconnects a device's MQTT session on whichever node holds it */
  deviceSessions: DeviceSessions;
  /** trust domain: the device CA's current CRL (regenerated at once on revocation) */
  crl: CrlSource;
  /** trust domain: which account owns a thing (tenant routes of other domains answer 404 across accounts) */
  thingDirectory: ThingDirectory;
  /** quotas domain: the applied value of a quota for an account (its organization's when it is a member) */
  quotaGate: QuotaGate;
  /** blacklist domain: is a (model, serial) on the identity blacklist; who acts when one is added */
  blacklist: IdentityBlacklist;
  /** trust domain: a device authenticated with this certificate (a renewed one's first use revokes the older ones) */
  certificateUse: CertificateUse;
  /** trust domain: the fleet registry's thing filters (model, state, tags, last seen) over an account's things */
  thingSearch: ThingSearch;
  /** broker domain: gateway <-> device messages on one topic kind under `devices/{thingId}/`, cluster-wide */
  deviceMessaging: DeviceMessaging;
  /** trust domain: a device renews its certificate with a CSR (the HTTP route and MQTT apply the same rules) */
  certificateRenewal: CertificateRenewal;
}

/** A query over an account's things, as the fleet registry's list filters take it. */
export interface ThingQuery {
  /** model id (uuid) or the model name things carry (`vid:pid`) */
  model?: string;
  /** lifecycle states (ACTIVATED, ...) */
  state?: string[];
  /** things carrying every one of them */
  tags?: string[];
  last_seen_before?: string;
  last_seen_after?: string;
  /** revoked things only (true) or none of them (false) */
  revoked?: boolean;
  /** things with an MQTT session now (true) or without one (false) */
  connected?: boolean;
}

export interface ThingSummary {
  id: string; model: string; serial: string; state: string; tags: string[]; connected: boolean; last_seen: string | null;
}

export interface ThingSearch {
  /** one keyset page of the matched things, oldest first; `cursor` is the previous page's next_cursor */
  page(accountId: string, query: ThingQuery, page: { limit: number; cursor?: string }): Promise<{ items: ThingSummary[]; next_cursor: string | null }>;
  count(accountId: string, query: ThingQuery): Promise<number>;
  /** ids of the matched things, oldest first, at most `max` */
  ids(accountId: string, query: ThingQuery, max: number): Promise<string[]>;
  /** one thing of the account (serial, model, ...), undefined when it has no such thing */
  describe(accountId: string, thingId: string): Promise<ThingSummary | undefined>;
}

/** Topic kinds of `devices/{thingId}/` other domains use (their suffixes are in src/broker/topics.ts). */
export type GatewayTopic = 'otaUpdate';
export type DeviceTopic = 'otaStatus';

export interface DeviceMessage {
  thingId: string;
  payload: Buffer;
  /** MQTT 5 correlation data, when the device sent it */
  correlationData?: Buffer;
}

export interface DeviceMessaging {
  /**
   * Publishes as the gateway (QoS 1) to whichever node holds the device; a device that is not
   * subscribed misses it (callers redeliver on `onSubscribed`). Throws 503 while the broker is down.
   */
  publish(thingId: string, topic: GatewayTopic, payload: string, properties?: { correlationData?: Buffer; responseTopic?: DeviceTopic }): Promise<void>;
  /**
   * Every message a device connected to this node publishes on its `devices/{id}/{topic}` (payload
   * already checked as a JSON object): each node handles its own devices, so a message is handled
   * once in a cluster. Register at init.
   */
  onMessage(topic: DeviceTopic, listener: (message: DeviceMessage) => void): void;
  /**
   * A device on this node subscribed to a filter that receives `devices/{itself}/{topic}`, or
   * connected with a persistent session (which keeps its subscriptions). Register at init.
   */
  onSubscribed(topic: GatewayTopic, listener: (thingId: string) => void): void;
}

export interface RenewedCertificate {
  thingId: string;
  /** PEM, CN = thingId */
  certificate: string;
  serial: string;
  notAfter: string;
  caCertificate: string;
  caBundlePem: string;
}

export interface CertificateRenewal {
  /**
   * `presented`: the serial (hex) of the certificate the device authenticated with, when the caller
   * has not checked it (MQTT: a session outlives a revocation until it is dropped). Throws domain
   * errors: invalid (bad CSR), refused (revoked thing or certificate), not_found, too_many (pending renewals).
   */
  renew(thingId: string, csr: string, presented?: string): Promise<RenewedCertificate>;
}

export interface CertificateUse {
  /**
   * `serial` as hex in any case; resolves once the older certificates are revoked (a no-op for most
   * calls). `notBefore`, when known, lets a node skip the database for certificates older than a renewal.
   */
  used(thingId: string, serial: string, notBefore?: Date): Promise<void>;
}

/** An identity just put on the blacklist: `model` as things carry it (`VID:PID` or the name a device sent). */
export interface BlacklistedIdentity { model: string; sn: string; by: string }

export interface IdentityBlacklist {
  /** `model` as a device names it at enrollment: a `vid:pid` descriptor, a model id, or a free name */
  isListed(model: string, serial: string): Promise<boolean>;
  /** throws a 403 domain error naming the identity when it is listed */
  refuseListed(model: string, serial: string): Promise<void>;
  /**
   * Later domains act on an added identity (trust revokes its enrolled things). Called after the
   * add commits and again by the enforcement sweep (a crash, an enrollment that committed late),
   * so it must be idempotent; it returns how many things it changed. A throw is retried.
   */
  onAdded(listener: (identity: BlacklistedIdentity) => Promise<number>): void;
}

export interface DisconnectOptions {
  /** drop the session only when its certificate is on the (reloaded) CRL: a rotation keeps the session on the new one */
  onlyRevokedCertificate?: boolean;
}

export interface DeviceSessions {
  /** `disconnected: false` means the device was connected nowhere (the broker's 404) */
  disconnect(thingId: string, options?: DisconnectOptions): Promise<{ disconnected: boolean }>;
}

export interface MqttEndpoint {
  /** the port the broker listens on; undefined until it started */
  readonly port: number | undefined;
}

export interface CrlSource {
  /** cluster topic broadcast after every regeneration; payload `{ number }` */
  readonly changedTopic: 'pki.crl-changed';
  current(): Promise<{ pem: string; der: Buffer; number: number }>;
}

export interface ThingDirectory {
  accountOf(thingId: string): Promise<string | undefined>;
  /** the owning account of each of these things that exists (one query for a batch) */
  accountsOf(thingIds: string[]): Promise<Map<string, string>>;
}

export interface QuotaGate {
  /** applied value, or null when the quota has no limit; throws for an unknown quota code */
  limit(accountId: string, serviceCode: string, quotaCode: string): Promise<number | null>;
}

/** Everything a domain needs, built once per gateway process. */
export interface Gateway {
  config: Config;
  log: Logger;
  sql: Sql;
  /** connection string of `sql` (pg-boss and child processes use it) */
  databaseUrl: string;
  cluster: Cluster;
  /** committed domain events of every node, by event type and '*' */
  bus: DomainBus;
  actors: ActorStore;
  /** the one source of time for lifecycle decisions (tests inject a ManualClock) */
  clock: Clock;
  /** test-only crash injection (src/lib/faults.ts); undefined in production */
  faults?: FaultHook;
  jobs: Jobs;
  pki: Pki;
  auth: Auth;
  devIssuer?: DevIssuer;
  metrics: Registry;
  /** base URL the HTTP API listens on (set after listen) */
  httpUrl?: string;
}

export type ZodApp = FastifyInstance<RawServerDefault, RawRequestDefaultExpression, RawReplyDefaultExpression, FastifyBaseLogger, ZodTypeProvider>;

/**
 * Test hooks of the domains, by domain name: what a domain lets tests observe or trigger below its
 * public interface (HTTP, MQTT, /metrics). A domain declares its entry like Services
 * (`declare module '../gateway.js' { interface TestHooks { ota: OtaTestHooks } }`) and returns
 * it from `init` as `testHooks`; RunningGateway.testHooks collects them. Nothing in the gateway calls them.
 */
export interface TestHooks {}

/**
 * What a domain's own `routes`, `start`, `stop` and `ready` get: the services it requires and
 * everything its `init` returned (the services it provides and its internal state). A domain's
 * state lives there, not in module-level maps keyed by the gateway.
 */
export type DomainView<R extends keyof Services, S> = Pick<Services, R> & S;

/** A domain's own state takes no name of a service it does not provide (it would shadow one in its DomainView). */
export type NoOtherService<P extends keyof Services> = { [K in Exclude<keyof Services, P>]?: never };

/** A domain folder's entry point (`src/<domain>/index.ts`), listed in src/domains.ts. */
export interface DomainModule<
  P extends keyof Services = keyof Services,
  R extends keyof Services = keyof Services,
  S extends Pick<Services, P> = Pick<Services, P>,
> {
  name: string;
  /** the services `init` returns under these names, for the domains after it (the cross-domain contract) */
  provides?: readonly P[];
  /** the services of earlier domains (in src/domains.ts) that this domain uses */
  requires?: readonly R[];
  /** the actor kinds of the lifecycles this domain owns (the architecture check reads their projections) */
  kinds?: readonly AnyActorKind[];
  /**
   * Creates the domain's services from its requirements and registers jobs, auth schemes and
   * layers; runs before routes. Returns the services it `provides` and, beside them, whatever
   * else the domain's own hooks need (its internal state; `testHooks`, see TestHooks): only the
   * declared `provides` reach other domains.
   */
  init?(gw: Gateway, required: Pick<Services, R>): Promise<(S & NoOtherService<P>) | void> | (S & NoOtherService<P>) | void;
  /** a Fastify plugin: schemas and handlers only */
  routes?(app: ZodApp, gw: Gateway, services: DomainView<R, S>): Promise<void>;
  /** after the HTTP server listens: listeners, workers */
  start?(gw: Gateway, services: DomainView<R, S>): Promise<void>;
  /** on shutdown, in reverse order, after HTTP stopped accepting */
  stop?(gw: Gateway, services: DomainView<R, S>): Promise<void>;
  /** readiness check for /readyz; throw or return false when not ready */
  ready?(gw: Gateway, services: DomainView<R, S>): Promise<boolean> | boolean;
}

/** Declares a domain module with its provided and required services and its own state (what `init` returns) typed. */
export function defineDomain<P extends keyof Services = never, R extends keyof Services = never, S extends Pick<Services, P> = Pick<Services, P>>(d: DomainModule<P, R, S>): DomainModule {
  return d as unknown as DomainModule;
}
