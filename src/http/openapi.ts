/**
 * OpenAPI quality, applied centrally to every route (no route file has to say it):
 * - each operation gets an `operationId` derived from its method and path
 *   (`GET /api/v1/things/{thingId}/state` -> `getApiV1ThingsThingIdState`) unless it sets its own;
 * - each operation documents the error responses the gateway can give it, as
 *   application/problem+json bodies of the shared `Problem` component (a status that reads the
 *   same everywhere as a shared `components.responses` entry, a route-specific one with its reason);
 * - each operation lists the security schemes it accepts;
 * - the schemas named in the domains' schemas.ts (src/http/components.ts) become components.
 * The document's fixed parts (security schemes, webhooks, route-specific statuses) are in contract.ts.
 * This touches only the document: Fastify's response schemas (and so its serializers) are left as
 * the routes declare them, and problem bodies are always sent with JSON.stringify (sendProblem),
 * so nothing changes on the wire.
 */
import { STATUS_CODES } from 'node:http';
import type { FastifyDynamicSwaggerOptions } from '@fastify/swagger';
import { jsonSchemaTransform, jsonSchemaTransformObject } from 'fastify-type-provider-zod';
import { GRANTABLE } from '../factory/policy.js';
import { PROBLEM_JSON } from './errors.js';
import { slugOf, statusTitle } from './problem.js';
import { routeStatusesOf, securitySchemesOf, webhooksOf } from './contract.js';

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
 * unreachable) anywhere. Route-specific ones (410, 422, 502...) are listed in contract.ts
 * (ROUTE_STATUSES); anything else falls under `default`.
 */
export function errorStatusesOf(route: RouteFacts): number[] {
  const s = route.schema ?? {};
  const hasParams = Boolean(s.params) || /[:{]/.test(route.url);
  const statuses = new Set<number>();
  // every route: the input guard refuses a NUL, a lone surrogate or bad UTF-8 in any query value (src/http/inputGuard.ts)
  statuses.add(400);
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

/** A status's description: its title, what it means on this route, and its problem type (`type` ends in `/docs/problems/<slug>`). */
const describeStatus = (status: number, why?: string) =>
  `${titleOf(status)}${why ? `: ${why}` : ''} (problem type \`${slugOf(titleOf(status))}\`${SPECIFIC[status] ? `, or a more specific one: ${SPECIFIC[status]}` : ''})`;
const SPECIFIC: Record<number, string> = {
  400: '`validation-failed`, `malformed-json` or `invalid-characters`',
  401: 'the scheme\'s own, e.g. `session-token-invalid`',
  403: '`insufficient-role`, `insufficient-permission` or `denied-by-policy`',
  409: 'the resource\'s own (its `state` member names the current state)',
  429: '`too-many-authentication-failures` or `rate-limited` (with Retry-After)',
};

const problemResponse = (description: string) => ({ description, content: { [PROBLEM_JSON]: { schema: { $ref: PROBLEM_REF } } } });

type Transform = NonNullable<FastifyDynamicSwaggerOptions['transform']>;
type TransformObject = NonNullable<FastifyDynamicSwaggerOptions['transformObject']>;

type SecurityRequirement = Record<string, string[]>;
/** The user schemes every RouteAuth route accepts: a bearer JWT, an SVC access key, an STS session (ASIA key + X-Session-Token). */
const USER_SECURITY: SecurityRequirement[] = [{ bearer: [] }, { svc: [] }, { svc: [], svcSessionToken: [] }];
/** A signed factory-service request: the three headers together. */
export const SIGNED_SECURITY: SecurityRequirement = { svcHmacSha256: [], svcHmacAccessKeyId: [], svcHmacTimestamp: [] };

/** The security requirements of a route: public none; device/internal routes their schemes; user routes bearer/SVC/STS, and signed requests where a factory service may be granted the action. */
export function securityOf(auth: unknown): SecurityRequirement[] | undefined {
  if (auth === 'public') return [];
  if (auth && typeof auth === 'object' && 'schemes' in auth) return (auth as { schemes: string[] }).schemes.map((s) => ({ [s]: [] }));
  if (auth && typeof auth === 'object' && 'action' in auth) {
    const action = (auth as { action: string }).action;
    return Object.hasOwn(GRANTABLE, action) ? [...USER_SECURITY, SIGNED_SECURITY] : USER_SECURITY;
  }
  return undefined;
}

/** Per route: zod -> JSON Schema (named schemas as $refs), then mark the error statuses and the security to document. */
export const openapiTransform: Transform = (input) => {
  const out = jsonSchemaTransform(input as Parameters<typeof jsonSchemaTransform>[0]) as { schema: Record<string, unknown>; url: string };
  const { route } = input;
  const methods = (Array.isArray(route.method) ? route.method : [route.method]).filter((m) => m !== 'HEAD');
  const auth = (route.config as { auth?: unknown } | undefined)?.auth;
  const statuses = errorStatusesOf({ method: methods[0] ?? 'GET', schema: route.schema as Record<string, unknown> | undefined, auth, url: route.url });
  const security = securityOf(auth);
  return { ...out, schema: { ...out.schema, [MARKER]: statuses, ...(security ? { security } : {}) } };
};

interface ResponseObject { description?: string; content?: Record<string, unknown> }
type Operation = Record<string, unknown> & { operationId?: string; responses?: Record<string, ResponseObject> };
const isError = (status: string) => status === 'default' || /^[45]/.test(status);
const HTTP_METHODS = ['get', 'put', 'post', 'delete', 'options', 'head', 'patch', 'trace'];

/** Every `#/components/schemas/<name>` a node refers to. */
function schemaRefs(node: unknown, out: Set<string>): Set<string> {
  if (Array.isArray(node)) for (const v of node) schemaRefs(v, out);
  else if (node && typeof node === 'object') {
    for (const [k, v] of Object.entries(node)) {
      if (k === '$ref' && typeof v === 'string' && v.startsWith('#/components/schemas/')) out.add(v.slice('#/components/schemas/'.length));
      else schemaRefs(v, out);
    }
  }
  return out;
}

/** Rewrites `$ref`s by a name map, in place. */
function renameRefs(node: unknown, rename: Map<string, string>): void {
  if (Array.isArray(node)) for (const v of node) renameRefs(v, rename);
  else if (node && typeof node === 'object') {
    const o = node as Record<string, unknown>;
    for (const [k, v] of Object.entries(o)) {
      if (k === '$ref' && typeof v === 'string' && v.startsWith('#/components/schemas/')) {
        const to = rename.get(v.slice('#/components/schemas/'.length));
        if (to) o.$ref = `#/components/schemas/${to}`;
      } else renameRefs(v, rename);
    }
  }
}

/**
 * The named schemas as components: the provider emits each twice (`Name` for responses,
 * `NameInput` for requests); the request side is folded into `Name` when both are the same or
 * only the request side is used; then every schema no operation or webhook reaches is dropped,
 * and the rest are listed by name.
 */
function tidyComponents(doc: Record<string, any>): void {
  const schemas: Record<string, unknown> = doc.components.schemas;
  const used = () => schemaRefs({ paths: doc.paths, webhooks: doc.webhooks }, new Set());
  let reached = used();
  const rename = new Map<string, string>();
  for (const name of Object.keys(schemas)) {
    if (!name.endsWith('Input')) continue;
    const base = name.slice(0, -'Input'.length);
    if (!(base in schemas)) continue;
    // the same schema but for the request side's references (`XInput` where the response side has `X`)
    const same = JSON.stringify(schemas[name]).replace(/("#\/components\/schemas\/[A-Za-z0-9]+)Input"/g, '$1"') === JSON.stringify(schemas[base]);
    if (same || !reached.has(base)) rename.set(name, base);
  }
  for (const [from, to] of rename) {
    if (!reached.has(to)) schemas[to] = schemas[from];
    delete schemas[from];
  }
  renameRefs(doc.paths, rename);
  renameRefs(doc.webhooks, rename);
  renameRefs(schemas, rename);
  // the closure of what operations and webhooks reach
  reached = used();
  const todo = [...reached];
  while (todo.length) {
    const name = todo.pop()!;
    for (const r of schemaRefs(schemas[name], new Set())) if (!reached.has(r)) { reached.add(r); todo.push(r); }
  }
  for (const name of Object.keys(schemas)) if (!reached.has(name) && name !== 'Problem') delete schemas[name];
  // a component named without an example (pages, mostly) gets one built from its parts' examples
  for (const schema of Object.values(schemas) as Record<string, unknown>[]) {
    if (schema.examples) continue;
    const example = exampleOf(schema, schemas, 0);
    if (example !== undefined) schema.examples = [example];
  }
  // by name: the order they were registered in is the order their modules were first loaded, which a
  // process that loaded some domain earlier (the test runner's shared module graph) changes
  doc.components.schemas = Object.fromEntries(Object.keys(schemas).sort().map((name) => [name, schemas[name]]));
}

const SAMPLE = { uuid: '5e6f7a8b-9c0d-4e1f-a2b3-c4d5e6f7a8b9', 'date-time': '2026-11-22T10:00:00.000Z', uri: 'https://gateway.example.net/', email: 'ops@example.net' } as Record<string, string>;

/** A value that satisfies a JSON Schema, from the examples of its parts; undefined where none can be made safely (a pattern). */
export function exampleOf(schema: any, schemas: Record<string, any>, depth: number): unknown {
  if (!schema || typeof schema !== 'object' || depth > 8) return undefined;
  if (Array.isArray(schema.examples) && schema.examples.length) return schema.examples[0];
  if (schema.$ref) return exampleOf(schemas[String(schema.$ref).split('/').pop()!], schemas, depth + 1);
  if ('const' in schema) return schema.const;
  if (Array.isArray(schema.enum)) return schema.enum[0];
  if ('default' in schema) return schema.default;
  const options = schema.anyOf ?? schema.oneOf;
  if (Array.isArray(options)) {
    if (options.some((o: any) => o.type === 'null')) return null;
    for (const o of options) {
      const v = exampleOf(o, schemas, depth + 1);
      if (v !== undefined) return v;
    }
    return undefined;
  }
  const type = Array.isArray(schema.type) ? (schema.type.includes('null') ? 'null' : schema.type[0]) : schema.type;
  switch (type) {
    case 'null': return null;
    case 'boolean': return false;
    case 'integer': case 'number': return schema.minimum ?? (schema.exclusiveMinimum !== undefined ? schema.exclusiveMinimum + 1 : 0);
    case 'string': {
      if (schema.format && SAMPLE[schema.format]) return SAMPLE[schema.format];
      if (schema.pattern || schema.format) return undefined;
      return 'text'.padEnd(schema.minLength ?? 0, 'x').slice(0, schema.maxLength ?? Infinity);
    }
    case 'array': {
      const item = exampleOf(schema.items, schemas, depth + 1);
      if (item === undefined) return schema.minItems ? undefined : [];
      return [item];
    }
    case 'object': {
      const out: Record<string, unknown> = {};
      for (const key of schema.required ?? []) {
        const v = exampleOf(schema.properties?.[key], schemas, depth + 1);
        if (v === undefined) return undefined;
        out[key] = v;
      }
      return out;
    }
    default: return undefined;
  }
}

/** `#/components/responses/<Title>` for a status's generic problem response (made on first use). */
function sharedProblem(doc: Record<string, any>, status: number | 'default'): ResponseObject {
  const name = status === 'default' ? 'OtherProblem' : titleOf(status).replace(/[^A-Za-z0-9]+/g, ' ').trim().split(' ').map((w) => w[0].toUpperCase() + w.slice(1)).join('');
  doc.components.responses ??= {};
  doc.components.responses[name] ??= problemResponse(status === 'default' ? 'Any other error, as problem+json' : describeStatus(status));
  return { $ref: `#/components/responses/${name}` } as ResponseObject;
}

/** Does a JSON Schema admit null (`type: 'null'`, a type list with it, `nullable`, or one of anyOf/oneOf that does)? */
function admitsNull(schema: unknown): boolean {
  if (!schema || typeof schema !== 'object') return false;
  const s = schema as { type?: unknown; nullable?: boolean; anyOf?: unknown[]; oneOf?: unknown[] };
  if (s.type === 'null' || s.nullable === true || (Array.isArray(s.type) && s.type.includes('null'))) return true;
  return [...(s.anyOf ?? []), ...(s.oneOf ?? [])].some(admitsNull);
}

/** On the whole document: named components, the Problem component, problem responses and operationIds. */
export const openapiTransformObject: TransformObject = (documentObject) => {
  const doc = jsonSchemaTransformObject(documentObject as Parameters<typeof jsonSchemaTransformObject>[0]) as Record<string, any>;
  doc.components = { ...doc.components, schemas: { ...doc.components?.schemas, Problem: PROBLEM_SCHEMA } };
  for (const [path, item] of Object.entries<Record<string, Operation>>(doc.paths ?? {})) {
    for (const method of HTTP_METHODS) {
      const op = item[method];
      if (!op) continue;
      op.operationId ??= operationIdOf(method, path);
      // a body the route takes as optional (zod `.nullish()`: the schema admits null) is not required
      const body = op.requestBody as { required?: boolean; content?: Record<string, { schema?: unknown }> } | undefined;
      if (body && admitsNull(body.content?.['application/json']?.schema)) body.required = false;
      // no marker when a route brings its own config.swaggerTransform: still the statuses of every route
      const statuses = (op[MARKER] as number[] | undefined) ?? [400, 500, 503];
      delete op[MARKER];
      const extra = routeStatusesOf(method, path);
      const responses: Record<string, ResponseObject> = { ...op.responses };
      // error responses a route declares itself: every error body leaves through sendProblem as
      // application/problem+json, so their content is the Problem whatever the route's schema said
      for (const [status, response] of Object.entries(responses)) {
        if (!isError(status) || response.content?.[PROBLEM_JSON]) continue;
        const own = response.description && response.description !== 'Default Response' ? response.description : undefined;
        responses[status] = problemResponse(own ?? describeStatus(Number(status), extra.get(Number(status))));
      }
      for (const status of [...new Set([...statuses, ...extra.keys()])].sort((a, b) => a - b)) {
        const why = extra.get(status);
        // the same on every route: one shared response component, referenced
        responses[status] ??= why ? problemResponse(describeStatus(status, why)) : sharedProblem(doc, status);
      }
      responses.default ??= sharedProblem(doc, 'default');
      op.responses = responses;
    }
  }
  tidyComponents(doc);
  return doc;
};

/** Loopback and example hosts are not where a reader of the document reaches the gateway: the document then names itself relatively. */
const LOCAL = /^(localhost|127\.\d+\.\d+\.\d+|\[::1\]|.*\.localhost|.*example\.(com|org|net))$/i;

/** The document's fixed parts: info (license), servers, security schemes, default security, tags, webhooks. */
export function openapiDocument(publicBaseUrl: string, registeredSchemes: Record<string, Record<string, unknown>>): NonNullable<FastifyDynamicSwaggerOptions['openapi']> {
  const host = URL.parse(publicBaseUrl)?.hostname ?? '';
  return {
    openapi: '3.1.0',
    info: {
      title: 'Device Gateway API',
      version: '0.1.0',
      description: 'Tenant, platform, device (/ddi/v1), factory (/provisioning/v1), notification, ingest and IAM APIs of the device gateway. Errors are application/problem+json (RFC 9457). Outbound calls the gateway makes (state-change webhooks, factory backends) are under `webhooks`. A typed client generated from this document: src/clients/api.ts.',
      license: { name: 'Proprietary', identifier: 'LicenseRef-Proprietary' },
    },
    servers: [LOCAL.test(host)
      ? { url: '/', description: 'this gateway (its PUBLIC_BASE_URL is a local address: set PUBLIC_BASE_URL to publish the public one)' }
      : { url: publicBaseUrl, description: 'this gateway (PUBLIC_BASE_URL)' }],
    components: { securitySchemes: securitySchemesOf(registeredSchemes) },
    security: USER_SECURITY,
    webhooks: webhooksOf(),
  } as NonNullable<FastifyDynamicSwaggerOptions['openapi']>;
}
