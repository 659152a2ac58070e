/**
 * The API contract as a product (issue 39): the document the gateway serves passes Redocly's
 * recommended lint, names its resources, declares every security scheme and the outbound calls
 * (webhooks), documents every status the suite observed, publishes the things group under
 * /provisioning/v1, and the typed client in src/clients is what this document generates.
 */
import { execFile } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { promisify } from 'node:util';
import Ajv2020Module from 'ajv/dist/2020.js';
import addFormatsModule from 'ajv-formats';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { gatewayClient, must } from '../../src/clients/api.js';
import { generateClientTypes, SCHEMA_FILE } from '../../src/clients/generate.js';
import { createAccount } from '../helpers/accounts.js';
import { startTestGateway, type TestGateway } from '../helpers/gateway.js';
import { parseObserved } from '../helpers/statusLog.js';

type Json = Record<string, any>;
const METHODS = ['get', 'put', 'post', 'delete', 'patch'];
const ROOT = path.resolve(import.meta.dirname, '../..');
const OBSERVED = path.join(ROOT, 'test/http/observedStatuses.json');
// CommonJS modules whose types name their export `default`
const Ajv2020: typeof Ajv2020Module.default = (Ajv2020Module as unknown as { default?: typeof Ajv2020Module.default }).default ?? (Ajv2020Module as unknown as typeof Ajv2020Module.default);
const addFormats: typeof addFormatsModule.default = (addFormatsModule as unknown as { default?: typeof addFormatsModule.default }).default ?? (addFormatsModule as unknown as typeof addFormatsModule.default);

let gw: TestGateway;
let doc: Json;
let dir: string;
const ops = () => Object.entries<Json>(doc.paths).flatMap(([p, item]) => METHODS.filter((m) => item[m]).map((method) => ({ method, path: p, op: item[method] as Json })));

beforeAll(async () => {
  gw = await startTestGateway();
  doc = (await gw.http.get('/docs/json')).body;
  dir = fs.mkdtempSync(path.join(os.tmpdir(), 'contract-'));
});
afterAll(async () => {
  await gw?.close();
  if (dir) fs.rmSync(dir, { recursive: true, force: true });
});

/** The first line where two texts differ, with two lines of context: what each has there. */
function firstDifference(a: string, b: string): string {
  const [x, y] = [a.split('\n'), b.split('\n')];
  let i = 0;
  while (i < x.length && i < y.length && x[i] === y[i]) i++;
  const around = (lines: string[]) => lines.slice(Math.max(0, i - 2), i + 3).join('\n');
  return `line ${i + 1}; committed:\n${around(x)}\ngenerated:\n${around(y)}`;
}

/** Every value under a node, with the keys on the way. */
function* walk(node: unknown, at: string[] = []): Generator<{ node: Json; at: string[] }> {
  if (Array.isArray(node)) for (const [i, v] of node.entries()) yield* walk(v, [...at, String(i)]);
  else if (node && typeof node === 'object') {
    yield { node: node as Json, at };
    for (const [k, v] of Object.entries(node)) yield* walk(v, [...at, k]);
  }
}

describe('API contract', () => {
  it('redocly lint (recommended ruleset, redocly.yaml): no errors and no warnings', async () => {
    const file = path.join(dir, 'openapi.json');
    fs.writeFileSync(file, JSON.stringify(doc));
    const bin = path.join(ROOT, 'node_modules/.bin/redocly');
    const { stdout } = await promisify(execFile)(bin, ['lint', file, '--config', path.join(ROOT, 'redocly.yaml'), '--format', 'json'], { cwd: ROOT, maxBuffer: 64 * 1024 * 1024 })
      .catch((e: { stdout: string; stderr: string }) => ({ stdout: e.stdout, stderr: e.stderr }));
    const report = JSON.parse(stdout.slice(stdout.indexOf('{')));
    const problems = (report.problems as Json[]).map((p) => `${p.severity} ${p.ruleId}: ${p.message} at ${p.location?.[0]?.pointer}`);
    expect(problems).toEqual([]);
    expect(report.totals).toMatchObject({ errors: 0, warnings: 0 });
  });

  it('paths that look ambiguous (the reason no-ambiguous-paths is off) never collide: the parameter refuses the literal', () => {
    const paths = Object.keys(doc.paths);
    const paramSchema = (p: string, name: string): Json | undefined => {
      const item = doc.paths[p];
      for (const m of METHODS) {
        const found = (item[m]?.parameters as Json[] | undefined)?.find((x) => x.in === 'path' && x.name === name);
        if (found) return found.schema;
      }
      return undefined;
    };
    const refuses = (schema: Json | undefined, literal: string) =>
      !!schema && ((schema.format === 'uuid' && !/^[0-9a-f-]{36}$/i.test(literal)) || (schema.pattern && !new RegExp(schema.pattern).test(literal)));
    let pairs = 0;
    const colliding: string[] = [];
    for (const [i, a] of paths.entries()) {
      for (const b of paths.slice(i + 1)) {
        const sa = a.split('/');
        const sb = b.split('/');
        if (sa.length !== sb.length) continue;
        const param = (s: string) => /^\{.+\}$/.test(s);
        // ambiguous when every position matches (equal, or a parameter on either side) and a literal faces a parameter on each side
        if (!sa.every((s, k) => s === sb[k] || param(s) || param(sb[k]))) continue;
        const facing = sa.map((s, k) => [s, sb[k]] as const).filter(([x, y]) => x !== y);
        if (!(facing.some(([x, y]) => param(x) && !param(y)) && facing.some(([x, y]) => !param(x) && param(y)))) continue;
        pairs++;
        const resolved = facing.some(([x, y]) => (param(x) && !param(y) && refuses(paramSchema(a, x.slice(1, -1)), y)) || (!param(x) && param(y) && refuses(paramSchema(b, y.slice(1, -1)), x)));
        if (!resolved) colliding.push(`${a} and ${b}`);
      }
    }
    expect(pairs).toBeGreaterThan(0); // the pairs redocly reports are there, and each one is resolved
    expect(colliding).toEqual([]);
  });

  it('names its resources: at least 40 component schemas, listed by name, each with an example its schema admits, referenced rather than copied', () => {
    const schemas = doc.components.schemas as Record<string, Json>;
    const names = Object.keys(schemas);
    expect(names.length).toBeGreaterThanOrEqual(40);
    // by name, not in the order their modules happened to load (which differs between processes)
    expect(names).toEqual([...names].sort());
    for (const n of ['Thing', 'ThingListItem', 'Certificate', 'ThingState', 'Model', 'ClaimGroup', 'Subscription', 'StateChange', 'Enrollment', 'FactoryService', 'Credential', 'Problem']) expect(names).toContain(n);
    const ajv = new Ajv2020({ strict: false, allErrors: true });
    addFormats(ajv);
    ajv.addSchema({ $id: 'doc', components: { schemas } });
    const wrong: string[] = [];
    for (const [name, schema] of Object.entries(schemas)) {
      if (name === 'Problem') continue;
      if (!Array.isArray(schema.examples) || schema.examples.length === 0) {
        wrong.push(`${name}: no example`);
        continue;
      }
      const validate = ajv.getSchema(`doc#/components/schemas/${name}`)!;
      if (!validate(schema.examples[0])) wrong.push(`${name}: ${ajv.errorsText(validate.errors)}`);
    }
    expect(wrong).toEqual([]);

    // the operations refer to them: a named schema's shape inline in an operation is a copy the registry missed
    const strip = (s: unknown): unknown => JSON.parse(JSON.stringify(s, (k, v) => (k === 'description' || k === 'examples' ? undefined : v)));
    const shapes = new Map<string, string>();
    for (const [name, s] of Object.entries(schemas)) if (s.type === 'object' && Object.keys(s.properties ?? {}).length >= 2) shapes.set(JSON.stringify(strip(s)), name);
    const copies: string[] = [];
    let refs = 0;
    for (const { method, path: p, op } of ops()) {
      for (const { node, at } of walk({ requestBody: op.requestBody, responses: op.responses })) {
        if (typeof node.$ref === 'string' && node.$ref.startsWith('#/components/schemas/')) refs++;
        if (node.type !== 'object' || Object.keys(node.properties ?? {}).length < 2) continue;
        const copy = shapes.get(JSON.stringify(strip(node)));
        if (copy && at.length > 0) copies.push(`${method.toUpperCase()} ${p} ${at.join('.')}: ${copy}`);
      }
    }
    expect(copies).toEqual([]);
    expect(refs).toBeGreaterThan(ops().length); // every error response's Problem, and the resources
    // a few operations and what they name
    const schemaOf = (p: string, m: string, status: string) => doc.paths[p][m].responses[status].content['application/json'].schema;
    expect(schemaOf('/api/v1/things/{thingId}/state', 'get', '200')).toEqual({ $ref: '#/components/schemas/ThingStateView' });
    expect(schemaOf('/provisioning/v1/state-changes', 'get', '200')).toEqual({ $ref: '#/components/schemas/StateChangePage' });
    expect(doc.paths['/api/v1/models'].post.requestBody.content['application/json'].schema).toEqual({ $ref: '#/components/schemas/ModelCreate' });
  });

  it('declares every security scheme the gateway accepts, and each operation lists the ones it accepts', () => {
    const schemes = doc.components.securitySchemes as Record<string, Json>;
    for (const n of ['bearer', 'svc', 'svcSessionToken', 'svcHmacSha256', 'svcHmacAccessKeyId', 'svcHmacTimestamp', 'device-token', 'device-cert', 'internal', 'sts-idc-jwt']) {
      expect(schemes[n], n).toBeDefined();
    }
    expect(schemes.svcHmacSha256).toMatchObject({ type: 'apiKey', in: 'header', name: 'X-SVC-Signature' });
    expect(schemes.svcHmacSha256.description).toMatch(/kSigning = HMAC\(kService, "svc4_request"\)/);
    expect(schemes['device-cert'].type).toBe('mutualTLS');
    const signed = { svcHmacSha256: [], svcHmacAccessKeyId: [], svcHmacTimestamp: [] };
    const missing = ops().filter(({ op }) => !Array.isArray(op.security)).map(({ method, path: p }) => `${method} ${p}`);
    expect(missing).toEqual([]);
    const used = new Set(ops().flatMap(({ op }) => (op.security as Json[]).flatMap((r) => Object.keys(r))));
    for (const n of Object.keys(schemes).filter((n) => n !== 'standardWebhooks')) expect(used, `${n} is used by some operation`).toContain(n);
    // a factory service's signed request is accepted where its policy may allow the action, not elsewhere
    expect(doc.paths['/provisioning/v1/state-changes'].get.security).toContainEqual(signed);
    expect(doc.paths['/api/v1/things/{thingId}/provisioning-result'].post.security).toContainEqual(signed);
    expect(doc.paths['/platform/v1/accounts'].post.security).not.toContainEqual(signed);
    expect(doc.paths['/ddi/v1/enroll'].post.security).toEqual([]);
    expect(doc.paths['/ddi/v1/{thingId}/device/status'].get.security).toEqual([{ 'device-token': [] }, { 'device-cert': [] }]);
  });

  it('describes the outbound calls a user implements as webhooks, with schemas and examples', () => {
    const hooks = doc.webhooks as Record<string, Json>;
    expect(Object.keys(hooks).sort()).toEqual(['enrollmentApproval', 'factoryHealthCheck', 'notificationAuthorization', 'provisioningLeg', 'thingStateChanged']);
    const delivery = hooks.thingStateChanged.post;
    expect(delivery.parameters.map((p: Json) => p.name)).toEqual(['webhook-id', 'webhook-timestamp', 'webhook-signature']);
    expect(delivery.security).toEqual([{ standardWebhooks: [] }]);
    expect(delivery.requestBody.content['application/json'].schema).toEqual({ $ref: '#/components/schemas/StateChangeDelivery' });
    const body = doc.components.schemas.StateChangeDelivery;
    expect(body.properties.data).toEqual({ $ref: '#/components/schemas/StateChange' });
    expect(body.examples[0]).toMatchObject({ type: 'thing.state_changed', data: { thing_id: expect.any(String) } });
    expect(hooks.provisioningLeg.post.parameters.map((p: Json) => p.name)).toEqual(['X-SVC-Access-Key-Id', 'X-SVC-Timestamp', 'X-SVC-Signature']);
    expect(doc.components.schemas.ProvisioningLegCall.examples[0].result_url).toMatch(/\/provisioning-result$/);
  });

  it('a body the route takes as optional is not required; a body it needs is', () => {
    // POST .../provision takes `{}` or nothing (zod nullish); POST /api/v1/things needs its body
    expect(doc.paths['/api/v1/things/{thingId}/provision'].post.requestBody.required).toBe(false);
    expect(doc.paths['/api/v1/things'].post.requestBody.required).toBe(true);
  });

  it('the /provisioning/v1 edge publishes the whole things group, factory-eligibility included', async () => {
    const group = ['/things/{thingId}/state', '/things/{thingId}/factory-eligibility', '/things/resolve', '/things/{thingId}/provision', '/things/{thingId}/provisioning-result', '/things/{thingId}/factory-handover'];
    for (const p of group) expect(doc.paths[`/provisioning/v1${p}`], p).toBeDefined();
    const account = await createAccount(gw, { capabilities: ['enroll_things'] });
    const thing = await gw.http.post('/api/v1/things', { manufacturer: 'Acme', model: 'contract', serial: 'C-1' }, { token: account.admin });
    expect(thing.status, thing.text).toBe(201);
    const internal = await gw.http.get(`/api/v1/things/${thing.body.thingId}/factory-eligibility`, { token: account.viewer });
    const edge = await gw.http.get(`/provisioning/v1/things/${thing.body.thingId}/factory-eligibility`, { token: account.viewer });
    expect(internal.status, internal.text).toBe(200);
    expect(edge.status, edge.text).toBe(200);
    expect(edge.body).toEqual(internal.body);
  });

  it('documents every status the suite observed (test/http/observedStatuses.json, npm run record:statuses)', () => {
    const observed = JSON.parse(fs.readFileSync(OBSERVED, 'utf8')) as string[];
    expect(observed.length).toBeGreaterThan(100);
    const undocumented: string[] = [];
    let checked = 0;
    for (const line of observed) {
      const { method, path: p, status } = parseObserved(line);
      const op = doc.paths[p]?.[method];
      if (!op) continue; // hidden routes (/metrics, /dev/token, /docs) and routes of features not built in this run
      checked++;
      if (!op.responses[String(status)] && !op.responses[`${String(status)[0]}XX`]) undocumented.push(`${method.toUpperCase()} ${p} ${status}`);
    }
    expect(checked).toBeGreaterThan(100);
    expect(undocumented).toEqual([]);
  });

  it('the typed client talks to the gateway: bearer, and a factory service\'s signed requests (GET and a body)', async () => {
    const account = await createAccount(gw);
    const admin = gatewayClient(gw.httpUrl, { bearer: account.admin });
    const model = await must(admin.POST('/api/v1/models', { body: { vid: 'FFF3', pid: '0391', name: 'contract', provisioning_method: 'none' } }));
    expect(model.descriptor).toBe('FFF3:0391');
    const service = await must(admin.POST('/api/v1/factory-services', { body: { role: 'provision', model_id: model.id, endpoint_url: 'https://factory.example.net' } }));
    const signed = gatewayClient(gw.httpUrl, { signed: { accessKeyId: service.access_key_id, secretAccessKey: service.secret_access_key } });
    const page = await must(signed.GET('/provisioning/v1/state-changes', { params: { query: { limit: 5 } } }));
    expect(page.items).toEqual([]);
    // a signed body: the signature covers its bytes (a bad one would be 401); the service's default policy may still refuse the action
    const { response } = await signed.POST('/provisioning/v1/state-change-subscriptions', { body: { target_url: 'https://hooks.example.net/x', acknowledge_polling_still_mandatory: true } });
    expect([201, 403]).toContain(response.status);
    const { error, response: refused } = await gatewayClient(gw.httpUrl, { signed: { accessKeyId: service.access_key_id, secretAccessKey: 'wrong' } }).GET('/provisioning/v1/state-changes', {});
    expect(refused.status).toBe(401);
    expect(error?.detail).toBeTruthy();
  });

  it('the typed client is what this document generates (npm run generate:client)', async () => {
    const generated = await generateClientTypes(doc);
    const file = path.join(ROOT, SCHEMA_FILE);
    if (process.env.UPDATE_CLIENT) fs.writeFileSync(file, generated);
    const committed = fs.existsSync(file) ? fs.readFileSync(file, 'utf8') : '';
    // compare without failing on a 1 MB diff print: the first lines that differ only
    expect(committed === generated, `${SCHEMA_FILE} is not current: run npm run generate:client\n${firstDifference(committed, generated)}`).toBe(true);
    expect(generated).toMatch(/^export type ThingStateView = components\['schemas'\]\['ThingStateView'\];$/m);
  });
});
