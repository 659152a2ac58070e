import { spawn, type ChildProcess } from 'node:child_process';
import fs from 'node:fs';
import http from 'node:http';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it, inject } from 'vitest';
import { freePort } from '../src/db/embedded.js';
import { createTestDatabase, type TestDatabase } from './helpers/db.js';
import { waitFor } from './helpers/wait.js';

let db: TestDatabase;
let child: ChildProcess;
let port: number;
let output = '';

beforeAll(async () => {
  db = await createTestDatabase({ migrated: false });
  port = await freePort();
  child = spawn(path.resolve('node_modules/.bin/tsx'), ['src/main.ts'], {
    env: {
      ...process.env,
      DATABASE_URL: db.url,
      HTTP_PORT: String(port),
      HTTP_HOST: '127.0.0.1',
      MQTT_PORT: '0',
      MQTT_HOST: '127.0.0.1',
      CERTS_DIR: inject('certsDir'),
      DATA_DIR: fs.mkdtempSync(path.join(os.tmpdir(), 'gw-shutdown-')),
      LOG_LEVEL: 'info',
      LOG_PRETTY: 'false',
    },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  child.stdout!.on('data', (d) => (output += d));
  child.stderr!.on('data', (d) => (output += d));
  await waitFor(() => output.includes('ready in'), 60_000, `gateway start; output so far:\n${output}`);
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
    const exited = new Promise<number | null>((resolve) => child.once('exit', (code) => resolve(code)));
    const res = await response.catch((err) => { throw new Error(`${err.message}; gateway output:\n${output}`); });
    expect(res.status).toBe(200);
    expect(JSON.parse(res.text).access_token).toBeTruthy();
    expect(await exited).toBe(0);
    expect(output).toContain('shutting down');
    // no longer accepting
    await expect(fetch(`http://127.0.0.1:${port}/healthz`)).rejects.toThrow();
  });
});
