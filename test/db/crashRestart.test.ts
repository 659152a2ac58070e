import { spawn, type ChildProcess } from 'node:child_process';
import crypto from 'node:crypto';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import postgres from 'postgres';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { inject } from 'vitest';
import { freePort } from '../../src/db/embedded.js';
import { INTERNAL_SECRET_FILE } from '../../src/pki/internalSecret.js';
import { HttpClient } from '../helpers/gateway.js';
import { waitFor } from '../helpers/wait.js';
import { compiled } from '../helpers/compiled.js';

/**
 * Crashes of a gateway running the EMBEDDED PostgreSQL (no DATABASE_URL), over real processes:
 * the gateway is `node src/main.js` of the run's compiled sources (one process, so SIGKILL hits the
 * gateway itself) on a DATA_DIR of its own.
 */
let dataDir: string;
let httpPort: number;
let pgPort: number;
let http: HttpClient;
const children: ChildProcess[] = [];

interface Gateway {
  proc: ChildProcess;
  output(): string;
  exited: Promise<number | null>;
}

function launch(env: Record<string, string> = {}, opts: { detached?: boolean } = {}): Gateway {
  const { DATABASE_URL: _external, ...base } = process.env; // the embedded database, not the run's
  let output = '';
  const proc = spawn(process.execPath, [compiled('src/main.ts')], {
    env: {
      ...base,
      HTTP_HOST: '127.0.0.1',
      HTTP_PORT: String(httpPort),
      MQTT_HOST: '127.0.0.1',
      MQTT_PORT: '0',
      EMBEDDED_PG_PORT: String(pgPort),
      CERTS_DIR: inject('certsDir'),
      DATA_DIR: dataDir,
      PUBLIC_BASE_URL: `http://127.0.0.1:${httpPort}`,
      LOG_LEVEL: 'info',
      LOG_PRETTY: 'false',
      ...env,
    },
    stdio: ['ignore', 'pipe', 'pipe'],
    detached: opts.detached,
  });
  children.push(proc);
  proc.stdout!.on('data', (d) => (output += d));
  proc.stderr!.on('data', (d) => (output += d));
  const exited = new Promise<number | null>((resolve) => proc.once('exit', (code) => resolve(code)));
  return { proc, output: () => output, exited };
}

async function start(env: Record<string, string> = {}, opts: { detached?: boolean } = {}): Promise<Gateway> {
  const g = launch(env, opts);
  await waitFor(async () => {
    if (g.proc.exitCode !== null) throw new Error(`gateway exited at start (${g.proc.exitCode}):\n${g.output()}`);
    return (await http.get('/readyz')).status === 200;
  }, 120_000, 'gateway ready', 200);
  return g;
}

const alive = (pid: number) => { try { process.kill(pid, 0); return true; } catch { return false; } };
const postmasterPid = () => Number(fs.readFileSync(path.join(dataDir, 'postgres', 'postmaster.pid'), 'utf8').split('\n')[0]);

/** The watchdog shell of a postmaster (Linux /proc). */
function watchdogOf(pgPid: number): number | undefined {
  for (const entry of fs.readdirSync('/proc')) {
    if (!/^\d+$/.test(entry)) continue;
    try {
      const cmd = fs.readFileSync(`/proc/${entry}/cmdline`, 'utf8').split('\0');
      if (cmd.includes('pg-watchdog') && cmd.includes(String(pgPid))) return Number(entry);
    } catch { /* gone */ }
  }
  return undefined;
}

async function token(realm: string, sub: string, roles: string[]): Promise<string> {
  const res = await http.post('/dev/token', { realm, sub, roles });
  expect(res.status).toBe(200);
  return res.body.access_token;
}

/** An account with a claim group; enrolling against it needs no capability. */
async function claimSecret(): Promise<string> {
  const platform = await token('platform', 'root', ['platform-admin']);
  const accountId = crypto.randomUUID();
  expect((await http.post('/platform/v1/accounts', { id: accountId, name: 'crash' }, { token: platform })).status).toBe(201);
  const operator = await token(`acc-${accountId}`, 'op', ['operator']);
  const group = await http.post('/api/v1/things/claim-groups', { name: 'line', maxDevices: 100_000, ttlDays: 1 }, { token: operator });
  expect(group.status).toBe(201);
  return group.body.sharedSecret;
}

/** Enrollment loops until the gateway dies; returns the thing ids whose enrollment was acknowledged (200). */
function enrollUntilFailure(secret: string, loops: number, acknowledged: string[]): Promise<void> {
  const loop = async () => {
    for (;;) {
      const serial = `SN-${crypto.randomUUID()}`;
      let res;
      try {
        res = await http.post('/ddi/v1/enroll', { provisioningMethod: 'claim_token', claimSecret: secret, manufacturer: 'Acme', model: 'crash-1', serial });
      } catch {
        return; // the gateway is gone
      }
      if (res.status !== 200) throw new Error(`enroll: ${res.status} ${res.text}`);
      acknowledged.push(res.body.twinTopicPrefix.slice('devices/'.length));
    }
  };
  return Promise.all(Array.from({ length: loops }, loop)).then(() => {});
}

async function enrolledThings(ids: string[]): Promise<Set<string>> {
  const sql = postgres(`postgres://gateway:gateway@127.0.0.1:${pgPort}/gateway`, { max: 1, onnotice: () => {} });
  try {
    const rows = await sql<{ id: string }[]>`select id from things where id = any(${ids}::uuid[]) and enrolled_at is not null`;
    return new Set(rows.map((r) => r.id));
  } finally {
    await sql.end();
  }
}

beforeAll(async () => {
  dataDir = fs.mkdtempSync(path.join(os.tmpdir(), 'gw-crash-'));
  httpPort = await freePort();
  pgPort = await freePort();
  http = new HttpClient(`http://127.0.0.1:${httpPort}`);
});
afterAll(async () => {
  for (const c of children) if (c.exitCode === null && c.signalCode === null) c.kill('SIGKILL');
  // a postmaster a failed test left behind
  try { process.kill(postmasterPid(), 'SIGQUIT'); } catch { /* none */ }
  await waitFor(() => !fs.existsSync(path.join(dataDir, 'postgres', 'postmaster.pid')), 20_000, 'postgres stopped').catch(() => {});
  fs.rmSync(dataDir, { recursive: true, force: true });
});

describe('crash restart with the embedded PostgreSQL', () => {
  it('the first start on a new data directory (initdb) keeps its signal handlers: SIGTERM shuts it down cleanly', async () => {
    // runs first: dataDir is still empty, so this start runs initdb
    expect(fs.readdirSync(dataDir)).toEqual([]);
    // a certificates folder without an internal secret (the run's PKI copied, so no RSA generation)
    const certs = path.join(dataDir, 'certs');
    fs.cpSync(inject('certsDir'), certs, { recursive: true, filter: (src) => !src.endsWith(INTERNAL_SECRET_FILE) });
    const g = await start({ CERTS_DIR: certs });
    expect(fs.existsSync(path.join(dataDir, 'postgres', 'PG_VERSION'))).toBe(true); // initialised by this start
    // issue 32: the broker hook answers on the embedded default with the secret this start generated
    const secretFile = path.join(certs, INTERNAL_SECRET_FILE);
    expect(fs.statSync(secretFile).mode & 0o777).toBe(0o600);
    // /readyz answers before the start has finished: the banner comes once it has
    await waitFor(() => g.output().includes('X-Internal-Secret: the contents of'), 60_000, 'the start-up banner');
    expect(g.output()).toContain(`X-Internal-Secret: the contents of ${secretFile}`);
    const secret = fs.readFileSync(secretFile, 'utf8').trim();
    const ids = { clientid: 'c', username: 'c', cert_cn: 'c' };
    expect((await http.post('/ddi/v1/authn/emqx', ids, { headers: { 'x-internal-secret': secret } })).body).toEqual({ result: 'deny' });
    expect((await http.post('/ddi/v1/authn/emqx', ids)).status).toBe(401);
    g.proc.kill('SIGTERM');
    expect(await g.exited, g.output()).toBe(0);
    expect(g.output()).toContain('shutdown complete');
    expect(fs.existsSync(path.join(dataDir, 'postgres', 'postmaster.pid'))).toBe(false);
  }, 120_000);

  it('SIGKILL under enrollment load: the watchdog stops postgres, a restart serves and keeps every acknowledged enrollment', async () => {
    const first = await start();
    const pgPid = postmasterPid();
    expect(watchdogOf(pgPid)).toBeDefined();
    const secret = await claimSecret();
    const acknowledged: string[] = [];
    const load = enrollUntilFailure(secret, 8, acknowledged);
    await waitFor(() => acknowledged.length >= 40, 60_000, '40 enrollments');
    first.proc.kill('SIGKILL'); // mid-load: requests are in flight
    await load;
    expect(await first.exited).toBe(null); // killed by the signal
    // the watchdog stops the orphaned postmaster; bounded wait, no timing assertion
    await waitFor(() => !alive(pgPid), 60_000, 'embedded postgres stopped after its gateway died', 200);

    const second = await start();
    expect(second.output()).not.toMatch(/"level":(50|60)/);
    const present = await enrolledThings(acknowledged);
    expect(acknowledged.filter((id) => !present.has(id))).toEqual([]);
    // and it serves: a new enrollment on the same claim group
    const res = await http.post('/ddi/v1/enroll', { provisioningMethod: 'claim_token', claimSecret: secret, manufacturer: 'Acme', model: 'crash-1', serial: 'SN-after' });
    expect(res.status).toBe(200);
    second.proc.kill('SIGTERM');
    expect(await second.exited).toBe(0);
  }, 240_000);

  it('a postmaster orphaned with its watchdog is stopped at the next start-up, which then serves', async () => {
    const first = await start();
    const pgPid = postmasterPid();
    const watchdog = watchdogOf(pgPid);
    expect(watchdog).toBeDefined();
    process.kill(watchdog!, 'SIGKILL');
    first.proc.kill('SIGKILL');
    await first.exited;
    await new Promise((r) => setTimeout(r, 500));
    expect(alive(pgPid)).toBe(true); // orphaned: what an older gateway left behind

    const second = await start();
    expect(alive(pgPid)).toBe(false);
    expect(second.output()).toContain(`stopping the embedded PostgreSQL (pid ${pgPid})`);
    expect(postmasterPid()).not.toBe(pgPid);
    expect((await http.get('/readyz')).status).toBe(200);

    // a second gateway on the same DATA_DIR must not take the running one's database away
    const intruder = launch({ HTTP_PORT: String(await freePort()) });
    expect(await intruder.exited).toBe(1);
    const fatal = intruder.output().split('\n').find((l) => l.includes('"level":60'));
    expect(fatal, intruder.output()).toBeDefined();
    const entry = JSON.parse(fatal!);
    expect(entry.msg).toContain('belongs to a running gateway');
    expect(entry.hint).toMatch(/stop that gateway first, or give this one another DATA_DIR/);
    expect((await http.get('/readyz')).status).toBe(200);

    second.proc.kill('SIGTERM');
    expect(await second.exited).toBe(0);
  }, 240_000);

  it('a postmaster.pid naming a live process that is not PostgreSQL (pid reused) is removed', async () => {
    const lockFile = path.join(dataDir, 'postgres', 'postmaster.pid');
    expect(fs.existsSync(lockFile)).toBe(false); // the previous test stopped cleanly
    const other = spawn('sleep', ['120'], { stdio: 'ignore' });
    children.push(other);
    fs.writeFileSync(lockFile, `${other.pid}\n${path.join(dataDir, 'postgres')}\n`);
    const g = await start();
    expect(g.output()).toContain(`removing stale ${lockFile} (pid ${other.pid} is another process now)`);
    expect(alive(other.pid!)).toBe(true); // left alone
    expect(postmasterPid()).not.toBe(other.pid);
    g.proc.kill('SIGTERM');
    expect(await g.exited).toBe(0);
    other.kill('SIGKILL');
  }, 120_000);

  it('Ctrl-C while the gateway is still starting stops it cleanly once it has started', async () => {
    const g = launch({}, { detached: true });
    // the HTTP server listens (and /readyz answers) before the start has finished
    await waitFor(() => g.output().includes('Server listening'), 120_000, 'HTTP listening', 20);
    process.kill(-g.proc.pid!, 'SIGINT');
    expect(await g.exited, g.output()).toBe(0);
    expect(g.output()).toContain('shutdown complete');
    expect(g.output()).not.toMatch(/"level":(50|60)/);
    expect(fs.existsSync(path.join(dataDir, 'postgres', 'postmaster.pid'))).toBe(false); // the database stopped with it
  }, 120_000);

  it('Ctrl-C in a terminal (SIGINT to the whole process group) shuts down cleanly, postgres last', async () => {
    const g = await start({}, { detached: true }); // its own process group, like a terminal job
    const pgPid = postmasterPid();
    process.kill(-g.proc.pid!, 'SIGINT');
    expect(await g.exited, g.output()).toBe(0);
    expect(g.output()).toContain('shutdown complete');
    expect(g.output()).not.toMatch(/"level":(50|60)/); // no failed step: the database was up until the end
    expect(alive(pgPid)).toBe(false);
  }, 120_000);
});
