import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import WebSocket from 'ws';
import { startTestGateway, type TestGateway } from '../helpers/gateway.js';
import { createAccount, type TestAccount } from '../helpers/accounts.js';
import { enrollDevice } from '../helpers/devices.js';
import { waitFor } from '../helpers/wait.js';
import { connectDevice } from './fixtures.js';

const PATH = '/api/v1/things/connectivity/stream';

/** A WebSocket client of the connectivity stream (bearer subprotocol, as a browser sends it). */
class Stream {
  readonly messages: any[] = [];
  private constructor(readonly ws: WebSocket) {
    ws.on('message', (data) => this.messages.push(JSON.parse(String(data))));
  }

  /** Opens the stream and waits for `subscribed`; or the HTTP status that refused the upgrade. */
  static open(gw: TestGateway, token: string | undefined, query = ''): Promise<Stream | { status: number; body: any }> {
    const ws = new WebSocket(`${gw.httpUrl.replace(/^http/, 'ws')}${PATH}${query}`, token ? ['bearer', token] : []);
    return new Promise((resolve, reject) => {
      const s = new Stream(ws);
      ws.on('unexpected-response', (_req, res) => {
        let body = '';
        res.on('data', (c) => (body += c));
        res.on('end', () => resolve({ status: res.statusCode ?? 0, body: JSON.parse(body) }));
      });
      ws.on('error', reject);
      ws.on('message', () => s.messages[0]?.type === 'subscribed' && resolve(s));
    });
  }

  changes(thingId?: string) {
    return this.messages.filter((m) => m.type === 'connectivity' && (thingId === undefined || m.thingId === thingId)).map((m) => ({ thingId: m.thingId, connected: m.connected }));
  }

  close() {
    this.ws.close();
  }
}

async function openStream(gw: TestGateway, token: string, query = ''): Promise<Stream> {
  const s = await Stream.open(gw, token, query);
  if (!(s instanceof Stream)) throw new Error(`stream refused: ${s.status} ${JSON.stringify(s.body)}`);
  return s;
}

async function refusal(gw: TestGateway, token: string | undefined, query = ''): Promise<{ status: number; body: any }> {
  const s = await Stream.open(gw, token, query);
  if (s instanceof Stream) {
    s.close();
    throw new Error('the stream was opened');
  }
  return s;
}

describe('connectivity stream (GET /api/v1/things/connectivity/stream, WebSocket)', () => {
  let n1: TestGateway;
  let n2: TestGateway;
  let A: TestAccount;
  let B: TestAccount;
  const streams: Stream[] = [];

  beforeAll(async () => {
    // two nodes behind one public address (one token issuer) on one database, as in production
    const env = { PUBLIC_BASE_URL: 'http://gateway.test' };
    n1 = await startTestGateway({ ...env, NODE_ID: 'node-1' });
    n2 = await startTestGateway({ ...env, NODE_ID: 'node-2' }, { db: n1.db });
    [A, B] = await Promise.all([createAccount(n1), createAccount(n1)]);
  });
  afterAll(async () => {
    for (const s of streams) s.close();
    await n2?.close();
    await n1?.close();
  });

  it('refuses callers without a token (401), without an account or a reading role (403), a malformed thingId (400), another account\'s thing (404)', async () => {
    expect((await refusal(n1, undefined)).status).toBe(401);
    const platform = await n1.token({ realm: 'platform', sub: 'root', roles: ['platform-admin'] });
    expect((await refusal(n1, platform)).status).toBe(403);
    const noRole = await n1.token({ realm: `acc-${A.id}`, sub: 'nobody', roles: ['notification-reader'] });
    const r403 = await refusal(n1, noRole);
    expect(r403.status).toBe(403);
    expect(r403.body.detail).toMatch(/insufficient role/);
    expect((await refusal(n1, A.viewer, '?thingId=nope')).status).toBe(400);
    const foreign = await enrollDevice(n1, B);
    const r404 = await refusal(n1, A.viewer, `?thingId=${foreign.thingId}`);
    expect(r404.status).toBe(404);
    expect(r404.body.detail).toContain(foreign.thingId);
  });

  it('a device connecting and disconnecting on node 2 reaches the account\'s streams on both nodes, and only its own account\'s', async () => {
    const [a1, a2] = [await enrollDevice(n1, A), await enrollDevice(n1, A)];
    const b1 = await enrollDevice(n1, B);
    const onNode1 = await openStream(n1, A.viewer);
    const filtered = await openStream(n2, A.viewer, `?thingId=${a1.thingId}`);
    const otherAccount = await openStream(n1, B.viewer);
    streams.push(onNode1, filtered, otherAccount);
    expect(filtered.messages[0]).toEqual({ type: 'subscribed', thingId: a1.thingId });

    // B's device first: once B's stream has it, A's streams (same bus, later events) must not
    const bClient = await connectDevice(n2.mqttPort!, b1);
    await waitFor(() => otherAccount.changes(b1.thingId).length === 1, 10_000, "B's connect on B's stream");
    const c2 = await connectDevice(n2.mqttPort!, a2);
    const c1 = await connectDevice(n2.mqttPort!, a1);
    await waitFor(() => onNode1.changes().length === 2 && filtered.changes().length === 1, 10_000, 'connect events');
    // the two connects are recorded concurrently: either order
    expect(onNode1.changes()).toEqual(expect.arrayContaining([{ thingId: a2.thingId, connected: true }, { thingId: a1.thingId, connected: true }]));
    expect(filtered.changes()).toEqual([{ thingId: a1.thingId, connected: true }]);
    expect(otherAccount.changes()).toEqual([{ thingId: b1.thingId, connected: true }]);

    await c1.endAsync();
    await waitFor(() => onNode1.changes(a1.thingId).length === 2 && filtered.changes().length === 2, 10_000, 'disconnect events');
    expect(filtered.changes()).toEqual([{ thingId: a1.thingId, connected: true }, { thingId: a1.thingId, connected: false }]);
    const last = onNode1.messages.at(-1);
    expect(last).toMatchObject({ type: 'connectivity', thingId: a1.thingId, connected: false });
    expect(Date.parse(last.at)).not.toBeNaN();
    // what the stream said is what the registry says
    const listed = await n1.http.get(`/api/v1/things?connected=true`, { token: A.viewer });
    expect(listed.body.items.map((t: any) => t.id)).toEqual([a2.thingId]);
    await Promise.all([c2.endAsync(), bClient.endAsync()]);
  });

  it('a closed stream is detached (the open-streams gauge falls back); shutdown ends open streams', async () => {
    const gauge = async (gw: TestGateway) => Number(/^connectivity_streams_open (\d+)$/m.exec((await gw.http.get('/metrics')).text)?.[1]);
    const before = await gauge(n1);
    const s = await openStream(n1, A.viewer);
    expect(await gauge(n1)).toBe(before + 1);
    s.close();
    await waitFor(async () => (await gauge(n1)) === before, 10_000, 'stream detached');

    const n3 = await startTestGateway({ PUBLIC_BASE_URL: 'http://gateway.test', NODE_ID: 'node-3' }, { db: n1.db });
    const onN3 = await openStream(n3, A.viewer);
    const ended = new Promise<void>((resolve) => onN3.ws.on('close', () => resolve()));
    await n3.close();
    await ended;
  });
});
