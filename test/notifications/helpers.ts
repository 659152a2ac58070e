import http from 'node:http';
import WebSocket from 'ws';
import type { TestGateway } from '../helpers/gateway.js';

export interface SseEvent {
  id?: string;
  event?: string;
  data: string;
  comment?: string;
}

/** A minimal EventSource over a real HTTP connection: parses frames as they arrive. */
export class SseClient {
  readonly events: SseEvent[] = [];
  readonly comments: string[] = [];
  status = 0;
  headers: http.IncomingHttpHeaders = {};
  body = '';
  private req?: http.ClientRequest;
  private res?: http.IncomingMessage;
  private waiters: (() => void)[] = [];
  ended = false;

  static async open(url: string, headers: Record<string, string>): Promise<SseClient> {
    const c = new SseClient();
    await new Promise<void>((resolve, reject) => {
      c.req = http.get(url, { headers: { accept: 'text/event-stream', ...headers }, agent: false }, (res) => {
        c.res = res;
        c.status = res.statusCode ?? 0;
        c.headers = res.headers;
        res.setEncoding('utf8');
        let buf = '';
        res.on('data', (chunk: string) => {
          if (c.status !== 200) {
            c.body += chunk;
            return;
          }
          buf += chunk;
          let idx: number;
          while ((idx = buf.indexOf('\n\n')) >= 0) {
            const frame = buf.slice(0, idx);
            buf = buf.slice(idx + 2);
            c.parse(frame);
          }
          c.wake();
        });
        res.on('end', () => {
          c.ended = true;
          c.wake();
        });
        res.on('close', () => {
          c.ended = true;
          c.wake();
        });
        if (c.status !== 200) res.on('end', () => resolve());
        else resolve();
      });
      c.req.on('error', reject);
    });
    return c;
  }

  private parse(frame: string) {
    const ev: SseEvent = { data: '' };
    const data: string[] = [];
    let hasField = false;
    for (const line of frame.split('\n')) {
      if (line.startsWith(':')) {
        this.comments.push(line.slice(1).trim());
        continue;
      }
      const i = line.indexOf(':');
      const field = i < 0 ? line : line.slice(0, i);
      const value = i < 0 ? '' : line.slice(i + 1).replace(/^ /, '');
      hasField = true;
      if (field === 'id') ev.id = value;
      else if (field === 'event') ev.event = value;
      else if (field === 'data') data.push(value);
    }
    if (!hasField || data.length === 0) return;
    ev.data = data.join('\n');
    this.events.push(ev);
  }

  private wake() {
    for (const w of this.waiters.splice(0)) w();
  }

  /** Waits until `check` holds (re-evaluated on every chunk) or times out. */
  async until<T>(check: () => T, what: string, timeoutMs = 10_000): Promise<NonNullable<T>> {
    const deadline = Date.now() + timeoutMs;
    for (;;) {
      const v = check();
      if (v) return v as NonNullable<T>;
      const left = deadline - Date.now();
      if (left <= 0) throw new Error(`SSE: timed out waiting for ${what}; got ${JSON.stringify(this.events)}`);
      await new Promise<void>((resolve) => {
        const t = setTimeout(resolve, Math.min(left, 200));
        this.waiters.push(() => {
          clearTimeout(t);
          resolve();
        });
      });
    }
  }

  notifications() {
    return this.events.filter((e) => e.event === 'notification').map((e) => ({ eventId: e.id, ...JSON.parse(e.data) }));
  }

  close() {
    this.req?.destroy();
    this.res?.destroy();
  }
}

/** POST stream/auth and return the cookie pair `name=value` plus the raw Set-Cookie header. */
export async function streamCookie(gw: TestGateway, token: string, accountId?: string, prefix = '/console/notifications') {
  const res = await gw.http.post(`${prefix}/stream/auth`, undefined, { token, headers: accountId ? { 'x-account-id': accountId } : {} });
  if (res.status !== 204) throw new Error(`stream auth failed: ${res.status} ${res.text}`);
  const setCookie = res.headers.get('set-cookie') ?? '';
  return { cookie: setCookie.split(';')[0], setCookie };
}

export class WsClient {
  readonly messages: any[] = [];
  constructor(readonly ws: WebSocket) {
    ws.on('message', (m) => this.messages.push(JSON.parse(String(m))));
  }

  static open(url: string, headers: Record<string, string>): Promise<WsClient | { status: number }> {
    return new Promise((resolve, reject) => {
      const ws = new WebSocket(url, { headers });
      const c = new WsClient(ws);
      ws.once('open', () => resolve(c));
      ws.once('unexpected-response', (_req, res) => {
        resolve({ status: res.statusCode ?? 0 });
        res.resume();
      });
      ws.once('error', reject);
    });
  }

  async until<T>(check: () => T, what: string, timeoutMs = 10_000): Promise<NonNullable<T>> {
    const deadline = Date.now() + timeoutMs;
    for (;;) {
      const v = check();
      if (v) return v as NonNullable<T>;
      if (Date.now() > deadline) throw new Error(`WS: timed out waiting for ${what}; got ${JSON.stringify(this.messages)}`);
      await new Promise((r) => setTimeout(r, 25));
    }
  }

  close() {
    this.ws.close();
  }
}

export const publisherToken = (gw: TestGateway, sub = 'publisher-svc') => gw.token({ realm: 'platform', sub, roles: ['notification-publisher'] });

/** A human of account `accountId` (acc realm) with the viewer role. */
export const userToken = (gw: TestGateway, accountId: string, sub: string) => gw.token({ realm: `acc-${accountId}`, sub, roles: ['viewer'] });
