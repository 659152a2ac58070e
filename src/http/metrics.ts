import { Counter, Histogram, Registry, collectDefaultMetrics } from 'prom-client';
import type { ZodApp } from '../gateway.js';
import type { Config } from '../config.js';
import { nodeWideMetrics } from '../multicore.js';

export function createMetrics(): Registry {
  const registry = new Registry();
  collectDefaultMetrics({ register: registry });
  return registry;
}

/** Request count and latency per route template and status; served at /metrics. */
export function installHttpMetrics(app: ZodApp, registry: Registry, config: Pick<Config, 'BROKER_WORKERS'>): void {
  // a worker of a multi-core node answers for the whole node (src/multicore.ts)
  const nodeWide = nodeWideMetrics(config, registry);
  const duration = new Histogram({
    name: 'http_request_duration_seconds',
    help: 'HTTP request latency by method, route template and status',
    labelNames: ['method', 'route', 'status'],
    buckets: [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5],
    registers: [registry],
  });
  const total = new Counter({ name: 'http_requests_total', help: 'HTTP requests', labelNames: ['method', 'route', 'status'], registers: [registry] });
  app.addHook('onResponse', async (request, reply) => {
    const labels = { method: request.method, route: request.routeOptions.url ?? 'unmatched', status: String(reply.statusCode) };
    duration.observe(labels, reply.elapsedTime / 1000);
    total.inc(labels);
  });
  app.get('/metrics', { config: { auth: 'public' }, schema: { hide: true } }, async (_req, reply) => {
    if (nodeWide) {
      const { text, contentType } = await nodeWide();
      reply.type(contentType);
      return text;
    }
    reply.type(registry.contentType);
    return registry.metrics();
  });
}
