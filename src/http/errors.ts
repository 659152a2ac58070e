import type { FastifyError, FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import { hasZodFastifySchemaValidationErrors } from 'fastify-type-provider-zod';
import { DomainError, type ErrorKind } from '../lib/errors.js';
import { Problem, slugOf, statusTitle } from './problem.js';
import { traceparentFor } from './trace.js';

export const PROBLEM_JSON = 'application/problem+json';

/** Longest path parameter the router accepts (Fastify's default); longer is a 414. */
export const MAX_PARAM_LENGTH = 100;

export interface ProblemBody {
  type: string;
  title: string;
  status: number;
  detail: string;
  instance: string;
  trace_id: string;
  code?: string;
  [key: string]: unknown;
}

export function problemBody(baseUrl: string, request: FastifyRequest, p: Problem): ProblemBody {
  return {
    type: `${baseUrl}/docs/problems/${p.options.type ?? slugOf(p.title)}`,
    title: p.title,
    status: p.status,
    detail: p.detail,
    instance: request.url.split('?')[0],
    trace_id: request.id,
    ...(p.options.code ? { code: p.options.code } : {}),
    ...p.options.extra,
  };
}

export function sendProblem(baseUrl: string, request: FastifyRequest, reply: FastifyReply, p: Problem): FastifyReply {
  if (p.options.headers) reply.headers(p.options.headers);
  return reply.code(p.status).type(PROBLEM_JSON).serializer(JSON.stringify).send(problemBody(baseUrl, request, p));
}

function validationDetail(err: FastifyError): string {
  const where = (err as { validationContext?: string }).validationContext ?? 'request';
  if (hasZodFastifySchemaValidationErrors(err)) {
    return err.validation
      .map((v) => {
        const path = [where, ...v.instancePath.split('/').filter(Boolean)].join('.');
        const keys = (v.params as { keys?: string[] }).keys;
        if (v.keyword === 'unrecognized_keys' && keys) return `${path}: unknown field(s) ${keys.join(', ')}`;
        return `${path}: ${v.message}`;
      })
      .join('; ');
  }
  return `${where}: ${err.message}`;
}

/** The one place where a domain error kind becomes an HTTP status. */
export const STATUS_OF: Record<ErrorKind, number> = {
  invalid: 400, unauthenticated: 401, refused: 403, not_found: 404, conflict: 409, gone: 410,
  unprocessable: 422, too_many: 429, internal: 500, upstream: 502, unavailable: 503, timeout: 504,
};

export function fromDomainError(err: DomainError): Problem {
  const { retryAfterSeconds, ...options } = err.options;
  return new Problem(STATUS_OF[err.kind], err.detail, {
    ...options,
    ...(retryAfterSeconds !== undefined ? { headers: { 'retry-after': String(Math.max(1, Math.ceil(retryAfterSeconds))) } } : {}),
  });
}

/** Turns anything thrown into a Problem: known 4xx keep their status, the rest is a 500. */
export function toProblem(err: unknown, bodyLimit: number): Problem {
  if (err instanceof Problem) return err;
  if (err instanceof DomainError) return fromDomainError(err);
  const e = err as FastifyError & { statusCode?: number; validation?: unknown };
  if (e?.validation) return new Problem(400, validationDetail(e), { title: 'Validation failed' });
  switch (e?.code) {
    case 'FST_ERR_CTP_BODY_TOO_LARGE':
      return new Problem(413, `request body is larger than the limit of ${bodyLimit} bytes`);
    case 'FST_ERR_CTP_INVALID_JSON_BODY':
    case 'FST_ERR_CTP_EMPTY_JSON_BODY':
      return new Problem(400, `request body is not valid JSON: ${e.message}`, { title: 'Malformed JSON' });
    case 'FST_ERR_CTP_INVALID_MEDIA_TYPE':
      return new Problem(415, `missing or unsupported Content-Type; send application/json`);
    case 'FST_ERR_CTP_INVALID_CONTENT_LENGTH':
      return new Problem(400, 'Content-Length does not match the body');
    case 'FST_ERR_ROUTE_MISSING_CONTENT_TYPE':
      return new Problem(400, 'missing Content-Type; send application/json');
    case 'FST_ERR_BAD_URL':
      return new Problem(400, 'the URL path has a percent-encoding that is not valid UTF-8 (e.g. %ff)', { title: 'Bad URL' });
    case 'FST_ERR_MAX_PARAM_LENGTH':
      return new Problem(414, `a path parameter is longer than ${MAX_PARAM_LENGTH} characters`, { title: 'URI Too Long' });
  }
  if (err instanceof SyntaxError && e.statusCode === 400) {
    return new Problem(400, `request body is not valid JSON: ${e.message}`, { title: 'Malformed JSON' });
  }
  const status = e?.statusCode;
  if (typeof status === 'number' && status >= 400 && status < 500) return new Problem(status, e.message || statusTitle(status));
  return new Problem(500, 'internal error; quote the trace_id when reporting it');
}

/** Maps, logs and sends any error: the error handler and the framework-error hook share it. */
function handleError(baseUrl: string, bodyLimit: number, err: unknown, request: FastifyRequest, reply: FastifyReply): FastifyReply {
  let p: Problem;
  try {
    p = toProblem(err, bodyLimit);
  } catch (mapErr) {
    request.log.error({ err: mapErr }, 'error mapping failed');
    p = new Problem(500, 'internal error; quote the trace_id when reporting it');
  }
  // a refused credential guess: the authentication-failure limits count it, and answer 429 instead when its source is blocked
  if (p.options.guess) p = request.server.authFailures?.refused(request, p) ?? p;
  // 503 is a state the caller is told about (not ready yet, shutting down), not a fault of ours
  if (p.status === 503) request.log.warn({ detail: p.detail }, 'service unavailable');
  else if (p.status >= 500) request.log.error({ err }, 'request failed');
  else request.log.info({ status: p.status, detail: p.detail }, 'request refused');
  return sendProblem(baseUrl, request, reply, p);
}

/**
 * Fastify's `frameworkErrors` option: errors raised while routing, before any hook runs (bad
 * percent-encoding in the path, a path parameter over MAX_PARAM_LENGTH), which Fastify would
 * otherwise answer with its own plain JSON.
 */
export function frameworkErrorHandler(baseUrl: string, bodyLimit: number) {
  return (err: FastifyError, request: FastifyRequest, reply: FastifyReply): void => {
    reply.header('traceparent', traceparentFor(request.id));
    handleError(baseUrl, bodyLimit, err, request, reply);
  };
}

export function registerErrorHandling(app: FastifyInstance, baseUrl: string, bodyLimit: number): void {
  app.setErrorHandler((err, request, reply) => handleError(baseUrl, bodyLimit, err, request, reply));
  app.setNotFoundHandler((request, reply) =>
    sendProblem(baseUrl, request, reply, new Problem(404, `no route for ${request.method} ${request.url.split('?')[0]}`)),
  );
  // Instead of Fastify's return503OnClosing (plain JSON): requests that still arrive on open
  // connections while the server drains get a problem+json 503 and are told to reconnect.
  let closing = false;
  app.addHook('preClose', (done) => {
    closing = true;
    done();
  });
  app.addHook('onRequest', (_request, _reply, done) => {
    if (!closing) return done();
    done(new Problem(503, 'the server is shutting down; retry on a new connection', { headers: { connection: 'close' } }));
  });
}
