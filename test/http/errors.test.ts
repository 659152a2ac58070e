import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { expectProblem, startTestGateway, type TestGateway } from '../helpers/gateway.js';

let gw: TestGateway;
let admin: string;
beforeAll(async () => {
  gw = await startTestGateway({ BODY_LIMIT_BYTES: '2048' });
  admin = await gw.token({ realm: 'platform', sub: 'root', roles: ['platform-admin'] });
});
afterAll(() => gw?.close());

describe('every failure is application/problem+json with a trace_id', () => {
  it('unknown route: 404', async () => {
    const b = expectProblem(await gw.http.get('/no/such/route'), 404);
    expect(b.detail).toContain('/no/such/route');
    expect(b.instance).toBe('/no/such/route');
  });

  it('malformed JSON: 400', async () => {
    const b = expectProblem(await gw.http.post('/platform/v1/accounts', undefined, { token: admin, raw: '{"name": "x",' }), 400);
    expect(b.detail).toMatch(/not valid JSON/);
  });

  it('wrong type: 400 naming the field', async () => {
    const b = expectProblem(await gw.http.post('/platform/v1/accounts', { name: 42 }, { token: admin }), 400);
    expect(b.detail).toContain('body.name');
  });

  it('unknown field where forbidden: 400 naming the field', async () => {
    const b = expectProblem(await gw.http.post('/platform/v1/accounts', { name: 'a', colour: 'red' }, { token: admin }), 400);
    expect(b.detail).toMatch(/unknown field\(s\) colour/);
  });

  it('oversized body: 413', async () => {
    const b = expectProblem(await gw.http.post('/platform/v1/accounts', { name: 'x'.repeat(5000) }, { token: admin }), 413);
    expect(b.detail).toContain('2048');
  });

  it('unsupported media type: 415', async () => {
    expectProblem(await gw.http.post('/platform/v1/accounts', undefined, { token: admin, raw: 'name=x', headers: { 'content-type': 'application/x-www-form-urlencoded' } }), 415);
  });

  it('bad query and params: 400', async () => {
    expectProblem(await gw.http.get('/platform/v1/accounts?limit=0', { token: admin }), 400);
    expectProblem(await gw.http.get('/platform/v1/accounts/not-a-uuid', { token: admin }), 400);
  });

  it('takes trace_id from traceparent and echoes it', async () => {
    const traceId = '4bf92f3577b34da6a3ce929d0e0e4736';
    const res = await gw.http.get('/nowhere', { headers: { traceparent: `00-${traceId}-00f067aa0ba902b7-01` } });
    const b = expectProblem(res, 404);
    expect(b.trace_id).toBe(traceId);
    expect(res.headers.get('traceparent')).toMatch(new RegExp(`^00-${traceId}-[0-9a-f]{16}-01$`));
  });

  it('generates a trace id when traceparent is absent or invalid', async () => {
    const res = await gw.http.get('/nowhere', { headers: { traceparent: 'garbage' } });
    const b = expectProblem(res, 404);
    expect(b.trace_id).toMatch(/^[0-9a-f]{32}$/);
    expect(res.headers.get('traceparent')).toContain(b.trace_id);
  });
});

describe('operations endpoints', () => {
  it('serves health, readiness, metrics and OpenAPI 3.1', async () => {
    expect((await gw.http.get('/healthz')).body).toEqual({ status: 'ok' });
    const ready = await gw.http.get('/readyz');
    expect(ready.status).toBe(200);
    expect(ready.body.checks.database).toBe(true);
    const metrics = await gw.http.get('/metrics');
    expect(metrics.text).toContain('http_request_duration_seconds');
    const doc = await gw.http.get('/docs/json');
    expect(doc.body.openapi).toBe('3.1.0');
    expect(Object.keys(doc.body.paths)).toContain('/platform/v1/accounts');
    expect((await gw.http.get('/docs')).status).toBeLessThan(400);
  });
});
