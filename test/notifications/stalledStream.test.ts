import http from 'node:http';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import WebSocket from 'ws';
import { startTestGateway, type TestGateway } from '../helpers/gateway.js';
import { createAccount, type TestAccount } from '../helpers/accounts.js';
import { createClaimGroup, enrollDevice } from '../helpers/devices.js';
import { waitFor } from '../helpers/wait.js';
import { connectDevice } from '../broker/fixtures.js';
import { STREAM_MAX_BACKLOG_BYTES } from '../../src/lib/backlog.js';
import { publisherToken, streamCookie, userToken } from './helpers.js';

/**
 * Stalled streams (issue 40, item 3): a client that stops reading is disconnected at once (TCP
 * reset: what the gateway queued for it is dropped, not sent behind an `end()`) when its unsent
 * backlog passes 1 MiB, counted in a metric; a notification client resumes with Last-Event-ID
 * after the last event it read. Real clients over sockets that stop reading (paused).
 */
let gw: TestGateway;
let account: TestAccount;
let publisher: string;

beforeAll(async () => {
  gw = await startTestGateway({ SSE_HEARTBEAT_SECONDS: '2' });
  account = await createAccount(gw);
  publisher = await publisherToken(gw);
});
afterAll(async () => gw?.close());

/** about 40 KB of text: a frame carries it twice (rendered body and data), so about 80 KB */
const LARGE = 'x'.repeat(40_000);

const publish = async (sub: string, message: string) => {
  const res = await gw.http.post('/api/notifications/publish', {
    channel: ['in_app'], template: 'general/message', to: { subscriberId: sub }, data: { subject: 'load', message },
  }, { token: publisher });
  if (res.status !== 201) throw new Error(`publish: ${res.status} ${res.text}`);
  return res.body.id as string;
};

const metric = async (name: string, labels: string): Promise<number> => {
  const text = (await gw.http.get('/metrics')).text;
  const line = text.split('\n').find((l) => l.startsWith(`${name}{${labels}}`));
  return line ? Number(line.split(' ').pop()) : 0;
};

/** open notification streams on the node (notification_streams_open) */
const openStreams = async (): Promise<number> => Number(/^notification_streams_open (\S+)$/m.exec((await gw.http.get('/metrics')).text)?.[1]);

/** A stream client of either transport that can stop reading its socket. */
interface StallingClient {
  /** notification events read so far: stream event id and the notification's id */
  read: { eventId: number; notificationId: string }[];
  closed: boolean;
  pause(): void;
  resume(): void;
  close(): void;
}

function record(read: StallingClient['read'], eventId: number, data: { type: string; notification?: { id: string } }) {
  if (data.type === 'created') read.push({ eventId, notificationId: data.notification!.id });
}

/** SSE over a socket of its own; `lastEventId` sent as the Last-Event-ID header. */
async function openSse(cookie: string, lastEventId?: number): Promise<StallingClient> {
  return new Promise((resolve, reject) => {
    const client: StallingClient = { read: [], closed: false, pause: () => {}, resume: () => {}, close: () => {} };
    const headers: Record<string, string> = { accept: 'text/event-stream', cookie, ...(lastEventId !== undefined ? { 'last-event-id': String(lastEventId) } : {}) };
    const req = http.get(`${gw.httpUrl}/console/notifications/stream`, { headers, agent: false }, (res) => {
      if (res.statusCode !== 200) return reject(new Error(`stream: ${res.statusCode}`));
      res.setEncoding('utf8');
      let buf = '';
      res.on('data', (chunk: string) => {
        buf += chunk;
        let i: number;
        while ((i = buf.indexOf('\n\n')) >= 0) {
          const frame = buf.slice(0, i);
          buf = buf.slice(i + 2);
          const id = /^id: (\d+)$/m.exec(frame)?.[1];
          const data = /^data: (.*)$/m.exec(frame)?.[1];
          if (id && data) record(client.read, Number(id), JSON.parse(data));
        }
      });
      res.on('error', () => {});
      res.on('close', () => (client.closed = true));
      client.pause = () => {
        res.pause();
        res.socket.pause();
      };
      client.resume = () => {
        res.socket.resume();
        res.resume();
      };
      client.close = () => req.destroy();
      resolve(client);
    });
    req.on('error', () => (client.closed = true));
  });
}

/** The same events over WebSocket; `lastEventId` as the query parameter. */
async function openWs(cookie: string, lastEventId?: number): Promise<StallingClient> {
  const query = lastEventId !== undefined ? `?lastEventId=${lastEventId}` : '';
  const ws = new WebSocket(`${gw.httpUrl.replace(/^http/, 'ws')}/console/notifications/stream/ws${query}`, { headers: { cookie } });
  const client: StallingClient = {
    read: [], closed: false, pause: () => ws.pause(), resume: () => ws.resume(), close: () => ws.terminate(),
  };
  ws.on('message', (m) => {
    const msg = JSON.parse(String(m)) as { id: number; data: { type: string; notification?: { id: string } } };
    record(client.read, msg.id, msg.data);
  });
  ws.on('error', () => {});
  ws.on('close', () => (client.closed = true));
  await new Promise<void>((resolve, reject) => ws.once('open', () => resolve()).once('error', reject));
  return client;
}

describe.each([
  { transport: 'sse', open: openSse },
  { transport: 'websocket', open: openWs },
])('a stalled notification stream ($transport)', ({ transport, open }) => {
  it('is cut once its unsent backlog passes 1 MiB, counted, and resumes with Last-Event-ID after the last event it read', async () => {
    const sub = `stalled-${transport}`;
    const { cookie } = await streamCookie(gw, await userToken(gw, account.id, sub), account.id);
    const cutsBefore = await metric('notification_streams_cut_total', `transport="${transport}"`);
    const client = await open(cookie);
    await waitFor(async () => (await openStreams()) === 1, 5_000, 'the stream attached');
    const published: string[] = [];
    for (let i = 0; i < 3; i += 1) published.push(await publish(sub, `small ${i}`));
    await waitFor(() => client.read.length === 3, 10_000, 'the first three events');

    // the client stops reading; the gateway goes on publishing until the stream is gone
    client.pause();
    let bytes = 0;
    while ((await openStreams()) > 0) {
      if (published.length > 1000) throw new Error('the stalled stream was never cut');
      published.push(await publish(sub, LARGE));
      bytes += 2 * LARGE.length;
    }
    const publishedAtCut = published.length;
    // cut (not ended behind its backlog) and counted; it had more than the bound queued
    expect(await metric('notification_streams_cut_total', `transport="${transport}"`)).toBe(cutsBefore + 1);
    expect(bytes).toBeGreaterThan(STREAM_MAX_BACKLOG_BYTES);
    expect(client.read).toHaveLength(3);

    // reading again, the client finds the connection reset: what the gateway held for it is gone
    client.resume();
    await waitFor(() => client.closed, 5_000, 'the client sees the connection closed');
    const lastRead = client.read.at(-1)!;
    expect(client.read.length).toBeLessThan(publishedAtCut - 5);
    expect(client.read.map((r) => r.notificationId)).toEqual(published.slice(0, client.read.length));

    // one more while it was away, then it comes back from where it got
    published.push(await publish(sub, 'after the cut'));
    const back = await open(cookie, lastRead.eventId);
    await waitFor(() => back.read.at(-1)?.notificationId === published.at(-1), 20_000, 'the replay up to the latest notification');
    expect(back.read.map((r) => r.notificationId)).toEqual(published.slice(client.read.length));
    expect(back.read[0].eventId).toBeGreaterThan(lastRead.eventId);
    // live again after the replay
    const live = await publish(sub, 'live');
    await waitFor(() => back.read.at(-1)?.notificationId === live, 10_000, 'a live event after the replay');
    expect(back.closed).toBe(false);
    back.close();
    await waitFor(async () => (await openStreams()) === 0, 5_000, 'the stream detached');
  });
});

describe('stalled device streams (WebSocket)', () => {
  it('telemetry: a viewer that stops reading is cut past 1 MiB and counted; the device and other viewers are unaffected', async () => {
    const claimSecret = (await createClaimGroup(gw, account)).sharedSecret;
    const device = await enrollDevice(gw, account, { claimSecret });
    const url = `${gw.httpUrl.replace(/^http/, 'ws')}/api/v1/things/${device.thingId}/telemetry/stream`;
    const openViewer = async () => {
      const ws = new WebSocket(url, ['bearer', account.viewer]);
      const messages: any[] = [];
      let closed = false;
      ws.on('message', (m) => messages.push(JSON.parse(String(m))));
      ws.on('close', () => (closed = true));
      ws.on('error', () => {});
      await waitFor(() => messages.some((m) => m.type === 'subscribed'), 10_000, 'subscribed');
      return { ws, messages, closed: () => closed };
    };
    const cutsBefore = await metric('device_streams_cut_total', 'stream="telemetry"');
    const stalled = await openViewer();
    const reading = await openViewer();
    stalled.ws.pause();
    const mqtt = await connectDevice(gw.mqttPort!, device);
    const payload = JSON.stringify({ blob: 'y'.repeat(60_000) });
    let sent = 0;
    while ((await metric('device_streams_cut_total', 'stream="telemetry"')) === cutsBefore) {
      if (sent > 1000) throw new Error('the stalled viewer was never cut');
      for (let i = 0; i < 10; i += 1) await mqtt.publishAsync(`devices/${device.thingId}/telemetry`, payload, { qos: 1 });
      sent += 10;
    }
    stalled.ws.resume();
    await waitFor(() => stalled.closed(), 5_000, 'the stalled viewer closed');
    await waitFor(() => reading.messages.filter((m) => m.telemetry).length === sent, 10_000, 'every message at the reading viewer');
    expect(reading.closed()).toBe(false);
    expect(mqtt.connected).toBe(true);
    reading.ws.close();
    await mqtt.endAsync();
  });

  it('connectivity: a client that stops reading is cut past 1 MiB of changes and counted', async () => {
    const stream = new WebSocket(`${gw.httpUrl.replace(/^http/, 'ws')}/api/v1/things/connectivity/stream`, ['bearer', account.viewer]);
    let subscribed = false;
    let closed = false;
    stream.on('message', () => (subscribed = true));
    stream.on('close', () => (closed = true));
    stream.on('error', () => {});
    await waitFor(() => subscribed, 10_000, 'subscribed');
    stream.pause();
    const cutsBefore = await metric('device_streams_cut_total', 'stream="connectivity"');
    // the broker's own domain events, as every connect and disconnect puts them on the bus
    let n = 0;
    while ((await metric('device_streams_cut_total', 'stream="connectivity"')) === cutsBefore) {
      if (n > 500_000) throw new Error('the stalled connectivity stream was never cut');
      for (let i = 0; i < 5_000; i += 1, n += 1) {
        gw.gw.bus.emit('device.connected', {
          seq: n, id: String(n), actorType: 'thing', type: 'device.connected', accountId: account.id, actorId: `thing-${n}`, payload: { thingId: `thing-${n}`, at: new Date().toISOString() }, createdAt: new Date().toISOString(),
        });
      }
      await new Promise((r) => setImmediate(r));
    }
    expect(n * 100).toBeGreaterThan(STREAM_MAX_BACKLOG_BYTES);
    stream.resume();
    await waitFor(() => closed, 5_000, 'the stalled stream closed');
  });
});
