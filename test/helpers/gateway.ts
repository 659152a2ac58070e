import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { inject } from 'vitest';
import { loadConfig } from '../../src/config.js';
import { freePort } from '../../src/db/embedded.js';
import { createLogger } from '../../src/log.js';
import type { Clock } from '../../src/lib/clock.js';
import type { FaultHook } from '../../src/lib/faults.js';
import { startGateway, type RunningGateway } from '../../src/server.js';
import { createTestDatabase, type TestDatabase } from './db.js';
import { recordStatuses } from './statusLog.js';

/**
 * A running gateway as tests see it: its public interfaces (HTTP, MQTT), the declared test hooks
 * (`testHooks.<domain>`, src/gateway.ts TestHooks) and the Gateway parts; not the domains' wired
 * services (RunningGateway.services), which only benchmarks use.
 */
export interface TestGateway extends Omit<RunningGateway, 'services'> {
  db: TestDatabase;
  /** real HTTP over a socket */
  http: HttpClient;
  /** a development token */
  token(input: { realm: string; sub: string; roles: string[]; email?: string; expires_in?: number }): Promise<string>;
  close(): Promise<void>;
}

/**
 * Starts a real gateway on ephemeral ports against a database of its own (shared PKI of the run).
 * `env` overrides any setting. Pass `{ db }` to start a second node on the same database.
 */
export async function startTestGateway(env: Record<string, string> = {}, opts: { db?: TestDatabase; clock?: Clock; faults?: FaultHook } = {}): Promise<TestGateway> {
  const db = opts.db ?? (await createTestDatabase());
  const httpPort = env.HTTP_PORT ?? String(await freePort());
  const dataDir = fs.mkdtempSync(path.join(os.tmpdir(), 'gateway-data-'));
  const config = loadConfig({
    HTTP_HOST: '127.0.0.1',
    MQTT_HOST: '127.0.0.1',
    MQTT_PORT: '0',
    CERTS_DIR: inject('certsDir'),
    DATA_DIR: dataDir,
    LOG_LEVEL: process.env.TEST_LOG_LEVEL ?? 'silent',
    PUBLIC_BASE_URL: `http://127.0.0.1:${httpPort}`,
    // tests refuse credentials on purpose; test/http/authFailures.test.ts and authLimits.test.ts set their own limits
    AUTH_FAILURE_LIMIT: '100000',
    AUTH_FAILURE_IDENTIFIER_LIMIT: '100000',
    AUTH_FAILURE_SOURCE_LIMIT: '100000',
    ...env,
    HTTP_PORT: httpPort,
    DATABASE_URL: db.url,
  });
  const { services: _wired, ...running } = await startGateway(config, { log: createLogger(config.LOG_LEVEL, false), clock: opts.clock, faults: opts.faults });
  const http = new HttpClient(running.httpUrl);
  return {
    ...running,
    db,
    http,
    token: async (input) => {
      const res = await http.post('/dev/token', input);
      if (res.status !== 200) throw new Error(`dev token failed: ${res.status} ${res.text}`);
      return (res.body as { access_token: string }).access_token;
    },
    async close() {
      await recordStatuses(running.httpUrl); // only with STATUS_LOG set (issue 39: test/helpers/statusLog.ts)
      await running.stop();
      if (!opts.db) await db.drop();
      fs.rmSync(dataDir, { recursive: true, force: true });
    },
  };
}

export interface HttpResponse<T = any> {
  status: number;
  headers: Headers;
  body: T;
  text: string;
}

export interface RequestOptions {
  token?: string;
  headers?: Record<string, string>;
  /** raw body (string), sent as is */
  raw?: string;
}

/** A small fetch wrapper: JSON in, JSON (or text) out. */
export class HttpClient {
  constructor(readonly baseUrl: string) {}

  async request<T = any>(method: string, url: string, body?: unknown, opts: RequestOptions = {}): Promise<HttpResponse<T>> {
    const headers: Record<string, string> = { ...opts.headers };
    if (opts.token) headers.authorization = `Bearer ${opts.token}`;
    let payload: string | undefined;
    if (opts.raw !== undefined) payload = opts.raw;
    else if (body !== undefined) payload = JSON.stringify(body);
    if (payload !== undefined && !Object.keys(headers).some((h) => h.toLowerCase() === 'content-type')) headers['content-type'] = 'application/json';
    const res = await fetch(this.baseUrl + url, { method, headers, body: payload });
    const text = await res.text();
    let parsed: unknown = text;
    if (/json/.test(res.headers.get('content-type') ?? '') && text) parsed = JSON.parse(text);
    return { status: res.status, headers: res.headers, body: parsed as T, text };
  }

  get<T = any>(url: string, opts?: RequestOptions) { return this.request<T>('GET', url, undefined, opts); }
  post<T = any>(url: string, body?: unknown, opts?: RequestOptions) { return this.request<T>('POST', url, body, opts); }
  put<T = any>(url: string, body?: unknown, opts?: RequestOptions) { return this.request<T>('PUT', url, body, opts); }
  patch<T = any>(url: string, body?: unknown, opts?: RequestOptions) { return this.request<T>('PATCH', url, body, opts); }
  delete<T = any>(url: string, opts?: RequestOptions) { return this.request<T>('DELETE', url, undefined, opts); }
}

/** Asserts the RFC 9457 shape every error response must have; returns the body. */
export function expectProblem(res: HttpResponse, status: number): Record<string, any> {
  if (res.status !== status) throw new Error(`expected ${status}, got ${res.status}: ${res.text}`);
  const type = res.headers.get('content-type') ?? '';
  if (!type.startsWith('application/problem+json')) throw new Error(`expected application/problem+json, got ${type}`);
  const b = res.body as Record<string, any>;
  for (const k of ['type', 'title', 'status', 'detail', 'instance', 'trace_id']) {
    if (b[k] === undefined || b[k] === '') throw new Error(`problem body lacks ${k}: ${res.text}`);
  }
  if (b.status !== status) throw new Error(`problem status ${b.status} != ${status}`);
  return b;
}
