import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import WebSocket from 'ws';
import { loadConfig } from '../../src/config.js';
import { createAccount, type TestAccount } from '../helpers/accounts.js';
import { enrollDevice } from '../helpers/devices.js';
import { startTestGateway, type TestGateway } from '../helpers/gateway.js';
import { publisherToken, streamCookie, userToken } from '../notifications/helpers.js';

/**
 * Cross-site WebSocket hijacking: a browser page of another origin opening a stream with the
 * victim's cookie (or any other credential) is refused with a 403 problem before the upgrade, on
 * every WebSocket route; the console's own origin, WS_ALLOWED_ORIGINS and clients that send no
 * Origin (not a browser page) are served.
 */
let gw: TestGateway;
let A: TestAccount;
let cookie: string;
let thingId: string;
let own: string;
let wsBase: string;

beforeAll(async () => {
  gw = await startTestGateway({ WS_ALLOWED_ORIGINS: 'https://partner.example, http://localhost:3000' });
  A = await createAccount(gw, { capabilities: ['enroll_things'] });
  cookie = (await streamCookie(gw, await userToken(gw, A.id, 'alice'), A.id)).cookie;
  thingId = (await enrollDevice(gw, A, { via: 'token' })).thingId;
  own = new URL(gw.gw.config.PUBLIC_BASE_URL).origin;
  wsBase = gw.httpUrl.replace(/^http/, 'ws');
});
afterAll(() => gw?.close());

type Opened = { ws: WebSocket; messages: any[] } | { status: number; contentType: string; body: any };

/** Opens a WebSocket as a browser would (Origin header, cookie or bearer subprotocol); the refusal's status and body otherwise. */
function open(path: string, o: { origin?: string; cookie?: string; bearer?: string }): Promise<Opened> {
  const ws = new WebSocket(`${wsBase}${path}`, o.bearer ? ['bearer', o.bearer] : [], {
    headers: { ...(o.cookie ? { cookie: o.cookie } : {}), ...(o.origin !== undefined ? { origin: o.origin } : {}) },
  });
  const messages: any[] = [];
  ws.on('message', (m) => messages.push(JSON.parse(String(m))));
  return new Promise((resolve, reject) => {
    ws.once('open', () => resolve({ ws, messages }));
    ws.once('unexpected-response', (_req, res) => {
      let text = '';
      res.on('data', (c) => (text += c));
      res.on('end', () => resolve({ status: res.statusCode ?? 0, contentType: String(res.headers['content-type']), body: JSON.parse(text) }));
    });
    ws.once('error', reject);
  });
}

async function refused(path: string, o: Parameters<typeof open>[1]) {
  const r = await open(path, o);
  if ('ws' in r) {
    r.ws.close();
    throw new Error(`${path} from ${o.origin} was opened`);
  }
  return r;
}

async function opened(path: string, o: Parameters<typeof open>[1]) {
  const r = await open(path, o);
  if (!('ws' in r)) throw new Error(`${path} from ${o.origin} refused: ${r.status} ${JSON.stringify(r.body)}`);
  return r;
}

const FOREIGN = () => ['https://evil.example', 'null', `http://127.0.0.1:${Number(new URL(gw.httpUrl).port) + 1}`, `http://localhost:${new URL(gw.httpUrl).port}`, 'http://partner.example', 'not a url'];

describe('WebSocket origin check', () => {
  it('the notification stream with the stream cookie: 403 problem for a foreign origin (another site, null, another port or host name of the same machine)', async () => {
    for (const prefix of ['/console/notifications', '/api/notifications']) {
      for (const origin of FOREIGN()) {
        const r = await refused(`${prefix}/stream/ws`, { origin, cookie });
        expect(r.status, origin).toBe(403);
        expect(r.contentType).toMatch(/^application\/problem\+json/);
        expect(r.body).toMatchObject({ status: 403, instance: `${prefix}/stream/ws`, type: expect.stringMatching(/\/origin-not-allowed$/) });
        expect(r.body.detail).toContain('not allowed');
        expect(r.body.detail).toContain(JSON.stringify(origin));
      }
    }
  });

  it("the console's own origin and WS_ALLOWED_ORIGINS are served and receive notifications; no Origin (not a browser page) too", async () => {
    const publisher = await publisherToken(gw);
    for (const origin of [own, 'https://partner.example', 'http://localhost:3000', undefined]) {
      const s = await opened('/console/notifications/stream/ws', { origin, cookie });
      const res = await gw.http.post('/api/notifications/publish', { channel: ['in_app'], template: 'general/message', to: { subscriberId: 'alice' }, data: { subject: `from ${origin}`, message: 'm' } }, { token: publisher });
      expect(res.status, res.text).toBe(201);
      const deadline = Date.now() + 10_000;
      while (!s.messages.some((m) => m.data?.notification?.title === `from ${origin}`) && Date.now() < deadline) await new Promise((r) => setTimeout(r, 25));
      expect(s.messages.map((m) => m.data?.notification?.title)).toContain(`from ${origin}`);
      s.ws.close();
    }
  });

  it('the bearer-subprotocol streams (connectivity, telemetry): foreign origins refused, the console origin and no Origin served', async () => {
    for (const path of ['/api/v1/things/connectivity/stream', `/api/v1/things/${thingId}/telemetry/stream`]) {
      for (const origin of FOREIGN()) expect((await refused(path, { origin, bearer: A.viewer })).status, `${path} ${origin}`).toBe(403);
      for (const origin of [own, undefined]) (await opened(path, { origin, bearer: A.viewer })).ws.close();
    }
  });

  it('the origin is judged before the credentials: a foreign page without credentials learns nothing but 403', async () => {
    expect((await refused('/console/notifications/stream/ws', { origin: 'https://evil.example' })).status).toBe(403);
    expect((await refused('/console/notifications/stream/ws', { origin: own })).status).toBe(401);
  });

  it('plain requests are not affected by an Origin header', async () => {
    const res = await gw.http.get('/healthz', { headers: { origin: 'https://evil.example' } });
    expect(res.status).toBe(200);
  });

  it('WS_ALLOWED_ORIGINS takes origins only', () => {
    for (const bad of ['*', 'null', 'https://x.example/console', 'ftp://x.example', 'x.example']) {
      expect(() => loadConfig({ WS_ALLOWED_ORIGINS: bad }), bad).toThrow(/WS_ALLOWED_ORIGINS/);
    }
    expect(loadConfig({ WS_ALLOWED_ORIGINS: 'https://a.example, http://localhost:3000/' }).WS_ALLOWED_ORIGINS).toEqual(['https://a.example', 'http://localhost:3000/']);
  });
});
