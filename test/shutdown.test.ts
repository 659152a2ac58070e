import crypto from 'node:crypto';
import http from 'node:http';
import net from 'node:net';
import mqtt from 'mqtt';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { freePort } from '../src/db/embedded.js';
import { mqttOptions } from './broker/fixtures.js';
import { createTestDatabase, type TestDatabase } from './helpers/db.js';
import { spawnGateway, type GatewayProcess } from './helpers/process.js';
import { waitFor } from './helpers/wait.js';

let db: TestDatabase;
let gateway: GatewayProcess | undefined;

beforeAll(async () => {
  db = await createTestDatabase();
});
afterEach(() => {
  if (gateway && gateway.proc.exitCode === null) gateway.proc.kill('SIGKILL');
});
afterAll(async () => {
  await db.drop();
});

/** A device enrolled over HTTP (claim flow), as the gateway process sees it. */
async function enrollOverHttp(g: GatewayProcess) {
  const token = async (realm: string, sub: string, roles: string[]) => (await g.http.post('/dev/token', { realm, sub, roles })).body.access_token as string;
  const platform = await token('platform', 'root', ['platform-admin']);
  const accountId = crypto.randomUUID();
  expect((await g.http.post('/platform/v1/accounts', { id: accountId, name: 'shutdown' }, { token: platform })).status).toBe(201);
  const operator = await token(`acc-${accountId}`, 'op', ['operator']);
  const group = await g.http.post('/api/v1/things/claim-groups', { name: 'line', maxDevices: 10, ttlDays: 1 }, { token: operator });
  expect(group.status).toBe(201);
  const res = await g.http.post('/ddi/v1/enroll', { provisioningMethod: 'claim_token', claimSecret: group.body.sharedSecret, manufacturer: 'Acme', model: 'm', serial: 'SN-1' });
  expect(res.status).toBe(200);
  return { thingId: res.body.twinTopicPrefix.slice('devices/'.length) as string, certPem: res.body.certificate as string, keyPem: res.body.privateKey as string, caPem: res.body.caBundlePem as string };
}

/**
 * A raw upload of a 500-byte body that sends its headers and the first bytes; `trickle` then sends
 * one more byte every 200 ms (a slow client making progress) until `stop()`. Records what the
 * gateway answers and when the gateway closes the socket.
 */
function upload(port: number, trickle: boolean) {
  const socket = net.connect(port, '127.0.0.1', () => socket.write('POST /dev/token HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 500\r\n\r\n{"rea'));
  const u = { socket, text: '', answeredAt: 0, closed: new Promise<void>((resolve) => socket.on('close', () => resolve())), stop: () => clearInterval(timer) };
  const timer = trickle ? setInterval(() => socket.writable && socket.write(' '), 200) : undefined;
  socket.on('data', (d) => {
    u.answeredAt ||= Date.now();
    u.text += d;
  });
  socket.on('error', () => {});
  socket.on('close', u.stop);
  return u;
}

describe('graceful shutdown', () => {
  it('on SIGTERM finishes the in-flight request, then exits 0', async () => {
    const port = await freePort();
    const wsPort = await freePort();
    gateway = await spawnGateway({ DATABASE_URL: db.url, HTTP_PORT: String(port), LOG_LEVEL: 'info', MQTT_WS_PORT: String(wsPort) });
    const child = gateway.proc;
    const body = JSON.stringify({ realm: 'platform', sub: 'root', roles: ['platform-admin'] });
    const response = new Promise<{ status: number; text: string }>((resolve, reject) => {
      const req = http.request({ host: '127.0.0.1', port, method: 'POST', path: '/dev/token', headers: { 'content-type': 'application/json', 'content-length': Buffer.byteLength(body) } }, (res) => {
        let text = '';
        res.on('data', (d) => (text += d));
        res.on('end', () => resolve({ status: res.statusCode!, text }));
      });
      req.on('error', reject);
      // half the body now; SIGTERM once the gateway has the request (its log says so, however slow
      // the machine); the rest later: the request is in flight when shutdown starts
      req.write(body.slice(0, 10));
      void waitFor(() => gateway!.output().includes('"url":"/dev/token"') || undefined, 20_000, 'the request to reach the gateway', 20).then(() => {
        child.kill('SIGTERM');
        setTimeout(() => req.end(body.slice(10)), 600);
      }, reject);
    });
    const res = await response.catch((err) => { throw new Error(`${err.message}; gateway output:\n${gateway!.output()}`); });
    expect(res.status).toBe(200);
    expect(JSON.parse(res.text).access_token).toBeTruthy();
    expect(await gateway.exited).toBe(0);
    expect(gateway.output()).toContain('shutting down');
    // the start-up banner names the console and every listener that is on
    const banner = gateway.output();
    expect(banner).toMatch(new RegExp(`\\n  HTTP API +http://127\\.0\\.0\\.1:${port} `));
    expect(banner).toMatch(new RegExp(`\\n  console +http://127\\.0\\.0\\.1:${port}/console/things `));
    expect(banner).toMatch(/\n  MQTT \(TLS\) +mqtts:\/\/[^\s]+:\d+ /);
    expect(banner).toMatch(new RegExp(`\\n  MQTT over WS +wss://[^\\s]+:${wsPort}/mqtt `));
    expect(banner).not.toContain('MQTT (proxy)');
    // no longer accepting
    await expect(fetch(`http://127.0.0.1:${port}/healthz`)).rejects.toThrow();
  });

  it('a request stalled in its body is answered 503 at SIGTERM, one that stalls later 2 s after its last byte, well before the grace period; exits 0', async () => {
    const port = await freePort();
    gateway = await spawnGateway({ DATABASE_URL: db.url, HTTP_PORT: String(port), LOG_LEVEL: 'info', SHUTDOWN_TIMEOUT_MS: '60000', HTTP_REQUEST_TIMEOUT_MS: '120000' });
    const stalled = upload(port, false);
    const slow = upload(port, true); // still making progress when the signal comes
    await new Promise((r) => setTimeout(r, 2600)); // the first has sent nothing for longer than 2 s
    const signalled = Date.now();
    gateway.proc.kill('SIGTERM');

    await stalled.closed; // closed by the gateway, not by us
    const took = stalled.answeredAt - signalled;
    expect(stalled.text).toMatch(/^HTTP\/1\.1 503 /);
    expect(stalled.text).toMatch(/\r\ncontent-type: application\/problem\+json/i);
    expect(stalled.text).toMatch(/\r\nconnection: close/i);
    const problem = JSON.parse(stalled.text.slice(stalled.text.indexOf('\r\n\r\n') + 4));
    expect(problem).toMatchObject({ status: 503, instance: '/dev/token', detail: expect.stringContaining("body stopped arriving") });
    expect(took, 'answered at once').toBeLessThan(1500);

    // the slow one keeps its socket while it makes progress, then stalls: answered 2 s after its last byte
    expect(slow.answeredAt).toBe(0);
    await new Promise((r) => setTimeout(r, 1000));
    expect(slow.answeredAt, 'served while it made progress').toBe(0);
    slow.stop();
    const stoppedAt = Date.now();
    await slow.closed;
    expect(slow.text).toMatch(/^HTTP\/1\.1 503 /);
    expect(slow.answeredAt - stoppedAt).toBeGreaterThan(1500);
    expect(slow.answeredAt - stoppedAt).toBeLessThan(4500);

    expect(await gateway.exited).toBe(0);
    const output = gateway.output();
    expect(output).toContain('a stalled request body answered 503');
    expect(output).toContain('shutdown complete');
    expect(output).not.toContain('shutdown grace period over');
    expect(output).not.toMatch(/Reply was already sent|"level":50/);
  });

  it('on SIGTERM with an upload still making progress at the end of the grace period closes it, stops the broker and exits 0', async () => {
    const port = await freePort();
    const mqttPort = await freePort();
    const nodeId = `shutdown-${crypto.randomUUID().slice(0, 8)}`;
    gateway = await spawnGateway({
      DATABASE_URL: db.url,
      HTTP_PORT: String(port),
      MQTT_PORT: String(mqttPort),
      LOG_LEVEL: 'info',
      NODE_ID: nodeId,
      SHUTDOWN_TIMEOUT_MS: '1500',
      HTTP_REQUEST_TIMEOUT_MS: '120000', // the grace period, not the request timeout, must end it
    });
    const device = await enrollOverHttp(gateway);
    const client = await mqtt.connectAsync(`mqtts://127.0.0.1:${mqttPort}`, mqttOptions(device));
    client.on('error', () => {});
    const deviceClosed = new Promise<void>((resolve) => client.once('close', () => resolve()));
    await waitFor(async () => (await db.sql`select connected from device_connectivity where thing_id = ${device.thingId}`)[0]?.connected === true, 20_000, 'device connected');
    expect((await db.sql`select 1 from broker_nodes where node_id = ${nodeId}`).length).toBe(1);

    // an upload that keeps sending a byte now and then, never finishing within the grace period
    const slow = upload(port, true);
    await new Promise((r) => setTimeout(r, 300));

    gateway.proc.kill('SIGTERM');
    const code = await gateway.exited;
    const output = gateway.output();
    expect(code, output).toBe(0);
    await slow.closed; // closed by the gateway, not by us
    expect(output).toContain('shutdown grace period over');
    expect(output).toContain('shutdown complete');
    expect(output).not.toContain('shutdown did not finish');
    // the broker stopped in order: the device's connection closed by the gateway, its disconnect
    // recorded before the database closed (not left to the next start-up), this node deregistered
    await deviceClosed;
    expect((await db.sql`select 1 from broker_nodes where node_id = ${nodeId}`).length).toBe(0);
    const [connectivity] = await db.sql<{ connected: boolean; disconnected_at: Date | null }[]>`
      select connected, disconnected_at from device_connectivity where thing_id = ${device.thingId}`;
    expect(connectivity).toMatchObject({ connected: false, disconnected_at: expect.any(Date) });
    const events = await db.sql<{ type: string }[]>`select type from domain_events where actor_id = ${device.thingId} and type like 'device.%' order by seq`;
    expect(events.map((e) => e.type)).toEqual(['device.connected', 'device.disconnected']);
    await client.endAsync(true).catch(() => {});
  });

  it('a second signal during a long grace period exits at once', async () => {
    const port = await freePort();
    gateway = await spawnGateway({ DATABASE_URL: db.url, HTTP_PORT: String(port), LOG_LEVEL: 'info', SHUTDOWN_TIMEOUT_MS: '600000', HTTP_REQUEST_TIMEOUT_MS: '600000' });
    const slow = upload(port, true); // making progress: the grace period waits for it
    await new Promise((r) => setTimeout(r, 300));
    gateway.proc.kill('SIGTERM');
    await waitFor(() => gateway!.output().includes('shutting down'), 20_000, 'shutdown started');
    // one key press can be relayed twice (npm, tsx): repeats within a second are ignored
    await new Promise((r) => setTimeout(r, 1200));
    expect(gateway.proc.exitCode).toBe(null); // still waiting for the slow upload
    gateway.proc.kill('SIGTERM');
    expect(await gateway.exited).toBe(128 + 15);
    expect(gateway.output()).toContain('second signal: exiting without finishing the shutdown');
    slow.socket.destroy();
  });
});
