import type { ChildProcess } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { freePort } from '../../src/db/embedded.js';
import { createTestDatabase, type TestDatabase } from './db.js';
import { HttpClient } from './gateway.js';
import { spawnGateway, type GatewayProcess } from './process.js';

export const exited = (p: ChildProcess) => new Promise<number | null>((resolve) => (p.exitCode !== null ? resolve(p.exitCode) : p.once('exit', (code) => resolve(code))));

/**
 * What a crash test needs: one database, port and data folder that successive gateway processes
 * share, each started by test/helpers/faultyGateway.ts (FAULT_INJECT=<point> exits with code 86
 * right after that step commits).
 */
export class CrashRig {
  current?: GatewayProcess;
  private constructor(readonly db: TestDatabase, readonly port: number, readonly dataDir: string, readonly http: HttpClient, private readonly env: Record<string, string>) {}

  static async create(name: string, env: Record<string, string> = {}): Promise<CrashRig> {
    const port = await freePort();
    return new CrashRig(await createTestDatabase(), port, fs.mkdtempSync(path.join(os.tmpdir(), `gw-${name}-`)), new HttpClient(`http://127.0.0.1:${port}`), env);
  }

  get child(): ChildProcess | undefined {
    return this.current?.proc;
  }

  /** Starts a gateway process (stopping none: the previous one has crashed or been stopped). */
  async start(fault?: string): Promise<ChildProcess> {
    this.current = await spawnGateway({ ...this.env, DATABASE_URL: this.db.url, HTTP_PORT: String(this.port), DATA_DIR: this.dataDir, FAULT_INJECT: fault ?? '' }, 'test/helpers/faultyGateway.ts');
    return this.current.proc;
  }

  /** Stops the running process, if any (SIGTERM). */
  async stop(): Promise<void> {
    const child = this.child;
    if (child && child.exitCode === null) {
      child.kill('SIGTERM');
      await exited(child);
    }
  }

  /** A development token from the running process. */
  async token(realm: string, sub: string, roles: string[]): Promise<string> {
    const res = await this.http.post('/dev/token', { realm, sub, roles });
    if (res.status !== 200) throw new Error(`dev token failed: ${res.status} ${res.text}`);
    return res.body.access_token;
  }

  async close(): Promise<void> {
    await this.stop();
    await this.db.drop();
    fs.rmSync(this.dataDir, { recursive: true, force: true });
  }
}
