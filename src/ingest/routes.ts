import os from 'node:os';
import type { Readable } from 'node:stream';
import { z } from 'zod';
import type { FastifyReply, FastifyRequest } from 'fastify';
import rateLimit from '@fastify/rate-limit';
import { Gauge } from 'prom-client';
import { Redis } from 'ioredis';
import type { Gateway, ZodApp } from '../gateway.js';
import { accountOf, principalOf } from '../http/auth/plugin.js';
import { Problem, badRequest } from '../http/problem.js';
import { MAX_PARAM_LENGTH } from '../http/errors.js';
import { JobAdmission } from './admission.js';
import { BodyTooLarge, readJobUpload } from './jobBody.js';
import { unreachableDatabase, type Answer, type Caller, type IngestService } from './service.js';
import type { ResourceName } from './resources.js';
import {
  batchBody, batchResponse, itemResult, jobBody, jobErrorsPage, jobIdParams, jobView, jobsPage, jobsQuery, pageQuery, quarantineEntry,
  quarantinePage, quarantineParams, quarantineQuery, warehouseBody, warehouseParams, warehouseView,
} from './schemas.js';

export const PREFIX = '/wms-ingest/v1';

/**
 * Who may call what (docs/decisions.md): users of the partner account (bearer token or their
 * access key) with `admin` or `operator` ingest and release; `viewer` also reads jobs, errors
 * and the quarantine; warehouses are managed by `admin`. Warehouse scoping is checked by the
 * service (403).
 */
const WRITE = ['admin', 'operator'];
const READ = ['admin', 'operator', 'viewer'];
const ADMIN = ['admin'];

const auth = (resource: string, verb: string, roles: string[]) => ({ auth: { action: `ingest:${resource}:${verb}`, roles } });
const tags = ['wms-ingest'];

function callerOf(request: FastifyRequest): Caller {
  return { sub: principalOf(request).sub, accountId: accountOf(request) };
}

function send<T>(reply: FastifyReply, answer: Answer<T>) {
  if (answer.replayed) reply.header('idempotent-replayed', 'true');
  return reply.code(answer.status).send(answer.body as never);
}

/**
 * Per-partner request limits. With REDIS_URL (cluster mode) the counters live in Redis, shared
 * by every node; otherwise in this process. While Redis is unreachable requests are let through
 * (skipOnError) rather than failed: the limit protects, it must not take ingest down.
 */
async function rateLimits(app: ZodApp, gw: Gateway): Promise<void> {
  const { config } = gw;
  let redis: Redis | undefined;
  if (config.REDIS_URL) {
    redis = new Redis(config.REDIS_URL, { enableOfflineQueue: false, maxRetriesPerRequest: 1, connectTimeout: 2000 });
    let down = false;
    redis.on('error', (err) => {
      if (!down) gw.log.warn({ err: err.message }, 'ingest rate limits: Redis unreachable; requests are not limited meanwhile');
      down = true;
    });
    redis.on('ready', () => (down = false));
    app.addHook('onClose', async () => void (await redis!.quit().catch(() => undefined)));
  }
  await app.register(rateLimit, {
    global: true,
    max: config.INGEST_RATE_LIMIT,
    timeWindow: config.INGEST_RATE_WINDOW_SECONDS * 1000,
    ...(redis ? { redis, nameSpace: 'ingest-rl:' } : {}),
    skipOnError: true,
    // the auth hook ran (onRequest of the root): a partner is its account
    keyGenerator: (request) => (request.principal?.accountId ? `partner:${request.principal.accountId}` : `ip:${request.ip}`),
    errorResponseBuilder: (_request, ctx) => new Problem(429, `rate limit of ${ctx.max} requests per ${config.INGEST_RATE_WINDOW_SECONDS} s for your partner exceeded; retry after ${Math.max(1, Math.ceil(ctx.ttl / 1000))} s`, {
      type: 'rate-limited',
      headers: { 'retry-after': String(Math.max(1, Math.ceil(ctx.ttl / 1000))) },
    }),
  });
}

/** `application/merge-patch+json` and the like: the root's JSON parser takes them too. */
const PLUS_JSON = /^application\/[\w.!#$&^-]+\+json\s*(?:;|$)/i;

/**
 * POST /jobs, in a scope of its own whose JSON parser hands the request stream to the handler:
 * the body is read as it arrives by readJobUpload (src/ingest/jobBody.ts), never whole (the
 * root's parser would buffer and parse up to 64 MiB at once). Before any of it is read the
 * job is admitted (JobAdmission: per partner 429, node budget 503) and a declared length over
 * the limit is refused (413); the admission is released when the request is answered.
 */
async function jobSubmission(app: ZodApp, gw: Gateway, service: IngestService): Promise<void> {
  const { config } = gw;
  const limit = config.INGEST_JOB_BODY_LIMIT_BYTES;
  const spoolDir = config.INGEST_JOB_SPOOL_DIR ?? os.tmpdir();
  const admission = new JobAdmission({ perPartner: config.INGEST_JOB_UPLOADS_PER_PARTNER, budgetBytes: config.INGEST_JOB_BUDGET_BYTES });
  new Gauge({ name: 'ingest_job_uploads', help: 'bulk jobs this node is receiving and staging', registers: [gw.metrics], collect() { this.set(admission.inUse.jobs); } });
  new Gauge({ name: 'ingest_job_upload_reserved_bytes', help: `bytes of INGEST_JOB_BUDGET_BYTES (${config.INGEST_JOB_BUDGET_BYTES}) reserved by bulk jobs being received`, registers: [gw.metrics], collect() { this.set(admission.inUse.bytes); } });
  // the rest of the body is not read: the connection closes after the answer
  const tooLarge = () => new Problem(413, `request body exceeds the limit of ${limit} bytes for bulk ingest jobs`, { headers: { connection: 'close' } });
  await app.register(async (scope) => {
    scope.removeAllContentTypeParsers();
    for (const type of ['application/json', PLUS_JSON]) scope.addContentTypeParser(type, (_request, payload, done) => done(null, payload));
    scope.post(`${PREFIX}/jobs`, {
      config: auth('Job', 'Create', WRITE),
      schema: {
        tags, summary: `Submit a bulk job (DELTA or FULL_REFRESH; body up to ${limit} bytes, items up to 64 KiB each): 202 with the job; 409 for a FULL_REFRESH while a job of that warehouse and resource is in flight; 429 beyond ${config.INGEST_JOB_UPLOADS_PER_PARTNER} jobs of a partner being received at once, 503 while the node receives its budget of job bytes (both with Retry-After)`,
        body: jobBody, response: { 202: jobView },
      },
      // the schema documents the body; readJobUpload validates it while reading
      validatorCompiler: () => (value) => ({ value }),
    }, async (request, reply) => {
      const declared = request.headers['content-length'];
      if (declared !== undefined && Number(declared) > limit) throw tooLarge();
      const release = admission.admit(accountOf(request), declared === undefined ? limit : Number(declared));
      try {
        const upload = await readJobUpload(request.body as unknown as Readable, { limitBytes: limit, maxItems: config.INGEST_JOB_MAX_ITEMS, spoolDir }).catch((err: unknown) => {
          if (err instanceof BodyTooLarge) throw tooLarge();
          // what is left of a body refused halfway is not read
          if (!request.raw.complete) reply.header('connection', 'close');
          throw err;
        });
        try {
          const answer = await service.createJob(callerOf(request), upload);
          reply.header('location', `${PREFIX}/jobs/${(answer.body as { job_id: string }).job_id}`);
          return send(reply, answer);
        } finally {
          await upload.discard();
        }
      } finally {
        release();
      }
    });
  });
}

export async function ingestRoutes(app: ZodApp, gw: Gateway, service: IngestService): Promise<void> {
  // A database that cannot be reached is a 503 (retry later), not a 500: the parent handler renders it.
  app.setErrorHandler((err) => {
    throw unreachableDatabase(err) ?? err;
  });
  app.addHook('onRequest', async () => service.ensureAvailable());
  await rateLimits(app, gw);

  for (const resource of ['products', 'stock'] as const satisfies readonly ResourceName[]) {
    const name = resource === 'products' ? 'Products' : 'Stock';
    app.post(`${PREFIX}/${resource}/batch`, {
      config: auth(name, 'Ingest', WRITE),
      schema: {
        tags, summary: `Ingest a batch of ${resource} (at most 1000 items): 200 with each item's outcome (ACCEPTED, REPLAY, QUARANTINED, REJECTED)`,
        body: batchBody, response: { 200: batchResponse },
      },
    }, async (request, reply) => send(reply, await service.batch(callerOf(request), resource, request.body)));
  }

  await jobSubmission(app, gw, service);

  app.get(`${PREFIX}/jobs`, {
    config: auth('Job', 'List', READ),
    schema: { tags, summary: "A warehouse's bulk jobs, newest first (keyset pages; filter by state)", querystring: jobsQuery, response: { 200: jobsPage } },
  }, async (request) => service.listJobs(callerOf(request), request.query));

  app.get(`${PREFIX}/jobs/:job_id`, {
    config: auth('Job', 'Read', READ),
    schema: { tags, summary: 'A bulk job: state, counters; errors_url once COMPLETED_WITH_ERRORS', params: jobIdParams, response: { 200: jobView } },
  }, async (request) => service.getJob(callerOf(request), request.params.job_id));

  app.get(`${PREFIX}/jobs/:job_id/errors`, {
    config: auth('JobErrors', 'List', READ),
    schema: {
      tags, summary: "A bulk job's item errors in item order; page with next_page_token until has_more is false (kept 30 days after completion)",
      params: jobIdParams, querystring: pageQuery, response: { 200: jobErrorsPage },
    },
  }, async (request) => service.jobErrors(callerOf(request), request.params.job_id, request.query));

  app.get(`${PREFIX}/quarantine`, {
    config: auth('Quarantine', 'List', READ),
    schema: { tags, summary: 'Items held in quarantine for a warehouse, oldest first (keyset pages)', querystring: quarantineQuery, response: { 200: quarantinePage } },
  }, async (request) => service.listQuarantine(callerOf(request), request.query));

  app.get(`${PREFIX}/quarantine/:quarantine_id`, {
    config: auth('Quarantine', 'Read', READ),
    schema: { tags, summary: 'One quarantine entry', params: quarantineParams, response: { 200: quarantineEntry } },
  }, async (request) => service.getQuarantine(callerOf(request), request.params.quarantine_id));

  app.post(`${PREFIX}/quarantine/:quarantine_id/release`, {
    config: auth('Quarantine', 'Release', WRITE),
    schema: {
      tags, summary: 'Release a held item after review: it is stored despite its business rule (ACCEPTED), or REPLAY when a newer version was stored meanwhile; the entry is removed',
      params: quarantineParams, response: { 200: itemResult },
    },
  }, async (request) => service.releaseQuarantine(callerOf(request), request.params.quarantine_id));

  app.delete(`${PREFIX}/quarantine/:quarantine_id`, {
    config: auth('Quarantine', 'Discard', WRITE),
    schema: { tags, summary: 'Discard a held item (nothing is stored)', params: quarantineParams, response: { 204: z.null().describe('discarded') } },
  }, async (request, reply) => {
    await service.discardQuarantine(callerOf(request), request.params.quarantine_id);
    return reply.code(204).send(null);
  });

  app.put(`${PREFIX}/warehouses/:warehouse_id`, {
    config: auth('Warehouse', 'Put', ADMIN),
    schema: {
      tags, summary: "Register or change a warehouse of the caller's partner account and who is scoped to it (201 created, 200 replaced)",
      params: warehouseParams, body: warehouseBody, response: { 200: warehouseView, 201: warehouseView },
    },
  }, async (request, reply) => {
    const { created, view } = await service.putWarehouse(callerOf(request), request.params.warehouse_id, request.body);
    return reply.code(created ? 201 : 200).send(view);
  });

  app.get(`${PREFIX}/warehouses`, {
    config: auth('Warehouse', 'List', READ),
    schema: { tags, summary: "The partner account's warehouses", response: { 200: z.object({ items: z.array(warehouseView) }) } },
  }, async (request) => ({ items: await service.listWarehouses(callerOf(request)) }));

  app.delete(`${PREFIX}/warehouses/:warehouse_id`, {
    config: auth('Warehouse', 'Delete', ADMIN),
    schema: { tags, summary: 'Unregister a warehouse (its records stay; ingest into it is refused with 403)', params: warehouseParams, response: { 204: z.null().describe('deleted') } },
  }, async (request, reply) => {
    await service.deleteWarehouse(callerOf(request), request.params.warehouse_id);
    return reply.code(204).send(null);
  });

  // The spec's 400 for an unknown endpoint path (after authentication: without credentials it is a 401).
  const unknownPath = async (request: FastifyRequest) => {
    // a known route whose parameter is over the router's limit falls through to this wildcard
    if (request.url.split('?')[0].split('/').some((segment) => segment.length > MAX_PARAM_LENGTH)) {
      throw new Problem(414, `a path parameter is longer than ${MAX_PARAM_LENGTH} characters`, { title: 'URI Too Long' });
    }
    throw badRequest(`unknown endpoint: ${request.method} ${request.url.split('?')[0]}; see ${gw.config.PUBLIC_BASE_URL}/docs for the ${PREFIX} endpoints`, { type: 'unknown-endpoint' });
  };
  for (const url of [PREFIX, `${PREFIX}/*`]) {
    app.route({ method: ['GET', 'POST', 'PUT', 'PATCH', 'DELETE'], url, config: auth('Endpoint', 'Unknown', READ), schema: { hide: true }, handler: unknownPath });
  }
}
