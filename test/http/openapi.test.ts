import crypto from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { openapiTransformObject, operationIdOf, PROBLEM_REF, PROBLEM_SCHEMA } from '../../src/http/openapi.js';
import { createAccount, type TestAccount } from '../helpers/accounts.js';
import { expectProblem, startTestGateway, type TestGateway } from '../helpers/gateway.js';

type Json = Record<string, any>;
interface Op { method: string; path: string; op: Json }

const METHODS = ['get', 'put', 'post', 'delete', 'options', 'head', 'patch', 'trace'];
const PROBLEM_JSON = 'application/problem+json';

let gw: TestGateway;
let doc: Json;
let ops: Op[];
let account: TestAccount;

beforeAll(async () => {
  gw = await startTestGateway();
  account = await createAccount(gw);
  const res = await gw.http.get('/docs/json');
  expect(res.status).toBe(200);
  doc = res.body;
  ops = Object.entries<Json>(doc.paths).flatMap(([path, item]) =>
    METHODS.filter((m) => item[m]).map((method) => ({ method, path, op: item[method] as Json })));
});
afterAll(() => gw?.close());

/** Every `$ref` in the document, with where it is. */
function refsOf(node: unknown, at = '#', out: Array<{ at: string; ref: string }> = []): Array<{ at: string; ref: string }> {
  if (Array.isArray(node)) node.forEach((v, i) => refsOf(v, `${at}/${i}`, out));
  else if (node && typeof node === 'object') {
    for (const [k, v] of Object.entries(node)) {
      if (k === '$ref' && typeof v === 'string') out.push({ at, ref: v });
      else refsOf(v, `${at}/${k.replace(/~/g, '~0').replace(/\//g, '~1')}`, out);
    }
  }
  return out;
}

/** JSON Pointer resolution within the document (local refs only: the document is self-contained). */
function resolve(ref: string): unknown {
  if (!ref.startsWith('#')) return undefined;
  let node: unknown = doc;
  for (const raw of ref.slice(1).split('/').slice(1)) {
    const key = decodeURIComponent(raw).replace(/~1/g, '/').replace(/~0/g, '~');
    if (!node || typeof node !== 'object' || !(key in node)) return undefined;
    node = (node as Json)[key];
  }
  return node;
}

/** The members of a real problem body that the Problem component does not admit. */
function problemMismatches(body: Json): string[] {
  const out: string[] = [];
  for (const k of PROBLEM_SCHEMA.required) if (body[k] === undefined) out.push(`missing ${k}`);
  for (const [k, s] of Object.entries(PROBLEM_SCHEMA.properties)) {
    if (body[k] === undefined) continue;
    const ok = s.type === 'integer' ? Number.isInteger(body[k]) : typeof body[k] === s.type;
    if (!ok) out.push(`${k} is not ${s.type}`);
  }
  return out;
}

describe('OpenAPI document', () => {
  it('has operations to check', () => {
    expect(ops.length).toBeGreaterThan(20);
  });

  it('every operation has a unique, readable operationId derived from method and path', () => {
    const seen = new Map<string, string>();
    const duplicates: string[] = [];
    for (const { method, path, op } of ops) {
      expect(op.operationId, `${method} ${path}`).toMatch(/^[a-z]+[A-Za-z0-9]*$/);
      const other = seen.get(op.operationId);
      if (other) duplicates.push(`${op.operationId}: ${other} and ${method} ${path}`);
      seen.set(op.operationId, `${method} ${path}`);
    }
    expect(duplicates).toEqual([]);
    expect(doc.paths['/api/v1/things/{thingId}/state'].get.operationId).toBe('getApiV1ThingsThingIdState');
    expect(doc.paths['/platform/v1/accounts'].post.operationId).toBe('postPlatformV1Accounts');
    expect(doc.paths['/healthz'].get.operationId).toBe('getHealthz');
  });

  it('every operation documents its error responses as problem+json of the shared Problem schema', () => {
    expect(doc.components.schemas.Problem).toEqual(PROBLEM_SCHEMA);
    expect(Object.keys(doc.paths['/api/v1/things/{thingId}/state'].get.responses)).toEqual(['200', '400', '401', '403', '404', '414', '429', '500', '503', 'default']);
    // a status the same on every route is one shared response component
    expect(doc.paths['/api/v1/things/{thingId}/state'].get.responses['414']).toEqual({ $ref: '#/components/responses/URITooLong' });
    expect(doc.components.responses.URITooLong.description).toMatch(/^URI Too Long \(problem type `uri-too-long`/);
    const wrong: string[] = [];
    for (const { method, path, op } of ops) {
      const where = `${method.toUpperCase()} ${path}`;
      const responses = op.responses as Json;
      const errors = Object.keys(responses).filter((s) => s === 'default' || /^[45]/.test(s));
      // every operation: 500, 503 and a default for the route-specific rest
      for (const s of ['500', '503', 'default']) if (!responses[s]) wrong.push(`${where}: no ${s}`);
      const params = (op.parameters ?? []) as Json[];
      if (params.some((p) => p.in === 'path') && !responses['404']) wrong.push(`${where}: has path params, no 404`);
      if ((op.requestBody || params.length) && !responses['400']) wrong.push(`${where}: takes input, no 400`);
      if (op.requestBody && !(responses['413'] && responses['415'])) wrong.push(`${where}: takes a body, no 413/415`);
      const authenticated = !(Array.isArray(op.security) && op.security.length === 0);
      if (authenticated && !(responses['401'] && responses['403'])) wrong.push(`${where}: authenticated, no 401/403`);
      for (const s of errors) {
        const response = (responses[s].$ref ? resolve(responses[s].$ref) : responses[s]) as Json;
        const content = response.content ?? {};
        if (!response.description) wrong.push(`${where} ${s}: no description`);
        if (Object.keys(content).join() !== PROBLEM_JSON) wrong.push(`${where} ${s}: content ${Object.keys(content).join()}`);
        else if (content[PROBLEM_JSON].schema?.$ref !== PROBLEM_REF) wrong.push(`${where} ${s}: not the Problem schema`);
      }
    }
    expect(wrong).toEqual([]);
  });

  it('public routes say so (security: []) and authenticated ones do not', () => {
    expect(doc.paths['/healthz'].get.security).toEqual([]);
    expect(doc.paths['/healthz'].get.responses['401']).toBeUndefined();
    // the user schemes: bearer, SVC, SVC with an STS session token (src/http/openapi.ts securityOf)
    expect(doc.paths['/platform/v1/accounts'].post.security).toEqual([{ bearer: [] }, { svc: [] }, { svc: [], svcSessionToken: [] }]);
    expect(doc.paths['/platform/v1/accounts'].post.responses['401']).toBeDefined();
  });

  it('is structurally valid OpenAPI 3.1: every $ref resolves, parameters and responses are well formed', () => {
    expect(doc.openapi).toMatch(/^3\.1\.\d+$/);
    expect(doc.info.title).toBeTruthy();
    expect(doc.info.version).toBeTruthy();
    const wrong: string[] = [];
    const refs = refsOf(doc);
    expect(refs.length).toBeGreaterThan(ops.length); // at least the problem responses
    for (const { at, ref } of refs) if (resolve(ref) === undefined) wrong.push(`${at}: $ref ${ref} does not resolve`);
    const schemes = Object.keys(doc.components.securitySchemes);
    for (const req of doc.security ?? []) for (const k of Object.keys(req)) if (!schemes.includes(k)) wrong.push(`security: unknown scheme ${k}`);
    for (const [path, item] of Object.entries<Json>(doc.paths)) {
      if (!path.startsWith('/')) wrong.push(`${path}: does not start with /`);
      const templated = [...path.matchAll(/\{([^}]+)\}/g)].map((m) => m[1]).sort();
      for (const m of Object.keys(item)) if (!METHODS.includes(m) && !['summary', 'description', 'servers', 'parameters'].includes(m)) wrong.push(`${path}: unknown member ${m}`);
      for (const method of METHODS.filter((m) => item[m])) {
        const op = item[method] as Json;
        const where = `${method.toUpperCase()} ${path}`;
        const params = (op.parameters ?? []) as Json[];
        const inPath = params.filter((p) => p.in === 'path');
        if (inPath.map((p) => p.name).sort().join() !== templated.join()) wrong.push(`${where}: path params ${inPath.map((p) => p.name)} vs template ${templated}`);
        for (const p of params) {
          if (!p.name || !['query', 'header', 'path', 'cookie'].includes(p.in)) wrong.push(`${where}: bad parameter ${JSON.stringify(p)}`);
          if (p.in === 'path' && p.required !== true) wrong.push(`${where}: path param ${p.name} not required`);
          if (!p.schema && !p.content) wrong.push(`${where}: parameter ${p.name} has no schema`);
        }
        const keys = new Set(params.map((p) => `${p.in}:${p.name}`));
        if (keys.size !== params.length) wrong.push(`${where}: duplicate parameters`);
        if (!op.responses || Object.keys(op.responses).length === 0) wrong.push(`${where}: no responses`);
        for (const [s, r] of Object.entries<Json>(op.responses ?? {})) {
          if (!/^([1-5](\d\d|XX)|default)$/.test(s)) wrong.push(`${where}: bad status key ${s}`);
          if (typeof (r.$ref ? (resolve(r.$ref) as Json | undefined)?.description : r.description) !== 'string') wrong.push(`${where} ${s}: no description`);
        }
        for (const req of op.security ?? []) for (const k of Object.keys(req)) if (!schemes.includes(k)) wrong.push(`${where}: unknown security scheme ${k}`);
      }
    }
    expect(wrong).toEqual([]);
  });

  it('the problem bodies the gateway sends fit the Problem schema, extra members included', async () => {
    const thing = crypto.randomUUID();
    const bodies = [
      expectProblem(await gw.http.get(`/api/v1/things/${thing}/state`), 401),
      expectProblem(await gw.http.get(`/api/v1/things/${thing}/state`, { token: account.admin }), 404),
      expectProblem(await gw.http.post('/platform/v1/accounts', { name: 42 }, { token: await gw.token({ realm: 'platform', sub: 'root', roles: ['platform-admin'] }) }), 400),
      expectProblem(await gw.http.post('/platform/v1/accounts', { name: 'a' }, { token: account.viewer }), 403),
    ];
    for (const b of bodies) expect(problemMismatches(b), JSON.stringify(b)).toEqual([]);
    // a body with extra members (readyz's checks) is admitted as well: the schema is open
    expect(PROBLEM_SCHEMA.additionalProperties).toBe(true);
    expect(problemMismatches({ type: 'x', title: 'Conflict', status: 409, detail: 'd', trace_id: 't', code: 'THM-1', state: 'ACTIVE' })).toEqual([]);
  });
});

describe('operationId derivation', () => {
  it('camel-cases method and path words, parameters by name', () => {
    expect(operationIdOf('get', '/api/v1/things/{thingId}/state')).toBe('getApiV1ThingsThingIdState');
    expect(operationIdOf('GET', '/api/v1/things/:thingId/state')).toBe('getApiV1ThingsThingIdState');
    expect(operationIdOf('delete', '/ddi/v1/claim-groups/{id}')).toBe('deleteDdiV1ClaimGroupsId');
  });

  it('keeps an operationId a route sets, and the error responses a route documents itself (as problem+json)', () => {
    const own = { description: 'own conflict', content: { 'application/problem+json': { schema: { $ref: PROBLEM_REF } } } };
    const asJson = { description: 'not the caller\'s', content: { 'application/json': { schema: { type: 'object' } } } };
    const out = openapiTransformObject({
      openapiObject: {
        openapi: '3.1.0', info: { title: 't', version: '1' },
        paths: { '/a/{id}': { get: { operationId: 'readA', 'x-problem-statuses': [404, 409], responses: { 200: { description: 'ok' }, 409: own, 410: asJson } } } },
      },
    } as never) as Json;
    const op = out.paths['/a/{id}'].get;
    expect(op.operationId).toBe('readA');
    expect(op['x-problem-statuses']).toBeUndefined();
    expect(op.responses['409']).toBe(own);
    expect(op.responses['404']).toEqual({ $ref: '#/components/responses/NotFound' });
    expect(out.components.responses.NotFound.content['application/problem+json'].schema.$ref).toBe(PROBLEM_REF);
    // an error the route documented as application/json is what the gateway sends: problem+json
    expect(op.responses['410']).toEqual({ description: 'not the caller\'s', content: { 'application/problem+json': { schema: { $ref: PROBLEM_REF } } } });
    expect(op.responses['200']).toEqual({ description: 'ok' });
    expect(out.components.schemas.Problem).toEqual(PROBLEM_SCHEMA);
  });
});
