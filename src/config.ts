import { z } from 'zod';
import fs from 'node:fs';
import path from 'node:path';
import { isAddressOrCidr } from './http/trustedProxies.js';
import { originOf } from './http/wsOrigin.js';

const bool = z
  .enum(['true', 'false', '1', '0', 'yes', 'no', 'on', 'off'])
  .transform((v) => ['true', '1', 'yes', 'on'].includes(v));
const port = z.coerce.number().int().min(0).max(65535);
const positiveInt = z.coerce.number().int().positive();
const url = z.url();
const csv = z
  .string()
  .transform((v) => v.split(',').map((s) => s.trim()).filter(Boolean));

/**
 * Every setting of the gateway is an environment variable, parsed here and nowhere else.
 * Defaults serve the embedded mode (`npm start` on a fresh machine). README lists them all.
 */
export const configSchema = z.object({
  NODE_ID: z.string().min(1).optional().describe('Name of this gateway node (default: hostname-pid)'),
  HTTP_HOST: z.string().min(1).optional().describe('default 0.0.0.0, but 127.0.0.1 while the development issuer is on'),
  HTTP_PORT: port.default(8080),
  HTTPS_PORT: port.optional().describe('mutual-TLS listener for devices (/ddi with their certificates); unset = off'),
  MQTT_HOST: z.string().default('0.0.0.0'),
  MQTT_PORT: port.default(8883),
  MQTT_PUBLIC_HOST: z.string().default('localhost'),
  MQTT_PUBLIC_PORT: port.optional(),
  MQTT_PROXY_PORT: port.optional().describe('MQTT behind a TLS terminator (HAProxy send-proxy-v2): plain TCP from TRUSTED_PROXIES only, each connection beginning with a PROXY v2 header carrying the verified client certificate; unset = off'),
  MQTT_WS_PORT: port.optional().describe('MQTT over secure WebSocket (wss://host:port/mqtt, subprotocol mqtt), client certificates as on MQTT_PORT; unset = off'),
  MQTT_WS_BEHIND_PROXY: bool.default(false).describe('MQTT_WS_PORT is plain HTTP behind a TLS terminator (PROXY v2 headers from TRUSTED_PROXIES, as MQTT_PROXY_PORT) instead of TLS'),
  HAPROXY_RUNTIME_API: csv.default([]).describe('HAProxy admin sockets (unix socket paths or host:port) to push every CRL change to, before a revocation answers (set ssl crl-file + commit ssl crl-file)'),
  HAPROXY_CRL_PATH: z.string().min(1).optional().describe("the crl-file name in HAProxy's configuration the pushes replace (required with HAPROXY_RUNTIME_API)"),
  DATA_DIR: z.string().default('./data'),
  CERTS_DIR: z.string().default('./certs'),
  DATABASE_URL: url.optional(),
  DATABASE_PASSWORD: z.string().min(1).optional().describe("password of DATABASE_URL's user (replaces one in the URL): with DATABASE_PASSWORD_FILE, the same secret file the database server reads"),
  DATABASE_POOL_SIZE: positiveInt.default(10),
  DATABASE_CONNECT_TIMEOUT_MS: positiveInt.default(60_000).describe('how long start-up waits for DATABASE_URL to answer'),
  EMBEDDED_PG_PORT: port.default(5433),
  REDIS_URL: url.optional(),
  BROKER_WORKERS: positiveInt.max(64).default(1).describe('processes of this node (node:cluster workers sharing the HTTP and MQTT listeners, each a gateway node of its own); 1 = one process'),
  PUBLIC_BASE_URL: url.optional(),
  CONSOLE_BASE_URL: url.optional(),
  WS_ALLOWED_ORIGINS: csv
    .default([])
    .refine((list) => list.every((o) => originOf(o) === o.replace(/\/$/, '').toLowerCase()), 'each entry must be an origin: scheme, host and port only (https://console.example, http://localhost:3000)')
    .describe('browser origins, besides the console\'s own (PUBLIC_BASE_URL, CONSOLE_BASE_URL), whose pages may open WebSocket streams'),
  OIDC_ISSUERS: csv.default([]),
  OIDC_AUDIENCE: z.string().optional(),
  DEV_ISSUER: bool.optional(),
  DEV_TOKEN_REMOTE: bool.default(false).describe('let non-loopback callers mint development tokens at /dev/token'),
  TRUSTED_PROXIES: csv
    .default([])
    .refine((list) => list.every(isAddressOrCidr), 'each entry must be an IP address or a CIDR (10.0.0.5, 10.0.0.0/8, fd00::/8)')
    .describe('reverse proxies whose X-Forwarded-* headers are believed'),
  AUTH_FAILURE_LIMIT: positiveInt.default(10).describe('wrong secrets of one credential identifier from one source address within the window'),
  AUTH_FAILURE_IDENTIFIER_LIMIT: positiveInt.default(100).describe('wrong secrets of one credential identifier from all sources within the window (then sources that failed it wait; others still verify)'),
  AUTH_FAILURE_SOURCE_LIMIT: positiveInt.default(30).describe('wrong secrets and unknown identifiers from one source address within the window (then its refusals are answered 429; credentials that verify are still served)'),
  AUTH_FAILURE_WINDOW_SECONDS: positiveInt.default(60),
  LOG_LEVEL: z.enum(['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent']).default('info'),
  LOG_PRETTY: bool.optional(),
  BODY_LIMIT_BYTES: positiveInt.default(1024 * 1024),
  SHUTDOWN_TIMEOUT_MS: positiveInt.default(10_000).describe('grace period for in-flight HTTP requests at shutdown; then their connections are closed'),
  HTTP_REQUEST_TIMEOUT_MS: positiveInt.default(30_000).describe('a request (headers and body) must arrive within this time, else 408 and the connection is closed'),
  HTTP_HEADERS_TIMEOUT_MS: positiveInt.default(10_000).describe('the request headers must arrive within this time (capped at HTTP_REQUEST_TIMEOUT_MS)'),
  ENROLLMENT_TOKEN_TTL: positiveInt.default(24 * 3600).describe('seconds'),
  DEVICE_CERT_DAYS: positiveInt.default(365),
  CRL_REFRESH_SECONDS: positiveInt.default(60),
  CERT_RENEWAL_MAX_PENDING: positiveInt.max(100).default(3).describe('renewed certificates not yet used that one thing may obtain per 24 h (more: 429)'),
  CERT_EXPIRY_WARNING_DAYS: positiveInt.max(365).default(30).describe('the account is notified once of each current device certificate expiring within this many days'),
  INTERNAL_API_SECRET: z.string().min(32, 'at least 32 characters').optional().describe('shared secret of internal endpoints (X-Internal-Secret); unset = they answer only this gateway'),
  NOTIFY_AUTHZ_URL: url.optional(),
  SMTP_URL: z.string().optional(),
  MAIL_FROM: z.string().default('Device Gateway <gateway@localhost>'),
  SSE_HEARTBEAT_SECONDS: positiveInt.default(25),
  COMMAND_TIMEOUT_MS: positiveInt.default(10_000),
  MARKETPLACE_MAX_PRODUCTS: positiveInt.default(1000).describe('marketplace products one account holds in any state (more: 409)'),
  COMMAND_MAX_PENDING: positiveInt.default(1000).describe('commands with a TTL waiting for one offline thing (more: 409)'),
  JOBS: bool.default(true),
  TELEMETRY_INGEST: bool.default(true).describe('parse and store device telemetry (off: the broker routes telemetry messages without reading them; last seen is still kept)'),
  TELEMETRY_HISTORY: bool.default(true).describe('store every telemetry message in telemetry_history (off: latest values only)'),
  TELEMETRY_BATCH_BYTES: z.coerce.number().int().min(64 * 1024).default(16 * 1024 * 1024).describe('telemetry bytes that start an ingest flush before its timer; when the database is slower than the devices and twice this waits, devices are not read until a flush has taken it (TCP backpressure: bounded memory, nothing dropped)'),
  V8_HEAP_GROWING_PERCENT: z.coerce.number().int().min(0).max(1000).default(200).describe('how far V8 lets the old generation grow past what the last full collection kept before it collects again, in percent (V8\'s --heap-growing-percent; 200: three times; 0: V8\'s own pacing, which started a full collection every few megabytes promoted under a data bridge rule\'s load)'),
  TELEMETRY_RECENT_MB: z.coerce.number().int().min(0).max(4096).default(256).describe('memory in which a node keeps the telemetry history rows it wrote last, taken only while a data bridge rule on it reads the log (the rule reads their points from there instead of PostgreSQL; a burst the rule is behind on fits in it) and given back 30 s after its last read; 0: none'),
  TELEMETRY_RETENTION_DAYS: positiveInt.max(3650).default(30).describe('days of telemetry history kept; older daily partitions are dropped'),
  INGEST_RATE_LIMIT: positiveInt.default(600).describe('ingest requests per partner per window (all nodes together when REDIS_URL is set)'),
  INGEST_RATE_WINDOW_SECONDS: positiveInt.default(60),
  INGEST_JOB_BODY_LIMIT_BYTES: positiveInt.default(64 * 1024 * 1024).describe('largest bulk job request body'),
  INGEST_JOB_MAX_ITEMS: positiveInt.default(500_000),
  INGEST_JOB_UPLOADS_PER_PARTNER: positiveInt.default(4).describe('bulk job requests of one partner that one node receives and stages at once; more get 429 with Retry-After'),
  INGEST_JOB_BUDGET_BYTES: positiveInt.default(512 * 1024 * 1024).describe('bytes of bulk job bodies one node receives and stages at once (each job counts its Content-Length, or INGEST_JOB_BODY_LIMIT_BYTES without one, and at least 4 MiB); more get 503 with Retry-After'),
  INGEST_JOB_SPOOL_DIR: z.string().min(1).optional().describe('where job bodies are spooled while they are staged (default: the system temporary directory); holds at most INGEST_JOB_BUDGET_BYTES'),
  ALLOW_PRIVATE_TARGETS: bool.default(false).describe('let outbound calls (factory-service health checks, saga legs, webhook deliveries) reach loopback, link-local and private addresses (development and tests)'),
  OUTBOUND_CA_FILE: z.string().min(1).optional().describe('PEM file of extra CA certificates trusted for outbound HTTPS (factory backends, webhook receivers), beside the system roots'),
  PROVISION_LEG_ATTEMPTS: positiveInt.max(20).default(5).describe('attempts per PROVISION saga leg before the run fails'),
  PROVISION_LEG_RETRY_SECONDS: positiveInt.default(30).describe('wait before the second attempt of a failed leg; doubled for each further one (at most 1 hour)'),
  PROVISION_LEG_TIMEOUT_SECONDS: positiveInt.default(600).describe('how long a dispatched leg waits for its provisioning-result before the attempt counts as failed'),
  WEBHOOK_TIMEOUT_MS: positiveInt.default(10_000).describe('a webhook receiver must answer within this time (connect, TLS, request and answer together, on the gateway clock), else the attempt is cut and failed'),
  WEBHOOK_MAX_ATTEMPTS: positiveInt.default(8).describe('attempts of one webhook delivery before it is dropped'),
  WEBHOOK_RETRY_BASE_MS: positiveInt.default(5_000).describe('delay before the first retry of a delivery; doubled for each further attempt (with jitter), at most an hour'),
  WEBHOOK_SUSPEND_AFTER: positiveInt.default(5).describe('dropped deliveries in a row that suspend a subscription (its account is notified); with the defaults a receiver that never answers is suspended 6.6 to 13 minutes after its first undelivered changes'),
  BRIDGE_FAILING_AFTER_SECONDS: positiveInt.default(300).describe('a data bridge rule whose sink refused every delivery for this long is marked FAILING and its account notified (deliveries keep being retried)'),
  BRIDGE_LEASE_SECONDS: positiveInt.default(10).describe('a node delivers a data bridge rule under a lease renewed every quarter of this; a node that died (kill -9) holds its rules this long before another node, or its own restart, takes them over'),
  BRIDGE_DELIVERY_THREAD: bool.default(true).describe('data bridge rules build and publish their messages on a thread of the process\'s own (off: on the main thread, beside the broker\'s reads and PUBACKs)'),
  BRIDGE_RETRY_MAX_MS: positiveInt.default(30_000).describe('longest wait between retries of a data bridge rule whose sink refuses (doubled from 500 ms)'),
  WEBHOOK_CONCURRENCY: positiveInt.default(64).describe('webhook deliveries in flight per node, in fair shares: an account at most max(1, floor(N / (busy accounts + 1))), a subscription at most max(1, floor(its account\'s share / (its busy subscriptions + 1)))'),
});

export type RawConfig = z.infer<typeof configSchema>;

export interface Config extends Omit<RawConfig, 'HTTP_HOST' | 'PUBLIC_BASE_URL' | 'CONSOLE_BASE_URL' | 'DEV_ISSUER' | 'NODE_ID'> {
  NODE_ID: string;
  HTTP_HOST: string;
  /** HTTP_HOST was not given and the development issuer is on, so the listener is on loopback only */
  httpLoopbackDefault: boolean;
  PUBLIC_BASE_URL: string;
  CONSOLE_BASE_URL: string;
  DEV_ISSUER: boolean;
  /** true when no DATABASE_URL is given: the gateway runs its own PostgreSQL */
  embeddedDatabase: boolean;
}

export class ConfigError extends Error {}

/**
 * Settings holding secrets: each may instead come from a file named by `<NAME>_FILE` (compose and
 * Kubernetes secrets), so the value is in no environment, compose file or `docker inspect`.
 */
export const FILE_SETTINGS = ['DATABASE_URL', 'DATABASE_PASSWORD', 'REDIS_URL', 'INTERNAL_API_SECRET', 'SMTP_URL'] as const;

const invalidConfiguration = (lines: string[]) => new ConfigError(`invalid configuration:\n${lines.join('\n')}`);

/**
 * The values of the `<NAME>_FILE` settings read from their files, trailing newlines dropped (as
 * the postgres image's entrypoint drops them, so one file serves both). `<NAME>` set beside its
 * file must hold the same value (a node:cluster worker inherits both from its primary).
 */
function readSecretFiles(env: Record<string, string | undefined>): Map<string, { file: string; value: string }> {
  const found = new Map<string, { file: string; value: string }>();
  const errors: string[] = [];
  for (const name of FILE_SETTINGS) {
    const file = env[`${name}_FILE`];
    if (file === undefined || file === '') continue;
    let value: string;
    try {
      value = fs.readFileSync(file, 'utf8').replace(/\n+$/, '');
    } catch (err) {
      errors.push(`  ${name}_FILE=${JSON.stringify(file)}: cannot read the file (${(err as NodeJS.ErrnoException).code ?? String(err)})`);
      continue;
    }
    if (value === '') errors.push(`  ${name}_FILE=${JSON.stringify(file)}: the file is empty`);
    else if (env[name] !== undefined && env[name] !== '' && env[name] !== value) errors.push(`  ${name}_FILE=${JSON.stringify(file)}: ${name} is set too, to another value: set one of them`);
    else found.set(name, { file, value });
  }
  if (errors.length) throw invalidConfiguration(errors);
  return found;
}

/** Parses the environment; a bad value throws a ConfigError naming the variable (never showing a secret's value). */
export function loadConfig(env: Record<string, string | undefined> = process.env): Config {
  const fromFiles = readSecretFiles(env);
  const input: Record<string, string> = {};
  for (const key of Object.keys(configSchema.shape)) {
    const value = fromFiles.get(key)?.value ?? env[key];
    if (value !== undefined && value !== '') input[key] = value;
  }
  const parsed = configSchema.safeParse(input);
  if (!parsed.success) {
    const lines = parsed.error.issues.map((i) => {
      const key = String(i.path[0]);
      const file = fromFiles.get(key)?.file;
      const shown = file !== undefined ? `${key}_FILE=${JSON.stringify(file)}`
        : (FILE_SETTINGS as readonly string[]).includes(key) ? `${key}=(${(input[key] ?? '').length} characters, not shown)`
        : `${i.path.join('.')}=${JSON.stringify(input[key] ?? '')}`;
      return `  ${shown}: ${i.message}`;
    });
    throw invalidConfiguration(lines);
  }
  const raw = parsed.data;
  if (raw.DATABASE_PASSWORD !== undefined) {
    if (!raw.DATABASE_URL) throw invalidConfiguration(['  DATABASE_PASSWORD: needs DATABASE_URL (the embedded PostgreSQL takes no password)']);
    const withPassword = new URL(raw.DATABASE_URL);
    // encoded whole (the setter leaves `%` as it is); postgres.js decodes the URL's password
    withPassword.password = encodeURIComponent(raw.DATABASE_PASSWORD);
    raw.DATABASE_URL = withPassword.href;
  }
  if ((raw.MQTT_PROXY_PORT !== undefined || raw.MQTT_WS_BEHIND_PROXY) && raw.TRUSTED_PROXIES.length === 0) throw invalidConfiguration(['  MQTT_PROXY_PORT / MQTT_WS_BEHIND_PROXY: need TRUSTED_PROXIES (the TLS terminators allowed to send PROXY headers)']);
  if (raw.HAPROXY_RUNTIME_API.length > 0 && !raw.HAPROXY_CRL_PATH) throw invalidConfiguration(['  HAPROXY_RUNTIME_API: needs HAPROXY_CRL_PATH (the crl-file path in the HAProxy configuration)']);
  const devIssuer = raw.DEV_ISSUER ?? raw.OIDC_ISSUERS.length === 0;
  // The development issuer mints platform-admin tokens for whoever asks: off the network by default.
  const httpLoopbackDefault = devIssuer && raw.HTTP_HOST === undefined;
  const publicBase = (raw.PUBLIC_BASE_URL ?? `http://localhost:${raw.HTTP_PORT}`).replace(/\/$/, '');
  return {
    ...raw,
    NODE_ID: raw.NODE_ID ?? `${process.env.HOSTNAME ?? 'node'}-${process.pid}`,
    HTTP_HOST: raw.HTTP_HOST ?? (httpLoopbackDefault ? '127.0.0.1' : '0.0.0.0'),
    httpLoopbackDefault,
    DATA_DIR: path.resolve(raw.DATA_DIR),
    CERTS_DIR: path.resolve(raw.CERTS_DIR),
    PUBLIC_BASE_URL: publicBase,
    CONSOLE_BASE_URL: (raw.CONSOLE_BASE_URL ?? `${publicBase}/console`).replace(/\/$/, ''),
    DEV_ISSUER: devIssuer,
    embeddedDatabase: !raw.DATABASE_URL,
  };
}
