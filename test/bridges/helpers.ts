import { spawn, type ChildProcess } from 'node:child_process';
import crypto from 'node:crypto';
import fs from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { freePort } from '../../src/db/embedded.js';
import { waitFor } from '../helpers/wait.js';
import { connect, type NatsConnection } from '@nats-io/transport-node';
import { jetstreamManager, type JetStreamManager } from '@nats-io/jetstream';
import type { TestGateway } from '../helpers/gateway.js';
import type { TestAccount } from '../helpers/accounts.js';

export const NATS_URL = 'nats://127.0.0.1:4222';
export const AMQP_URL = 'amqp://guest:guest@127.0.0.1:5672';
export const NATS_SERVER = '/usr/sbin/nats-server';

/** Does something accept TCP connections on 127.0.0.1:`port`? */
export function listening(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const s = net.connect({ host: '127.0.0.1', port }, () => { s.destroy(); resolve(true); });
    s.on('error', () => resolve(false));
    s.setTimeout(1000, () => { s.destroy(); resolve(false); });
  });
}

/** Debian's nats-server -js on a free port with its own store (started by the test, stopped by it). */
export class NatsServer {
  private proc?: ChildProcess;
  private constructor(readonly port: number, readonly storeDir: string) {}

  static async start(): Promise<NatsServer> {
    const s = new NatsServer(await freePort(), fs.mkdtempSync(path.join(os.tmpdir(), 'nats-store-')));
    await s.start();
    return s;
  }

  get url(): string {
    return `nats://127.0.0.1:${this.port}`;
  }

  /** (Re)starts it on the same port and store: its streams survive a restart. */
  async start(): Promise<void> {
    const p = spawn(NATS_SERVER, ['-js', '-a', '127.0.0.1', '-p', String(this.port), '-sd', this.storeDir], { stdio: 'ignore' });
    this.proc = p;
    await waitFor(async () => {
      if (p.exitCode !== null) throw new Error(`nats-server exited (${p.exitCode})`);
      return listening(this.port);
    }, 15_000, 'nats-server up', 100);
  }

  async stop(): Promise<void> {
    const p = this.proc;
    this.proc = undefined;
    if (!p || p.exitCode !== null) return;
    const gone = new Promise((resolve) => p.once('exit', resolve));
    p.kill('SIGTERM');
    await gone;
  }

  async close(): Promise<void> {
    await this.stop();
    fs.rmSync(this.storeDir, { recursive: true, force: true });
  }
}

/**
 * The NATS JetStream sink of a test: the machine's (127.0.0.1:4222) where it is up, else a
 * nats-server -js the test starts (undefined when neither: the test skips).
 */
export async function natsSink(): Promise<{ url: string; close: () => Promise<void> } | undefined> {
  if (await listening(4222)) return { url: NATS_URL, close: async () => {} };
  if (!fs.existsSync(NATS_SERVER)) return undefined;
  const s = await NatsServer.start();
  return { url: s.url, close: () => s.close() };
}

export interface CloudEvent {
  specversion: string; id: string; source: string; type: string; time: string; subject: string;
  account: string; kind: string; rule: string; data: Record<string, unknown>;
}

/** A JetStream stream capturing `<prefix>.>` on a NATS server, and its messages read back in order. */
export class TestStream {
  private constructor(readonly nc: NatsConnection, readonly jsm: JetStreamManager, readonly name: string, readonly prefix: string) {}

  static async create(url = NATS_URL, prefix = `t${crypto.randomBytes(4).toString('hex')}`): Promise<TestStream> {
    const u = new URL(url);
    const nc = await connect({ servers: `${u.hostname}:${u.port}`, reconnect: true, maxReconnectAttempts: -1, reconnectTimeWait: 200 });
    const jsm = await jetstreamManager(nc);
    const name = prefix.toUpperCase();
    await jsm.streams.add({ name, subjects: [`${prefix}.>`] });
    return new TestStream(nc, jsm, name, prefix);
  }

  /** An existing stream (its server restarted). */
  static async attach(url: string, name: string, prefix: string): Promise<TestStream> {
    const u = new URL(url);
    const nc = await connect({ servers: `${u.hostname}:${u.port}` });
    return new TestStream(nc, await jetstreamManager(nc), name, prefix);
  }

  async count(): Promise<number> {
    return (await this.jsm.streams.info(this.name)).state.messages;
  }

  /** Every message of the stream, in stream order, parsed. */
  async events(): Promise<(CloudEvent & { _subject: string })[]> {
    const n = await this.count();
    const out: (CloudEvent & { _subject: string })[] = [];
    for (let seq = 1; seq <= n; seq++) {
      const m = await this.jsm.streams.getMessage(this.name, { seq });
      if (m) out.push({ ...(m.json() as CloudEvent), _subject: m.subject });
    }
    return out;
  }

  /** Every message of the stream as stored: subject, Nats-Msg-Id and body text. */
  async raw(): Promise<{ subject: string; msgId: string | undefined; text: string }[]> {
    const n = await this.count();
    const out: { subject: string; msgId: string | undefined; text: string }[] = [];
    for (let seq = 1; seq <= n; seq++) {
      const m = await this.jsm.streams.getMessage(this.name, { seq });
      if (m) out.push({ subject: m.subject, msgId: m.header?.get('Nats-Msg-Id'), text: m.string() });
    }
    return out;
  }

  async close(): Promise<void> {
    await this.jsm.streams.delete(this.name).catch(() => {});
    await this.nc.close().catch(() => {});
  }
}

export async function createBridge(gw: TestGateway, account: TestAccount, body: Record<string, unknown>): Promise<string> {
  const res = await gw.http.post('/api/v1/bridges', { name: `b-${crypto.randomUUID().slice(0, 8)}`, ...body }, { token: account.operator });
  if (res.status !== 201) throw new Error(`bridge: ${res.status} ${res.text}`);
  return res.body.id as string;
}

export async function createRule(gw: TestGateway, account: TestAccount, body: Record<string, unknown>): Promise<string> {
  const res = await gw.http.post('/api/v1/rules', { name: `r-${crypto.randomUUID().slice(0, 8)}`, ...body }, { token: account.operator });
  if (res.status !== 201) throw new Error(`rule: ${res.status} ${res.text}`);
  return res.body.id as string;
}

export async function rule(gw: TestGateway, account: TestAccount, id: string): Promise<any> {
  const res = await gw.http.get(`/api/v1/rules/${id}`, { token: account.viewer });
  if (res.status !== 200) throw new Error(`rule: ${res.status} ${res.text}`);
  return res.body;
}
