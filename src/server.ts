import path from 'node:path';
import type { AddressInfo } from 'node:net';
import type { Config } from './config.js';
import { createLogger, type Logger } from './log.js';
import { createSql } from './db/client.js';
import { DatabaseProbe } from './db/readiness.js';
import { ensureInternalSecret } from './pki/internalSecret.js';
import { GrowingTables } from './db/growingTables.js';
import { ensureDatabase, startEmbeddedPostgres, type EmbeddedDatabase } from './db/embedded.js';
import { migrate } from './db/migrate.js';
import { waitForDatabase } from './db/connect.js';
import { Cluster, DomainBus } from './actors/cluster.js';
import { ActorStore } from './actors/store.js';
import { Jobs } from './jobs.js';
import { Pki } from './pki/pki.js';
import { DevIssuer } from './http/auth/devIssuer.js';
import { JwtVerifier } from './http/auth/jwt.js';
import { Auth } from './http/auth/plugin.js';
import { createMetrics } from './http/metrics.js';
import { buildHttp } from './http/app.js';
import { startHttpsListener, type HttpsListener } from './http/httpsListener.js';
import type { DomainModule, Gateway, Services, TestHooks, ZodApp } from './gateway.js';
import { systemClock, type Clock } from './lib/clock.js';
import type { FaultHook } from './lib/faults.js';
import { checkWiring, servicesOf, wireDomains } from './wiring.js';
import { domains as allDomains } from './domains.js';

export interface RunningGateway {
  gw: Gateway;
  /** every domain's declared services (benchmarks, and tests of domains without test hooks yet) */
  services: Services;
  /** the test hooks the domains declare (src/gateway.ts TestHooks), by domain name */
  testHooks: TestHooks;
  app: ZodApp;
  httpUrl: string;
  /** the devices' mutual-TLS listener (HTTPS_PORT set) */
  httpsPort?: number;
  mqttPort?: number;
  databaseUrl: string;
  stop(): Promise<void>;
}

/**
 * Stops accepting and lets in-flight requests that make progress finish for `graceMs`; then
 * closes the connections still open (a slow client) so that the shutdown goes on with the broker
 * and the database instead of waiting for them. A request stalled in its body is not waited for:
 * app.close() starts the cutoff of src/http/stalledUploads.ts, which answers it 503 at once.
 */
async function closeHttp(app: ZodApp, graceMs: number, log: Logger): Promise<void> {
  const closed = app.close();
  const timer = setTimeout(() => {
    log.warn({ graceMs }, 'shutdown grace period over: closing the remaining HTTP connections');
    app.server.closeAllConnections();
  }, graceMs);
  try {
    await closed;
  } finally {
    clearTimeout(timer);
  }
}

export interface StartOptions {
  log?: Logger;
  domains?: DomainModule[];
  /** time source of lifecycle decisions (tests pass a ManualClock) */
  clock?: Clock;
  /** test-only crash injection points (src/lib/faults.ts); none in production */
  faults?: FaultHook;
}

/**
 * Starts one gateway node: database (embedded unless DATABASE_URL), migrations, PKI, identity,
 * domains, HTTP, broker, jobs. `stop` reverses it: stop accepting, finish in-flight requests,
 * close the broker, the jobs and the database.
 */
export async function startGateway(config: Config, options: StartOptions = {}): Promise<RunningGateway> {
  const log = options.log ?? createLogger(config.LOG_LEVEL, config.LOG_PRETTY);
  const domains = options.domains ?? allDomains;
  checkWiring(domains);
  const cleanups: (() => Promise<void>)[] = [];
  const stopAll = async () => {
    for (const c of cleanups.splice(0).reverse()) await c().catch((err) => log.error({ err }, 'shutdown step failed'));
  };
  try {
    let databaseUrl = config.DATABASE_URL;
    if (!databaseUrl) {
      const embedded: EmbeddedDatabase = await startEmbeddedPostgres(path.join(config.DATA_DIR, 'postgres'), {
        port: config.EMBEDDED_PG_PORT,
        log: log.child({ component: 'postgres' }),
      });
      cleanups.push(() => embedded.stop());
      databaseUrl = await ensureDatabase(embedded.url, 'gateway');
    } else await waitForDatabase(databaseUrl, { timeoutMs: config.DATABASE_CONNECT_TIMEOUT_MS, log });
    const sql = createSql(databaseUrl, config.DATABASE_POOL_SIZE);
    cleanups.push(() => sql.end({ timeout: 5 }));
    // /readyz's own connection: its check never queues behind the pool's statements
    const databaseProbe = DatabaseProbe.connect(databaseUrl);
    cleanups.push(() => databaseProbe.end());
    const { applied } = await migrate(sql);
    if (applied.length) log.info({ applied }, 'migrations applied');
    const growingTables = new GrowingTables(sql, log.child({ component: 'statistics' }));
    growingTables.start();
    cleanups.push(() => growingTables.stop());

    const cluster = new Cluster(sql, config.NODE_ID, log.child({ component: 'cluster' }));
    await cluster.start();
    cleanups.push(() => cluster.stop());
    const bus = new DomainBus();
    const actors = new ActorStore(sql, cluster, bus);
    const pki = await Pki.ensure(sql, {
      dir: config.CERTS_DIR,
      serverNames: [config.MQTT_PUBLIC_HOST],
      crlUrl: `${config.PUBLIC_BASE_URL}/api/v1/certificates/crl`,
      rootCrlUrl: `${config.PUBLIC_BASE_URL}/api/v1/certificates/root-crl`,
    });
    const devIssuer = config.DEV_ISSUER ? await DevIssuer.load(sql, config.PUBLIC_BASE_URL) : undefined;
    // INTERNAL_API_SECRET, else the one generated in CERTS_DIR (shared by the nodes that share the folder)
    const internalSecret = config.INTERNAL_API_SECRET ?? ensureInternalSecret(config.CERTS_DIR).secret;
    const auth = new Auth(new JwtVerifier(config.OIDC_ISSUERS, devIssuer, config.OIDC_AUDIENCE), { internalSecret });
    const jobs = new Jobs(databaseUrl, log.child({ component: 'jobs' }));
    const gw: Gateway = { config, log, sql, databaseUrl, cluster, bus, actors, clock: options.clock ?? systemClock, faults: options.faults, jobs, pki, auth, devIssuer, metrics: createMetrics() };

    const wired = await wireDomains(domains, gw);
    const { services } = wired;
    const app = await buildHttp(gw, domains, wired, databaseProbe);
    // Shutdown, in this order: stop accepting and finish in-flight requests, then the domains
    // (broker) in reverse, then the jobs, then cluster, database and embedded Postgres.
    const started: DomainModule[] = [];
    let jobsStarted = false;
    let httpsListener: HttpsListener | undefined;
    cleanups.push(async () => {
      await Promise.all([httpsListener?.close(config.SHUTDOWN_TIMEOUT_MS), closeHttp(app, config.SHUTDOWN_TIMEOUT_MS, log)]);
      for (const d of started.reverse()) await d.stop!(gw, servicesOf(d, wired)).catch((err) => log.error({ err, domain: d.name }, 'domain stop failed'));
      if (jobsStarted) await jobs.stop();
    });
    await app.listen({ host: config.HTTP_HOST, port: config.HTTP_PORT });
    const { port } = app.server.address() as AddressInfo;
    gw.httpUrl = `http://127.0.0.1:${port}`;
    if (config.HTTPS_PORT !== undefined) httpsListener = await startHttpsListener(gw, app, services.crl);
    if (config.JOBS) {
      await jobs.start();
      jobsStarted = true;
    }
    for (const d of domains) {
      if (!d.start) continue;
      await d.start(gw, servicesOf(d, wired));
      if (d.stop) started.push(d);
    }
    return { gw, services, testHooks: wired.testHooks, app, httpUrl: gw.httpUrl, httpsPort: httpsListener?.port, mqttPort: services.mqttEndpoint.port, databaseUrl, stop: stopAll };
  } catch (err) {
    await stopAll();
    throw err;
  }
}
