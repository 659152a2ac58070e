import { randomBytes } from 'node:crypto';
import { STATUS_CODES } from 'node:http';
import type { Duplex } from 'node:stream';
import Fastify, { type FastifyBaseLogger } from 'fastify';
import swagger from '@fastify/swagger';
import swaggerUi from '@fastify/swagger-ui';
import websocket from '@fastify/websocket';
import { z } from 'zod';
import { serializerCompiler, validatorCompiler, type ZodTypeProvider } from 'fastify-type-provider-zod';
import type { DomainModule, Gateway, ZodApp } from '../gateway.js';
import { frameworkErrorHandler, MAX_PARAM_LENGTH, registerErrorHandling } from './errors.js';
import { installInputGuard } from './inputGuard.js';
import { servicesOf, type WiredDomains } from '../wiring.js';
import { installHttpMetrics } from './metrics.js';
import { traceIdOf, traceparentFor } from './trace.js';
import { Problem, slugOf } from './problem.js';
import { devRoutes } from './devRoutes.js';
import { AuthFailures } from './authFailures.js';
import { isTrustedProxy } from './trustedProxies.js';
import { installEdge } from './edge.js';
import { openapiDocument, openapiTransform, openapiTransformObject } from './openapi.js';
import { allowedWebSocketOrigins, installWebSocketOriginCheck } from './wsOrigin.js';
import { installStalledUploadCutoff } from './stalledUploads.js';
import type { DatabaseProbe } from '../db/readiness.js';

/**
 * Errors Node raises before a request reaches Fastify (request timeout, malformed HTTP): answered
 * as problem+json on the raw socket, which is then closed.
 */
function clientErrorResponder(baseUrl: string) {
  return function (this: { log: FastifyBaseLogger }, err: Error & { code?: string }, socket: Duplex) {
    if (err.code === 'ECONNRESET' || socket.destroyed) return;
    let status = 400;
    let detail = `malformed HTTP request (${err.code ?? err.message})`;
    if (err.code === 'ERR_HTTP_REQUEST_TIMEOUT') {
      status = 408;
      detail = 'the request (headers and body) did not arrive within the time limit';
    } else if (err.code === 'HPE_HEADER_OVERFLOW') {
      status = 431;
      detail = 'request headers are too large';
    }
    const traceId = randomBytes(16).toString('hex');
    // the request, when its headers had arrived (Node's pending response keeps it)
    const url = (socket as { _httpMessage?: { req?: { url?: string } } })._httpMessage?.req?.url;
    this.log.debug({ code: err.code, status, url, trace_id: traceId }, 'client error');
    if (socket.writable) {
      const title = STATUS_CODES[status]!;
      const body = JSON.stringify({ type: `${baseUrl}/docs/problems/${slugOf(title)}`, title, status, detail, ...(url ? { instance: url.split('?')[0] } : {}), trace_id: traceId });
      socket.write(`HTTP/1.1 ${status} ${title}\r\nContent-Type: application/problem+json\r\nContent-Length: ${Buffer.byteLength(body)}\r\ntraceparent: ${traceparentFor(traceId)}\r\nConnection: close\r\n\r\n${body}`);
    }
    socket.destroy(); // as Node and Fastify do: the request cannot go on
  };
}

/**
 * Builds the Fastify app: errors, tracing, auth hook, OpenAPI, health, metrics, domain routes.
 * `databaseProbe` is /readyz's database check, on a connection outside `gw.sql`'s pool.
 */
export async function buildHttp(gw: Gateway, domains: DomainModule[], wired: WiredDomains, databaseProbe: DatabaseProbe): Promise<ZodApp> {
  const { config } = gw;
  const app = Fastify({
    loggerInstance: gw.log as FastifyBaseLogger,
    genReqId: traceIdOf,
    bodyLimit: config.BODY_LIMIT_BYTES,
    // X-Forwarded-* only from TRUSTED_PROXIES: anyone else could pick their own client address
    trustProxy: (address: string) => isTrustedProxy(address, config.TRUSTED_PROXIES),
    return503OnClosing: false, // registerErrorHandling answers those 503s as problem+json
    frameworkErrors: frameworkErrorHandler(config.PUBLIC_BASE_URL, config.BODY_LIMIT_BYTES),
    forceCloseConnections: 'idle',
    // Fastify's default is no request timeout: a client that stops mid-body held its socket forever.
    requestTimeout: config.HTTP_REQUEST_TIMEOUT_MS,
    http: {
      headersTimeout: Math.min(config.HTTP_HEADERS_TIMEOUT_MS, config.HTTP_REQUEST_TIMEOUT_MS),
      // Node checks the timeouts on this interval (default 30 s, which let a stalled request live ~90 s)
      connectionsCheckingInterval: 1000,
    },
    clientErrorHandler: clientErrorResponder(config.PUBLIC_BASE_URL),
    routerOptions: { ignoreTrailingSlash: true, maxParamLength: MAX_PARAM_LENGTH },
    ajv: { customOptions: { removeAdditional: false } },
  }).withTypeProvider<ZodTypeProvider>() as unknown as ZodApp;

  app.setValidatorCompiler(validatorCompiler);
  app.setSerializerCompiler(serializerCompiler);
  registerErrorHandling(app, config.PUBLIC_BASE_URL, config.BODY_LIMIT_BYTES);
  // at shutdown a request stalled in its body is answered 503 at once; the grace period is for the others
  installStalledUploadCutoff(app, config.PUBLIC_BASE_URL);
  installInputGuard(app);
  app.addHook('onSend', async (request, reply, payload) => {
    reply.header('traceparent', traceparentFor(request.id));
    return payload;
  });

  await app.register(swagger, {
    // issue 39: named schemas, every security scheme, webhooks (src/http/openapi.ts, contract.ts)
    openapi: openapiDocument(config.PUBLIC_BASE_URL, gw.auth.securitySchemes()),
    // operationIds, problem+json error responses and the Problem component: see openapi.ts
    transform: openapiTransform,
    transformObject: openapiTransformObject,
  });
  await app.register(swaggerUi, { routePrefix: '/docs' });
  // One WebSocket server for every domain (telemetry stream, notification stream).
  await app.register(websocket, { options: { maxPayload: 64 * 1024 } });
  // after the plugin (its onRequest hook marks upgrades, so that a refused one's socket is closed)
  // and before authentication: a foreign page's upgrade is refused whatever cookie it carries
  installWebSocketOriginCheck(app, allowedWebSocketOrigins(config.PUBLIC_BASE_URL, config.CONSOLE_BASE_URL, config.WS_ALLOWED_ORIGINS));

  // before the auth hook: an identifier blocked for this source is refused before its credentials are checked
  AuthFailures.create({
    limit: config.AUTH_FAILURE_LIMIT, identifierLimit: config.AUTH_FAILURE_IDENTIFIER_LIMIT, sourceLimit: config.AUTH_FAILURE_SOURCE_LIMIT,
    windowSeconds: config.AUTH_FAILURE_WINDOW_SECONDS, redisUrl: config.REDIS_URL, cluster: gw.cluster, log: gw.log, metrics: gw.metrics,
  }).install(app);
  gw.auth.install(app);
  installHttpMetrics(app, gw.metrics, gw.config);
  installEdge(app);

  app.get('/healthz', { config: { auth: 'public' }, schema: { tags: ['ops'], summary: 'Liveness', response: { 200: z.object({ status: z.literal('ok') }) } } }, async () => ({ status: 'ok' as const }));
  app.get('/readyz', { config: { auth: 'public' }, logLevel: 'error' /* probes poll it while starting: not-ready is expected */, schema: { tags: ['ops'], summary: 'Readiness: database and broker up', response: { 200: z.object({ status: z.literal('ready'), checks: z.record(z.string(), z.boolean()) }) } } }, async () => {
    const checks: Record<string, boolean> = {};
    // not through gw.sql: a reconnect storm's bookkeeping fills that pool's queue (DatabaseProbe)
    checks.database = await databaseProbe.check();
    // the domains' hooks answer from memory (the broker: its listener is up), none waits on the pool
    for (const d of domains) {
      if (d.ready) checks[d.name] = await Promise.resolve(d.ready(gw, servicesOf(d, wired))).catch(() => false);
    }
    const failed = Object.entries(checks).filter(([, ok]) => !ok).map(([k]) => k);
    if (failed.length) throw new Problem(503, `not ready: ${failed.join(', ')}`, { extra: { checks } });
    return { status: 'ready' as const, checks };
  });
  app.get('/docs/problems/:slug', { config: { auth: 'public' }, schema: { hide: true, params: z.object({ slug: z.string() }) } }, async (request, reply) => {
    reply.type('text/plain; charset=utf-8');
    return `Problem type "${request.params.slug}": see the detail member of the response and the API reference at ${config.PUBLIC_BASE_URL}/docs.\n`;
  });

  if (gw.devIssuer) await app.register(async (scope) => devRoutes(scope as ZodApp, gw));
  for (const d of domains) {
    if (d.routes) await app.register(async (scope) => d.routes!(scope as ZodApp, gw, servicesOf(d, wired)));
  }
  return app;
}
