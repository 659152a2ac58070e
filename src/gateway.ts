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

/**
 * Services of the domains, added by each domain's `init` (declaration merging keeps this file
 * free of domain imports): `declare module '../gateway.js' { interface Services { trust: TrustService } }`.
 * Cross-domain calls go through these services, never through another domain's repo.
 */
export interface Services {
  /** broker domain: disconnects a device's MQTT session on whichever node holds it */
  deviceSessions: DeviceSessions;
  /** trust domain: the device CA's current CRL (regenerated at once on revocation) */
  crl: CrlSource;
  /** trust domain: which account owns a thing (tenant routes of other domains answer 404 across accounts) */
  thingDirectory: ThingDirectory;
  /** quotas domain: the applied value of a quota for an account (its organization's when it is a member) */
  quotaGate: QuotaGate;
}

export interface DeviceSessions {
  /** `disconnected: false` means the device was connected nowhere (the broker's 404) */
  disconnect(thingId: string): Promise<{ disconnected: boolean }>;
}

export interface CrlSource {
  /** cluster topic broadcast after every regeneration; payload `{ number }` */
  readonly changedTopic: 'pki.crl-changed';
  current(): Promise<{ pem: string; der: Buffer; number: number }>;
}

export interface ThingDirectory {
  accountOf(thingId: string): Promise<string | undefined>;
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
  jobs: Jobs;
  pki: Pki;
  auth: Auth;
  devIssuer?: DevIssuer;
  metrics: Registry;
  services: Partial<Services>;
  /** base URL the HTTP API listens on (set after listen) */
  httpUrl?: string;
}

export type ZodApp = FastifyInstance<RawServerDefault, RawRequestDefaultExpression, RawReplyDefaultExpression, FastifyBaseLogger, ZodTypeProvider>;

/** A domain folder's entry point (`src/<domain>/index.ts`), listed in src/domains.ts. */
export interface DomainModule {
  name: string;
  /** create services and register jobs, auth schemes and layers; runs before routes */
  init?(gw: Gateway): Promise<void> | void;
  /** a Fastify plugin: schemas and handlers only */
  routes?(app: ZodApp, gw: Gateway): Promise<void>;
  /** after the HTTP server listens: listeners, workers */
  start?(gw: Gateway): Promise<void>;
  /** on shutdown, in reverse order, after HTTP stopped accepting */
  stop?(gw: Gateway): Promise<void>;
  /** readiness check for /readyz; throw or return false when not ready */
  ready?(gw: Gateway): Promise<boolean> | boolean;
}

/** Typed access to a domain service that must exist. */
export function service<K extends keyof Services>(gw: Gateway, name: K): Services[K] {
  const s = gw.services[name];
  if (!s) throw new Error(`service ${String(name)} is not initialised`);
  return s as Services[K];
}
