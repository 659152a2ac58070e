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
// eslint-disable-next-line @typescript-eslint/no-empty-object-type
export interface Services {}

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
