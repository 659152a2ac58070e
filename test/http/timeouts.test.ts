import net from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestGateway, type TestGateway } from '../helpers/gateway.js';

/**
 * Request timeouts over real sockets: a client that stops mid-body or mid-headers is answered 408
 * (problem+json) and disconnected, instead of holding its socket forever.
 */
let gw: TestGateway;

beforeAll(async () => {
  gw = await startTestGateway({ HTTP_REQUEST_TIMEOUT_MS: '1500', HTTP_HEADERS_TIMEOUT_MS: '1000' });
});
afterAll(async () => gw?.close());

/** Writes `raw` and never more; resolves with everything received once the server closes the socket. */
function stall(raw: string): Promise<{ received: string; closedAfterMs: number }> {
  const url = new URL(gw.httpUrl);
  return new Promise((resolve, reject) => {
    const started = Date.now();
    let received = '';
    const socket = net.connect(Number(url.port), url.hostname, () => socket.write(raw));
    socket.on('data', (d) => (received += d));
    socket.on('error', () => {}); // a reset after the 408 is fine: close follows
    socket.on('close', () => resolve({ received, closedAfterMs: Date.now() - started }));
    // a generous bound, so that a missing timeout fails instead of hanging
    setTimeout(() => { socket.destroy(); reject(new Error(`socket still open after 30 s; got: ${received}`)); }, 30_000).unref();
  });
}

function parseResponse(received: string) {
  const [head, body] = received.split('\r\n\r\n');
  return { statusLine: head.split('\r\n')[0], head: head.toLowerCase(), body: JSON.parse(body) };
}

describe('request timeouts', () => {
  it('a body that stops arriving gets 408 problem+json and the socket is closed', async () => {
    const body = JSON.stringify({ provisioningMethod: 'claim_token', claimSecret: 'cgs_x', manufacturer: 'a', model: 'b', serial: 'c' });
    const { received } = await stall(
      `POST /ddi/v1/enroll HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: ${body.length}\r\n\r\n${body.slice(0, 20)}`,
    );
    const res = parseResponse(received);
    expect(res.statusLine).toBe('HTTP/1.1 408 Request Timeout');
    expect(res.head).toContain('content-type: application/problem+json');
    expect(res.body).toMatchObject({ status: 408, title: 'Request Timeout', instance: '/ddi/v1/enroll' });
    expect(res.body.detail).toMatch(/did not arrive within the time limit/);
    expect(res.body.trace_id).toMatch(/^[0-9a-f]{32}$/);
  });

  it('headers that never finish get 408 and the socket is closed', async () => {
    const { received } = await stall('POST /ddi/v1/enroll HTTP/1.1\r\nHost: x\r\nContent-Ty');
    const res = parseResponse(received);
    expect(res.statusLine).toBe('HTTP/1.1 408 Request Timeout');
    expect(res.body.status).toBe(408);
  });

  it('many stalled uploads are all closed, and the server still answers', async () => {
    const results = await Promise.all(Array.from({ length: 50 }, () => stall('POST /ddi/v1/enroll HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{"a"')));
    for (const r of results) expect(r.received).toMatch(/^HTTP\/1.1 408 /);
    expect((await gw.http.get('/healthz')).status).toBe(200);
  });

  it('malformed HTTP is a 400 problem', async () => {
    const { received } = await stall('GARBAGE\r\n\r\n');
    const res = parseResponse(received);
    expect(res.statusLine).toBe('HTTP/1.1 400 Bad Request');
    expect(res.head).toContain('content-type: application/problem+json');
    expect(res.body.detail).toMatch(/malformed HTTP request/);
  });
});
