import type { ChildProcess } from 'node:child_process';
import http from 'node:http';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { freePort } from '../src/db/embedded.js';
import { createTestDatabase, type TestDatabase } from './helpers/db.js';
import { spawnGateway, type GatewayProcess } from './helpers/process.js';

let db: TestDatabase;
let child: ChildProcess;
let port: number;
let gateway: GatewayProcess;

beforeAll(async () => {
  db = await createTestDatabase({ migrated: false });
  port = await freePort();
  gateway = await spawnGateway({ DATABASE_URL: db.url, HTTP_PORT: String(port), LOG_LEVEL: 'info' });
  child = gateway.proc;
});
afterAll(async () => {
  if (child.exitCode === null) child.kill('SIGKILL');
  await db.drop();
});

describe('graceful shutdown', () => {
  it('on SIGTERM finishes the in-flight request, then exits 0', async () => {
    const body = JSON.stringify({ realm: 'platform', sub: 'root', roles: ['platform-admin'] });
    const response = new Promise<{ status: number; text: string }>((resolve, reject) => {
      const req = http.request({ host: '127.0.0.1', port, method: 'POST', path: '/dev/token', headers: { 'content-type': 'application/json', 'content-length': Buffer.byteLength(body) } }, (res) => {
        let text = '';
        res.on('data', (d) => (text += d));
        res.on('end', () => resolve({ status: res.statusCode!, text }));
      });
      req.on('error', reject);
      // half the body now, SIGTERM, the rest later: the request is in flight when shutdown starts
      req.write(body.slice(0, 10));
      setTimeout(() => child.kill('SIGTERM'), 300);
      setTimeout(() => req.end(body.slice(10)), 900);
    });
    const res = await response.catch((err) => { throw new Error(`${err.message}; gateway output:\n${gateway.output()}`); });
    expect(res.status).toBe(200);
    expect(JSON.parse(res.text).access_token).toBeTruthy();
    expect(await gateway.exited).toBe(0);
    expect(gateway.output()).toContain('shutting down');
    // no longer accepting
    await expect(fetch(`http://127.0.0.1:${port}/healthz`)).rejects.toThrow();
  });
});
