/**
 * OpenAPI quality, applied centrally to every route (no route file has to say it):
 * - each operation gets an `operationId` derived from its method and path
 *   (`GET /api/v1/things/{thingId}/state` -> `getApiV1ThingsThingIdState`) unless it sets its own;
 * - each operation documents the error responses the gateway can give it, as
 *   application/problem+json bodies of the shared `Problem` component.
 * This touches only the document: Fastify's response schemas (and so its serializers) are left as
 * the routes declare them, and problem bodies are always sent with JSON.stringify (sendProblem),
 * so nothing changes on the wire.
 */
import { STATUS_CODES } from 'node:http';
import type { FastifyDynamicSwaggerOptions } from '@fastify/swagger';
import { jsonSchemaTransform } from 'fastify-type-provider-zod';
import { PROBLEM_JSON } from './errors.js';
import { statusTitle } from './problem.js';

/** RFC 9457 problem details as the gateway sends them (handlers add members such as `state`). */
export const PROBLEM_SCHEMA = {
  type: 'object',
  description: 'RFC 9457 problem details. Further members may be present (e.g. `state`, `checks`): clients must ignore those they do not know.',
  required: ['type', 'title', 'status', 'detail', 'trace_id'],
  properties: {
    type: { type: 'string', format: 'uri', description: 'identifies the problem type; resolves to a short explanation' },
    title: { type: 'string', description: 'short summary of the problem type' },
    status: { type: 'integer', minimum: 400, maximum: 599, description: 'the HTTP status code' },
    detail: { type: 'string', description: 'what went wrong with this request, in words' },
    instance: { type: 'string', description: 'the request path' },
    trace_id: { type: 'string', description: 'W3C trace id of the request (also in the traceparent header): quote it when reporting a problem' },
    code: { type: 'string', description: 'spec error code (e.g. THM-60110), when one applies' },
  },
  additionalProperties: true,
} as const;

export const PROBLEM_REF = '#/components/schemas/Problem';

/** route -> operation marker: the error statuses to document (replaced by responses in transformObject) */
const MARKER = 'x-problem-statuses';

const WRITES = new Set(['POST', 'PUT', 'PATCH', 'DELETE']);

interface RouteFacts {
  method: string;
  /** the route's schema before the zod transform (input parts present or not) */
  schema: Record<string, unknown> | undefined;
  auth: unknown;
  url: string;
}

/**
 * The error statuses a route can produce, from what the gateway does for every route:
 * 400 input validation, 413/415 body parsing, 401/403/429 authentication (and its brakes),
 * 404/414 path parameters, 409 on writes, 500 and 503 (not ready, shutting down, database
 * unreachable) anywhere. Route-specific ones (410, 422, 502, 504) fall under `default`.
 */
export function errorStatusesOf(route: RouteFacts): number[] {
  const s = route.schema ?? {};
  const hasParams = Boolean(s.params) || /[:{]/.test(route.url);
  const statuses = new Set<number>();
  if (s.body || s.querystring || s.params || s.headers || hasParams) statuses.add(400);
  if (s.body) statuses.add(413).add(415);
  if (route.auth !== 'public') statuses.add(401).add(403).add(429);
  if (hasParams) statuses.add(404).add(414);
  if (WRITES.has(route.method)) statuses.add(409);
  statuses.add(500).add(503);
  return [...statuses].sort((a, b) => a - b);
}

/** `get` + `/api/v1/things/{thingId}/state` (or `:thingId`) -> `getApiV1ThingsThingIdState` */
export function operationIdOf(method: string, path: string): string {
  const words = path.split(/[^A-Za-z0-9]+/).filter(Boolean);
  return method.toLowerCase() + words.map((w) => w[0].toUpperCase() + w.slice(1)).join('');
}

/** the gateway's title of a status (as in its problem bodies), else Node's reason phrase */
const titleOf = (status: number) => (/^(Client|Server) Error$/.test(statusTitle(status)) ? STATUS_CODES[status] ?? statusTitle(status) : statusTitle(status));

const problemResponse = (description: string) => ({ description, content: { [PROBLEM_JSON]: { schema: { $ref: PROBLEM_REF } } } });

type Transform = NonNullable<FastifyDynamicSwaggerOptions['transform']>;
type TransformObject = NonNullable<FastifyDynamicSwaggerOptions['transformObject']>;

/** Per route: zod -> JSON Schema, then mark the error statuses to document. */
export const openapiTransform: Transform = (input) => {
  const out = jsonSchemaTransform(input as Parameters<typeof jsonSchemaTransform>[0]) as { schema: Record<string, unknown>; url: string };
  const { route } = input;
  const methods = (Array.isArray(route.method) ? route.method : [route.method]).filter((m) => m !== 'HEAD');
  const statuses = errorStatusesOf({ method: methods[0] ?? 'GET', schema: route.schema as Record<string, unknown> | undefined, auth: (route.config as { auth?: unknown } | undefined)?.auth, url: route.url });
  // a public route needs no credentials: it says so instead of inheriting the document's security
  const publicRoute = (route.config as { auth?: unknown } | undefined)?.auth === 'public' && !out.schema.security;
  return { ...out, schema: { ...out.schema, [MARKER]: statuses, ...(publicRoute ? { security: [] } : {}) } };
};

interface ResponseObject { description?: string; content?: Record<string, unknown> }
type Operation = Record<string, unknown> & { operationId?: string; responses?: Record<string, ResponseObject> };
const isError = (status: string) => status === 'default' || /^[45]/.test(status);
const HTTP_METHODS = ['get', 'put', 'post', 'delete', 'options', 'head', 'patch', 'trace'];

/** On the whole document: the Problem component, problem responses and operationIds. */
export const openapiTransformObject: TransformObject = (documentObject) => {
  const doc = (documentObject as { openapiObject: Record<string, any> }).openapiObject;
  doc.components = { ...doc.components, schemas: { ...doc.components?.schemas, Problem: PROBLEM_SCHEMA } };
  for (const [path, item] of Object.entries<Record<string, Operation>>(doc.paths ?? {})) {
    for (const method of HTTP_METHODS) {
      const op = item[method];
      if (!op) continue;
      op.operationId ??= operationIdOf(method, path);
      // no marker when a route brings its own config.swaggerTransform: still the statuses of every route
      const statuses = (op[MARKER] as number[] | undefined) ?? [500, 503];
      delete op[MARKER];
      const responses: Record<string, ResponseObject> = { ...op.responses };
      // error responses a route declares itself: every error body leaves through sendProblem as
      // application/problem+json, so their content is the Problem whatever the route's schema said
      for (const [status, response] of Object.entries(responses)) {
        if (!isError(status) || response.content?.[PROBLEM_JSON]) continue;
        const own = response.description && response.description !== 'Default Response' ? response.description : undefined;
        responses[status] = problemResponse(own ?? titleOf(Number(status)));
      }
      for (const status of statuses) responses[status] ??= problemResponse(titleOf(status));
      responses.default ??= problemResponse('Any other error (e.g. 410, 422, 502, 504)');
      op.responses = responses;
    }
  }
  return doc;
};
