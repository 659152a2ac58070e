import { Counter, Gauge, Histogram, Registry, collectDefaultMetrics } from 'prom-client';
import type { ZodApp } from '../gateway.js';
import type { Config } from '../config.js';
import { nodeWideMetrics } from '../multicore.js';
import { badRequest } from './problem.js';

/**
 * How often the event-loop delay histogram (nodejs_eventloop_lag_*) samples, in ms. prom-client's
 * 10 ms default is a libuv timer that woke an idle gateway 100 times a second, most of its idle
 * wakeups (issue 19, bench:idle: about 0.2% of a core); at 100 ms every stall of 100 ms or more is
 * still seen, shorter ones in proportion to their length. A busy loop pays nothing either way.
 */
export const EVENT_LOOP_SAMPLE_MS = 100;
/** prom-client's default sampling interval, the base its lag figures were read against */
const DEFAULT_SAMPLE_MS = 10;
/** the histogram's figures: each sample is the whole interval between two samples, sampling interval included */
const LAG_FIGURES = ['min', 'max', 'mean', 'p50', 'p90', 'p99'].map((f) => `nodejs_eventloop_lag_${f}_seconds`);

export function createMetrics(): Registry {
  const registry = new Registry();
  collectDefaultMetrics({ register: registry, eventLoopMonitoringPrecision: EVENT_LOOP_SAMPLE_MS });
  // the figures as at the default sampling (an idle loop reads 0.01 s, not 0.1 s): less the longer interval
  const offset = (EVENT_LOOP_SAMPLE_MS - DEFAULT_SAMPLE_MS) / 1000;
  for (const name of LAG_FIGURES) {
    const gauge = registry.getSingleMetric(name) as Gauge | undefined;
    if (!gauge) continue;
    const get = gauge.get.bind(gauge);
    gauge.get = async () => {
      const m = await get();
      return { ...m, values: m.values.map((v) => ({ ...v, value: Math.max(0, v.value - offset) })) };
    };
  }
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
  app.get('/metrics', { config: { auth: 'public' }, schema: { hide: true } }, async (req, reply) => {
    const names = metricNames((req.query as Record<string, unknown>).name);
    if (nodeWide) {
      const { text, contentType } = await nodeWide();
      reply.type(contentType);
      return names ? familiesOf(text, names) : text;
    }
    reply.type(registry.contentType);
    if (!names) return registry.metrics();
    // only the families asked for are collected: a scrape of the whole registry runs every collect
    // (event-loop histogram, process figures, broker counters), about 3 ms of the event loop here
    const texts = await Promise.all(names.filter((n) => registry.getSingleMetric(n)).map((n) => registry.getSingleMetricAsString(n)));
    return texts.map((t) => `${t}\n`).join('');
  });
}

const METRIC_NAME = /^[a-zA-Z_:][a-zA-Z0-9_:]*$/;
const MAX_NAMES = 50;

/**
 * `?name=` (repeatable): only these metric families, for a watcher that polls a few counters often
 * (a benchmark, a dashboard's live figure) without paying for the whole registry. A name no metric
 * has is left out, as Prometheus leaves out a series that does not exist.
 */
function metricNames(raw: unknown): string[] | undefined {
  if (raw === undefined) return undefined;
  const names = Array.isArray(raw) ? raw : [raw];
  if (names.length > MAX_NAMES) throw badRequest(`at most ${MAX_NAMES} \`name\` parameters`);
  for (const n of names) {
    if (typeof n !== 'string' || !METRIC_NAME.test(n)) throw badRequest(`\`name\` ${JSON.stringify(n)} is not a metric name ([a-zA-Z_:][a-zA-Z0-9_:]*)`);
  }
  return [...new Set(names as string[])];
}

/** The families named, out of a whole exposition text (a multi-core node's, merged by its primary). */
export function familiesOf(text: string, names: string[]): string {
  const wanted = new Set(names);
  const out: string[] = [];
  let keep = false;
  for (const line of text.split('\n')) {
    const help = /^# HELP (\S+)/.exec(line);
    if (help) keep = wanted.has(help[1]);
    if (keep && line !== '') out.push(line);
  }
  return out.length ? `${out.join('\n')}\n` : '';
}
