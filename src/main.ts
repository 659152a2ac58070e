import cluster from 'node:cluster';
import os from 'node:os';
import path from 'node:path';
import { ConfigError, loadConfig, type Config } from './config.js';
import { createLogger } from './log.js';
import { startGateway } from './server.js';
import { INTERNAL_SECRET_FILE } from './pki/internalSecret.js';
import { isLoopback } from './http/trustedProxies.js';
import { isNodeWorker, reportWorkerReady, startNodePrimary } from './multicore.js';
import { applyHeapPacing } from './heapPacing.js';

let config: Config;
try {
  config = loadConfig();
} catch (err) {
  if (err instanceof ConfigError) {
    console.error(`gateway: ${err.message}`);
    process.exit(2);
  }
  throw err;
}
const log = createLogger(config.LOG_LEVEL, config.LOG_PRETTY);
// before the heap grows (docs/decisions.md, "V8's heap pacing")
applyHeapPacing(config.V8_HEAP_GROWING_PERCENT);

/** What to do about a start-up failure: the error's own hint, or one for the usual causes. */
function startupHint(err: unknown, config: Config): string {
  const e = err as { hint?: unknown; code?: string; port?: number; address?: string } | undefined;
  if (typeof e?.hint === 'string') return e.hint;
  switch (e?.code) {
    case 'EADDRINUSE':
      return `${e.address ?? ''}:${e.port ?? ''} is already in use: stop the process holding it or change HTTP_PORT / MQTT_PORT`;
    case 'EACCES':
    case 'EPERM':
      return `permission denied: check DATA_DIR (${config.DATA_DIR}), CERTS_DIR (${config.CERTS_DIR}) and that ports below 1024 are allowed`;
    case 'ECONNREFUSED':
    case 'ENOTFOUND':
    case 'ETIMEDOUT':
    case '28P01': // invalid password
    case '3D000': // database does not exist
      return config.embeddedDatabase ? 'the embedded PostgreSQL is not reachable; see the log above' : 'check DATABASE_URL and that the database server is running';
  }
  return 'run with LOG_LEVEL=debug for the details of the failing step';
}

// BROKER_WORKERS > 1: this process is the node:cluster primary (src/multicore.ts) or one of its workers
const primary = config.BROKER_WORKERS > 1 && cluster.isPrimary;
const worker = isNodeWorker(config);
if (config.DEV_ISSUER && !isLoopback(config.HTTP_HOST) && !worker) {
  log.warn(
    { HTTP_HOST: config.HTTP_HOST, DEV_TOKEN_REMOTE: config.DEV_TOKEN_REMOTE },
    config.DEV_TOKEN_REMOTE
      ? 'the development token issuer is on, HTTP is on the network and DEV_TOKEN_REMOTE=true: anyone who reaches the port can mint platform-admin tokens'
      : 'the development token issuer is on and HTTP is on the network (it mints tokens for loopback callers only); set OIDC_ISSUERS in production',
  );
}
const started = Date.now();
const onStartFailure = (err: unknown): never => {
  const cause = err instanceof Error ? err.message : String(err);
  log.fatal({ err, hint: startupHint(err, config) }, `gateway failed to start: ${cause}`);
  process.exit(1);
};
/** when the first shutdown signal came (0: none) */
let stopping = 0;
// the signal handlers are there before the start begins: /readyz answers before the start has
// finished, and a Ctrl-C in that window would otherwise kill the process with Node's default action
// (the embedded PostgreSQL left to its watchdog).
process.on('SIGTERM', () => void shutdown('SIGTERM'));
process.on('SIGINT', () => void shutdown('SIGINT'));
const starting: Promise<{ mqttPort?: number; httpsPort?: number; stop(): Promise<void> }> = primary ? startNodePrimary(config, log) : startGateway(config, { log });
const running = await starting.catch(onStartFailure);
if (worker) reportWorkerReady(running.mqttPort ?? config.MQTT_PORT);

const base = config.PUBLIC_BASE_URL;
const lines = [
  `gateway ${config.NODE_ID} ready in ${Date.now() - started} ms${primary ? ` (${config.BROKER_WORKERS} worker processes)` : ''}`,
  `  HTTP API      ${base}  (listening on ${config.HTTP_HOST}:${config.HTTP_PORT}${config.httpLoopbackDefault ? ' only: the development issuer is on; set HTTP_HOST to listen on the network' : ''})`,
  `  console       ${config.CONSOLE_BASE_URL}/things  (sign in${config.DEV_ISSUER ? ' with a realm, a user and roles' : ' with an access token'})`,
  `  API docs      ${base}/docs   (OpenAPI JSON: ${base}/docs/json)`,
  ...(config.HTTPS_PORT !== undefined
    ? [`  HTTPS (mTLS)  https://${config.MQTT_PUBLIC_HOST}:${running.httpsPort ?? config.HTTPS_PORT}  (devices call /ddi with their certificates; listening on ${config.HTTP_HOST})`]
    : []),
  `  MQTT (TLS)    mqtts://${config.MQTT_PUBLIC_HOST}:${running.mqttPort ?? config.MQTT_PORT}  (client certificates required)`,
  ...(config.MQTT_WS_PORT !== undefined
    ? [`  MQTT over WS  ${config.MQTT_WS_BEHIND_PROXY ? `ws://<host>:${config.MQTT_WS_PORT}/mqtt  (plain, behind the TLS terminators in TRUSTED_PROXIES)` : `wss://${config.MQTT_PUBLIC_HOST}:${config.MQTT_WS_PORT}/mqtt  (client certificates required)`}`]
    : []),
  ...(config.MQTT_PROXY_PORT !== undefined
    ? [`  MQTT (proxy)  tcp port ${config.MQTT_PROXY_PORT}  (PROXY v2 from TRUSTED_PROXIES only: a TLS terminator in front)`]
    : []),
  `  database      ${config.embeddedDatabase ? `embedded PostgreSQL, data in ${config.DATA_DIR}/postgres` : 'DATABASE_URL'}`,
  `  PKI           ${config.CERTS_DIR}`,
  `  internal API  send X-Internal-Secret: ${config.INTERNAL_API_SECRET ? 'the value of INTERNAL_API_SECRET' : `the contents of ${path.join(config.CERTS_DIR, INTERNAL_SECRET_FILE)}`}  (broker hook POST /ddi/v1/authn/emqx)`,
  `  health        ${base}/healthz  ${base}/readyz  ${base}/metrics`,
];
if (config.DEV_ISSUER) {
  lines.push(
    `  dev token     npm run token -- --realm acc-<account-uuid> --sub alice --roles admin`,
    `                or: curl -s -XPOST ${base}/dev/token -H 'content-type: application/json' -d '{"realm":"platform","sub":"root","roles":["platform-admin"]}'`,
  );
}
// a worker's banner would repeat the primary's
if (!worker) console.log('\n' + lines.join('\n') + '\n');

/**
 * SIGTERM/SIGINT: stop accepting, let in-flight requests finish for SHUTDOWN_TIMEOUT_MS, then close
 * the remaining connections, stop the broker (devices disconnected, this node deregistered), the
 * jobs and the database, and exit 0; a signal during the start stops the gateway once it has
 * started. A second signal exits at once (the embedded PostgreSQL is then stopped by its watchdog).
 */
async function shutdown(signal: NodeJS.Signals): Promise<void> {
  if (stopping) {
    // npm and tsx both relay a terminal's Ctrl-C, so one key press can arrive twice
    if (Date.now() - stopping < 1000) return;
    log.warn({ signal }, 'second signal: exiting without finishing the shutdown');
    process.exit(128 + (os.constants.signals[signal] ?? 0));
  }
  stopping = Date.now();
  log.info({ signal, graceMs: config.SHUTDOWN_TIMEOUT_MS }, 'shutting down');
  // a last resort, for a step that hangs (the HTTP grace period alone ends by closing sockets)
  setTimeout(() => {
    log.error('shutdown did not finish; exiting');
    process.exit(1);
  }, config.SHUTDOWN_TIMEOUT_MS + 60_000).unref();
  // a failed start exits by itself (onStartFailure)
  await (await starting.catch(() => new Promise<never>(() => {}))).stop();
  log.info({ ms: Date.now() - stopping }, 'shutdown complete');
  process.exit(0);
}
// a worker whose primary is gone (killed) stops too, instead of serving on without its siblings
if (worker) process.on('disconnect', () => void shutdown('SIGTERM'));
