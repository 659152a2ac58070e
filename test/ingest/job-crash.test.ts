import type { ChildProcess } from 'node:child_process';
import crypto from 'node:crypto';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { freePort } from '../../src/db/embedded.js';
import { createTestDatabase, type TestDatabase } from '../helpers/db.js';
import { HttpClient } from '../helpers/gateway.js';
import { waitFor } from '../helpers/wait.js';
import { spawnGateway } from '../helpers/process.js';
import { P, stock } from './helpers.js';

/**
 * A bulk job survives a crash: the gateway runs as a child process (test/helpers/faultyGateway.ts)
 * that exits right after the job's first chunk commits; the restarted process queues the job
 * again at start and it resumes from that chunk, counting every item exactly once.
 */
let db: TestDatabase;
let port: number;
let dataDir: string;
let child: ChildProcess | undefined;
let http: HttpClient;

const exited = (p: ChildProcess) => new Promise<number | null>((resolve) => (p.exitCode !== null ? resolve(p.exitCode) : p.once('exit', (code) => resolve(code))));

async function start(fault = ''): Promise<ChildProcess> {
  const started = await spawnGateway({ DATABASE_URL: db.url, HTTP_PORT: String(port), DATA_DIR: dataDir, FAULT_INJECT: fault }, 'test/helpers/faultyGateway.ts');
  child = started.proc;
  return child;
}

beforeAll(async () => {
  db = await createTestDatabase();
  port = await freePort();
  dataDir = fs.mkdtempSync(path.join(os.tmpdir(), 'gw-ingest-crash-'));
  http = new HttpClient(`http://127.0.0.1:${port}`);
});
afterAll(async () => {
  if (child && child.exitCode === null) {
    child.kill('SIGTERM');
    await exited(child);
  }
  await db?.drop();
  if (dataDir) fs.rmSync(dataDir, { recursive: true, force: true });
});

describe('bulk job durability', () => {
  it('crashes after the first chunk and resumes after restart with exact counts', async () => {
    const p = await start('ingest.job.chunk');
    const accountId = crypto.randomUUID();
    const platform = (await http.post('/dev/token', { realm: 'platform', sub: 'root', roles: ['platform-admin'] })).body.access_token;
    expect((await http.post('/platform/v1/accounts', { id: accountId, name: 'crashy' }, { token: platform })).status).toBe(201);
    const admin = (await http.post('/dev/token', { realm: `acc-${accountId}`, sub: 'admin', roles: ['admin'] })).body.access_token;
    expect((await http.put(`${P}/warehouses/WH-1`, { name: 'one' }, { token: admin })).status).toBe(201);

    const N = 12_000; // three chunks of 5000
    const items = Array.from({ length: N }, (_, i) => stock(i, i % 10 === 0 ? { quantity: -1 } : {}));
    const res = await http.post(`${P}/jobs`, { partner_id: accountId, correlation_id: 'crash-1', mode: 'DELTA', warehouse_id: 'WH-1', resource: 'stock', items }, { token: admin });
    expect(res.status).toBe(202);
    expect(await exited(p)).toBe(86);
    const [mid] = await db.sql<{ state: string; processed_through: number; quarantined: number }[]>`select state, processed_through, quarantined from ingest_jobs where id = ${res.body.job_id}`;
    expect(mid).toEqual({ state: 'RUNNING', processed_through: 5000, quarantined: 500 });

    await start();
    const done = await waitFor(async () => {
      const j = (await http.get(`${P}/jobs/${res.body.job_id}`, { token: admin })).body;
      return j.state === 'COMPLETED_WITH_ERRORS' ? j : undefined;
    }, 30_000, 'job resumed');
    expect(done).toMatchObject({ processed_items: N, accepted: N - N / 10, quarantined: N / 10, rejected: 0 });
    const [counts] = await db.sql<{ records: number; held: number; errors: number }[]>`
      select (select count(*)::int from ingest_records) as records, (select count(*)::int from ingest_quarantine) as held,
        (select count(*)::int from ingest_job_errors) as errors`;
    expect(counts).toEqual({ records: N - N / 10, held: N / 10, errors: N / 10 });
  });
});
