import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestGateway, type TestGateway } from '../helpers/gateway.js';

/** The OpenAPI document lists every route of the factory surface (part 1) with its schemas. */
let gw: TestGateway;
let doc: any;

beforeAll(async () => {
  gw = await startTestGateway();
  doc = (await gw.http.get('/docs/json')).body;
});
afterAll(async () => gw?.close());

// [method, path, success status, has a JSON request body]
const ROUTES: [string, string, string, boolean][] = [
  ['get', '/api/v1/factory-services', '200', false],
  ['post', '/api/v1/factory-services', '201', true],
  ['get', '/api/v1/factory-services/{id}', '200', false],
  ['patch', '/api/v1/factory-services/{id}', '200', true],
  ['delete', '/api/v1/factory-services/{id}', '204', false],
  ['post', '/api/v1/factory-services/{id}/rotate-credentials', '200', false],
  ['post', '/api/v1/factory-services/{id}/confirm-rotation', '200', false],
  ['post', '/api/v1/factory-services/{id}/health-check', '200', false],
  ['post', '/api/v1/factory-services/{id}/expedite-drain', '204', false],
  ['get', '/api/v1/factory-services/{id}/policy', '200', false],
  ['put', '/api/v1/factory-services/{id}/policy', '200', true],
  ['delete', '/api/v1/factory-services/{id}/policy', '200', false],
  ['get', '/api/v1/things/{thingId}/state', '200', false],
  ['get', '/api/v1/things/resolve', '200', false],
  ['get', '/api/v1/things/{thingId}/factory-eligibility', '200', false],
  ['post', '/api/v1/things/{thingId}/provision', '202', true],
  ['post', '/api/v1/things/{thingId}/provisioning-result', '200', true],
  ['post', '/api/v1/things/{thingId}/factory-handover', '200', false],
  ['post', '/api/v1/things/{thingId}/activate', '200', false],
  ['post', '/api/v1/things/{thingId}/deactivate', '200', false],
  ['post', '/api/v1/things/{thingId}/annihilate', '200', false],
  ['get', '/api/v1/provisioning-runs', '200', false],
  ['get', '/api/v1/provisioning-runs/{id}', '200', false],
  ['get', '/api/v1/enrollments', '200', false],
  ['post', '/api/v1/enrollments', '201', true],
  ['get', '/api/v1/enrollments/{id}', '200', false],
];

describe('OpenAPI document', () => {
  it.each(ROUTES)('%s %s: summary, success response schema and request schema', (method, path, status, hasBody) => {
    const op = doc.paths?.[path]?.[method];
    expect(op, `${method.toUpperCase()} ${path} is missing`).toBeDefined();
    expect(op.summary).toBeTruthy();
    expect(op.responses[status], `${method} ${path} has no ${status} response`).toBeDefined();
    if (status !== '204') expect(op.responses[status].content?.['application/json']?.schema).toBeDefined();
    if (hasBody) expect(op.requestBody?.content?.['application/json']?.schema).toBeDefined();
    if (path.includes('{')) expect(op.parameters?.some((p: any) => p.in === 'path')).toBe(true);
  });
});
