import Fastify, { type FastifyBaseLogger } from 'fastify';
import swagger from '@fastify/swagger';
import swaggerUi from '@fastify/swagger-ui';
import websocket from '@fastify/websocket';
import { z } from 'zod';
import { jsonSchemaTransform, serializerCompiler, validatorCompiler, type ZodTypeProvider } from 'fastify-type-provider-zod';
import type { DomainModule, Gateway, Services, ZodApp } from '../gateway.js';
import { registerErrorHandling } from './errors.js';
import { servicesOf } from '../wiring.js';
import { installHttpMetrics } from './metrics.js';
import { traceIdOf, traceparentFor } from './trace.js';
import { Problem } from './problem.js';
import { devRoutes } from './devRoutes.js';

/** Builds the Fastify app: errors, tracing, auth hook, OpenAPI, health, metrics, domain routes. */
export async function buildHttp(gw: Gateway, domains: DomainModule[], services: Services): Promise<ZodApp> {
  const { config } = gw;
  const app = Fastify({
    loggerInstance: gw.log as FastifyBaseLogger,
    genReqId: traceIdOf,
    bodyLimit: config.BODY_LIMIT_BYTES,
    trustProxy: true,
    return503OnClosing: true,
    forceCloseConnections: 'idle',
    routerOptions: { ignoreTrailingSlash: true },
    ajv: { customOptions: { removeAdditional: false } },
  }).withTypeProvider<ZodTypeProvider>() as unknown as ZodApp;

  app.setValidatorCompiler(validatorCompiler);
  app.setSerializerCompiler(serializerCompiler);
  registerErrorHandling(app, config.PUBLIC_BASE_URL, config.BODY_LIMIT_BYTES);
  app.addHook('onSend', async (request, reply, payload) => {
    reply.header('traceparent', traceparentFor(request.id));
    return payload;
  });

  await app.register(swagger, {
    openapi: {
      openapi: '3.1.0',
      info: { title: 'Device Gateway API', version: '0.1.0', description: 'Tenant, platform, device (/ddi/v1), notification and IAM APIs of the device gateway. Errors are application/problem+json (RFC 9457).' },
      servers: [{ url: config.PUBLIC_BASE_URL }],
      components: {
        securitySchemes: {
          bearer: { type: 'http', scheme: 'bearer', bearerFormat: 'JWT', description: 'OIDC access token (Keycloak realm acc-<accountId>, idc-<name> or platform)' },
          svc: { type: 'apiKey', in: 'header', name: 'Authorization', description: 'SVC base64(access_key_id:secret_key); plus X-Session-Token for ASIA keys' },
          // devices' and internal callers' credentials (routes with `config.auth.schemes`)
          ...gw.auth.securitySchemes(),
        },
      },
      security: [{ bearer: [] }, { svc: [] }],
    },
    transform: jsonSchemaTransform,
  });
  await app.register(swaggerUi, { routePrefix: '/docs' });
  // One WebSocket server for every domain (telemetry stream, notification stream).
  await app.register(websocket, { options: { maxPayload: 64 * 1024 } });

  gw.auth.install(app);
  installHttpMetrics(app, gw.metrics);

  app.get('/healthz', { config: { auth: 'public' }, schema: { tags: ['ops'], summary: 'Liveness', response: { 200: z.object({ status: z.literal('ok') }) } } }, async () => ({ status: 'ok' as const }));
  app.get('/readyz', { config: { auth: 'public' }, logLevel: 'error' /* probes poll it while starting: not-ready is expected */, schema: { tags: ['ops'], summary: 'Readiness: database and broker up', response: { 200: z.object({ status: z.literal('ready'), checks: z.record(z.string(), z.boolean()) }) } } }, async () => {
    const checks: Record<string, boolean> = {};
    checks.database = await gw.sql`select 1`.then(() => true, () => false);
    for (const d of domains) {
      if (d.ready) checks[d.name] = await Promise.resolve(d.ready(gw, servicesOf(d, services))).catch(() => false);
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
    if (d.routes) await app.register(async (scope) => d.routes!(scope as ZodApp, gw, servicesOf(d, services)));
  }
  return app;
}
