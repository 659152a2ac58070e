import fs from 'node:fs';
import net from 'node:net';
import path from 'node:path';
import type { Logger } from '../log.js';

/** how long one admin-socket command may take */
export const COMMAND_TIMEOUT_MS = 3_000;
/** first wait before a failed push is tried again; doubled up to RETRY_MAX_MS */
export const RETRY_FIRST_MS = 1_000;
export const RETRY_MAX_MS = 30_000;

export interface HaproxyRuntimeOptions {
  /** admin sockets: a unix socket path, or host:port (`stats socket ... level admin`) */
  sockets: readonly string[];
  /** the crl-file name as HAProxy's configuration gives it (the CA-file store entry the pushes replace) */
  crlFile: string;
  log: Logger;
  commandTimeoutMs?: number;
}

/** One command on HAProxy's runtime API (non-interactive: the answer ends when HAProxy closes). */
export function runtimeCommand(address: string, command: string, timeoutMs = COMMAND_TIMEOUT_MS): Promise<string> {
  return new Promise((resolve, reject) => {
    const hostPort = /^(.+):(\d+)$/.exec(address);
    const socket = hostPort && !address.includes('/') ? net.connect(Number(hostPort[2]), hostPort[1].replace(/^\[|\]$/g, '')) : net.connect(address);
    let answer = '';
    const timer = setTimeout(() => socket.destroy(new Error(`HAProxy runtime API at ${address} did not answer within ${timeoutMs} ms`)), timeoutMs);
    socket.setEncoding('utf8');
    socket.on('data', (d: string) => (answer += d));
    socket.on('error', (err) => {
      clearTimeout(timer);
      reject(err);
    });
    socket.on('close', (hadError) => {
      clearTimeout(timer);
      if (!hadError) resolve(answer);
    });
    socket.end(command.endsWith('\n') ? command : `${command}\n`);
  });
}

/**
 * Keeps HAProxy's copy of the CRL (its `crl-file`, with which it checks device certificates at
 * the TLS handshake in front of MQTT_PROXY_PORT) equal to the broker's: every CRL the broker loads
 * is pushed over each admin socket with `set ssl crl-file <file> <<` + the PEM, then `commit ssl
 * crl-file <file>` (HAProxy 2.5+), and written to the file when it is on this machine (so an
 * HAProxy restart loads the current one). `push` resolves once every socket answered or failed;
 * it never throws: a failure is logged and that socket is tried again (1 s, doubling to 30 s)
 * with the newest CRL until it takes it.
 */
export class HaproxyRuntime {
  private latest?: string;
  private latestSerials: readonly string[] = [];
  private readonly retries = new Map<string, { timer: NodeJS.Timeout; delay: number }>();
  /** pushes that failed and were not yet followed by a success, per socket (for /metrics and tests) */
  readonly failures = new Map<string, number>();
  private stopped = false;

  constructor(private readonly options: HaproxyRuntimeOptions) {}

  /**
   * Pushes `pem` (one or more PEM CRLs) to every socket; resolves when each took it or failed.
   * `serials` (hex): the revoked serials it lists, checked in HAProxy's copy after the commit (a
   * transaction is per file, not per client: another node's concurrent push of an older CRL may
   * have been the one committed; then it is pushed again, at most 3 times in a row).
   */
  async push(pem: string, serials: readonly string[] = []): Promise<void> {
    this.latest = pem;
    this.latestSerials = serials;
    // a new push starts each failed socket's backoff again (it is tried now)
    for (const { timer } of this.retries.values()) clearTimeout(timer);
    this.retries.clear();
    this.writeFile(pem);
    await Promise.all(this.options.sockets.map((socket) => this.pushTo(socket, pem, serials)));
  }

  private async pushTo(socket: string, pem: string, serials: readonly string[]): Promise<boolean> {
    const { crlFile, log } = this.options;
    try {
      for (let attempt = 1; ; attempt++) {
        await this.setAndCommit(socket, pem);
        const missing = await this.missingSerials(socket, serials);
        if (missing === 0) break;
        if (attempt === 3) throw new Error(`HAProxy's ${crlFile} lacks ${missing} revoked serials after the commit (concurrent pushes of another CRL?)`);
      }
      const retry = this.retries.get(socket);
      if (retry) clearTimeout(retry.timer);
      this.retries.delete(socket);
      this.failures.delete(socket);
      return true;
    } catch (err) {
      this.failures.set(socket, (this.failures.get(socket) ?? 0) + 1);
      log.error({ err, socket, crlFile }, 'could not push the CRL to HAProxy; retrying');
      this.scheduleRetry(socket);
      return false;
    }
  }

  private async setAndCommit(socket: string, pem: string): Promise<void> {
    const { crlFile } = this.options;
    const body = pem.trim().split(/\r?\n/).filter((line) => line.trim() !== '').join('\n');
    const set = await runtimeCommand(socket, `set ssl crl-file ${crlFile} <<\n${body}\n\n`, this.options.commandTimeoutMs);
    if (!/transaction (created|updated)/i.test(set)) throw new Error(`set ssl crl-file: ${set.trim() || 'no answer'}`);
    const commit = await runtimeCommand(socket, `commit ssl crl-file ${crlFile}`, this.options.commandTimeoutMs);
    if (!/success/i.test(commit)) throw new Error(`commit ssl crl-file: ${commit.trim() || 'no answer'}`);
  }

  /** How many of `serials` HAProxy's committed copy of the file does not list (`show ssl crl-file`). */
  private async missingSerials(socket: string, serials: readonly string[]): Promise<number> {
    if (serials.length === 0) return 0;
    const shown = await runtimeCommand(socket, `show ssl crl-file ${this.options.crlFile}`, this.options.commandTimeoutMs);
    const listed = new Set([...shown.matchAll(/Serial Number:\s*([0-9A-Fa-f]+)/g)].map((m) => m[1].toLowerCase().replace(/^0+(?=.)/, '')));
    return serials.filter((s) => !listed.has(s.toLowerCase().replace(/^0+(?=.)/, ''))).length;
  }

  private scheduleRetry(socket: string): void {
    if (this.stopped) return;
    const previous = this.retries.get(socket);
    if (previous) clearTimeout(previous.timer);
    const delay = previous ? Math.min(previous.delay * 2, RETRY_MAX_MS) : RETRY_FIRST_MS;
    const timer = setTimeout(() => {
      if (this.latest !== undefined) void this.pushTo(socket, this.latest, this.latestSerials);
    }, delay);
    timer.unref();
    this.retries.set(socket, { timer, delay });
  }

  /** The file HAProxy loads at its start, when its directory is on this machine (atomically: a new file renamed over it). */
  private writeFile(pem: string): void {
    const file = this.options.crlFile;
    if (!path.isAbsolute(file) || !fs.existsSync(path.dirname(file))) return;
    try {
      const tmp = `${file}.${process.pid}.tmp`;
      fs.writeFileSync(tmp, pem, { mode: 0o644 });
      fs.renameSync(tmp, file);
    } catch (err) {
      this.options.log.warn({ err, file }, 'could not write the CRL file HAProxy loads at start');
    }
  }

  stop(): void {
    this.stopped = true;
    for (const { timer } of this.retries.values()) clearTimeout(timer);
    this.retries.clear();
  }
}
