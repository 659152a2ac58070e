import { ConfigError, loadConfig } from './config.js';
import { createLogger } from './log.js';
import { startGateway } from './server.js';
import { isLoopback } from './http/trustedProxies.js';

let config;
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
if (config.DEV_ISSUER && !isLoopback(config.HTTP_HOST)) {
  log.warn(
    { HTTP_HOST: config.HTTP_HOST, DEV_TOKEN_REMOTE: config.DEV_TOKEN_REMOTE },
    config.DEV_TOKEN_REMOTE
      ? 'the development token issuer is on, HTTP is on the network and DEV_TOKEN_REMOTE=true: anyone who reaches the port can mint platform-admin tokens'
      : 'the development token issuer is on and HTTP is on the network (it mints tokens for loopback callers only); set OIDC_ISSUERS in production',
  );
}
const started = Date.now();
const running = await startGateway(config, { log }).catch((err) => {
  log.fatal({ err }, 'gateway failed to start');
  process.exit(1);
});

const base = config.PUBLIC_BASE_URL;
const lines = [
  `gateway ${config.NODE_ID} ready in ${Date.now() - started} ms`,
  `  HTTP API      ${base}  (listening on ${config.HTTP_HOST}:${config.HTTP_PORT}${config.httpLoopbackDefault ? ' only: the development issuer is on; set HTTP_HOST to listen on the network' : ''})`,
  `  API docs      ${base}/docs   (OpenAPI JSON: ${base}/docs/json)`,
  `  MQTT (TLS)    mqtts://${config.MQTT_PUBLIC_HOST}:${running.mqttPort ?? config.MQTT_PORT}  (client certificates required)`,
  `  database      ${config.embeddedDatabase ? `embedded PostgreSQL, data in ${config.DATA_DIR}/postgres` : 'DATABASE_URL'}`,
  `  PKI           ${config.CERTS_DIR}`,
  `  health        ${base}/healthz  ${base}/readyz  ${base}/metrics`,
];
if (config.DEV_ISSUER) {
  lines.push(
    `  dev token     npm run token -- --realm acc-<account-uuid> --sub alice --roles admin`,
    `                or: curl -s -XPOST ${base}/dev/token -H 'content-type: application/json' -d '{"realm":"platform","sub":"root","roles":["platform-admin"]}'`,
  );
}
console.log('\n' + lines.join('\n') + '\n');

let stopping = false;
const shutdown = async (signal: string) => {
  if (stopping) return;
  stopping = true;
  log.info({ signal }, 'shutting down');
  const timer = setTimeout(() => {
    log.error('shutdown timed out; exiting');
    process.exit(1);
  }, config.SHUTDOWN_TIMEOUT_MS);
  await running.stop();
  clearTimeout(timer);
  process.exit(0);
};
process.on('SIGTERM', () => void shutdown('SIGTERM'));
process.on('SIGINT', () => void shutdown('SIGINT'));
