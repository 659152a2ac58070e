import net from 'node:net';
import Fastify from 'fastify';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { registerErrorHandling } from '../../src/http/errors.js';
import { traceIdOf } from '../../src/http/trace.js';
import { expectProblem, startTestGateway, type TestGateway } from '../helpers/gateway.js';
import { parseResponses, rawExchange } from '../helpers/rawHttp.js';

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

describe("Fastify's own errors are problem+json too", () => {
  it('invalid percent-encoding in the path (before routing): 400 with trace_id and traceparent', async () => {
    const res = await gw.http.get('/platform/v1/accounts/%ff%fe', { token: admin });
    const b = expectProblem(res, 400);
    expect(b.detail).toMatch(/percent-encoding that is not valid UTF-8/);
    expect(b.instance).toBe('/platform/v1/accounts/%ff%fe');
    expect(res.headers.get('traceparent')).toContain(b.trace_id);
  });

  it('a path parameter over 100 characters: 414', async () => {
    const b = expectProblem(await gw.http.get(`/platform/v1/accounts/${'x'.repeat(5000)}`, { token: admin }), 414);
    expect(b.detail).toBe('a path parameter is longer than 100 characters');
    expect(b.title).toBe('URI Too Long');
  });

  it('a body without Content-Type: 415', async () => {
    const res = await fetch(`${gw.httpUrl}/platform/v1/accounts`, { method: 'POST', headers: { authorization: `Bearer ${admin}` }, body: Buffer.from('{"name":"x"}') });
    const b = expectProblem({ status: res.status, headers: res.headers, body: await res.json(), text: '' }, 415);
    expect(b.detail).toMatch(/missing or unsupported Content-Type/);
  });

  it('requests the HTTP parser refuses: 400, headers too large: 431', async () => {
    const port = Number(new URL(gw.httpUrl).port);
    for (const [request, status] of [
      ['GET /healthz\u0000 HTTP/1.1\r\nHost: x\r\n\r\n', 400],
      ['GET /healthz HTTP/1.1\r\nBad Header: 1\r\n\r\n', 400],
      [`GET /healthz HTTP/1.1\r\nHost: x\r\nX-Big: ${'a'.repeat(20_000)}\r\n\r\n`, 431],
    ] as const) {
      const [res] = await rawExchange(port, request);
      expect(res.status).toBe(status);
      expect(res.headers['content-type']).toBe('application/problem+json');
      const b = JSON.parse(res.body);
      expect(b).toMatchObject({ status, detail: expect.any(String), trace_id: expect.stringMatching(/^[0-9a-f]{32}$/) });
      expect(res.headers.traceparent).toContain(b.trace_id);
    }
  });

  it('a request arriving on an open connection while the server drains: 503 problem+json, connection closed', async () => {
    // A small app with the gateway's error handling, and a route held in flight so that a
    // connection stays open while close() drains it.
    const app = Fastify({ return503OnClosing: false, forceCloseConnections: 'idle', genReqId: traceIdOf });
    registerErrorHandling(app, 'http://gateway.test', 1024);
    const signal = () => {
      let resolve!: () => void;
      const promise = new Promise<void>((r) => (resolve = r));
      return { promise, resolve };
    };
    const slowStarted = signal();
    const release = signal();
    const closing = signal();
    const refused = signal();
    app.get('/slow', async () => {
      slowStarted.resolve();
      await release.promise;
      return { ok: true };
    });
    app.get('/fast', async () => ({ ok: true }));
    app.addHook('preClose', (done) => { closing.resolve(); done(); });
    app.addHook('onError', async () => refused.resolve());
    await app.listen({ port: 0, host: '127.0.0.1' });

    const socket = net.connect((app.server.address() as net.AddressInfo).port, '127.0.0.1');
    const chunks: Buffer[] = [];
    socket.on('data', (c) => chunks.push(c));
    const socketClosed = new Promise((r) => socket.on('close', r));
    socket.write('GET /slow HTTP/1.1\r\nHost: x\r\n\r\n');
    await slowStarted.promise;
    const closed = app.close();
    await closing.promise;
    socket.write('GET /fast HTTP/1.1\r\nHost: x\r\n\r\n');
    await refused.promise;
    release.resolve();
    await socketClosed;
    await closed;

    const [slow, fast] = parseResponses(Buffer.concat(chunks));
    expect(slow.status).toBe(200);
    expect(fast.status).toBe(503);
    expect(fast.headers['content-type']).toBe('application/problem+json');
    expect(fast.headers.connection).toBe('close');
    expect(JSON.parse(fast.body)).toMatchObject({ status: 503, detail: expect.stringMatching(/shutting down/), instance: '/fast', trace_id: expect.stringMatching(/^[0-9a-f]{32}$/) });
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

  it('/metrics?name= serves only the families named; a malformed name is 400', async () => {
    const some = await gw.http.get('/metrics?name=mqtt_messages_received_total&name=http_requests_total&name=no_such_metric');
    expect(some.status).toBe(200);
    const families = [...some.text.matchAll(/^# TYPE (\S+)/gm)].map((m) => m[1]).sort();
    expect(families).toEqual(['http_requests_total', 'mqtt_messages_received_total']);
    expect(some.text).toMatch(/^mqtt_messages_received_total \d+$/m);
    expect(some.text).not.toContain('process_cpu');
    const b = expectProblem(await gw.http.get('/metrics?name=bad%20name'), 400);
    expect(b.detail).toContain('"bad name"');
  });
});
