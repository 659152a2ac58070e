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
  db = await createTestDatabase({ migrated: false });
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

describe('graceful shutdown', () => {
  it('on SIGTERM finishes the in-flight request, then exits 0', async () => {
    const port = await freePort();
    gateway = await spawnGateway({ DATABASE_URL: db.url, HTTP_PORT: String(port), LOG_LEVEL: 'info' });
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
    // no longer accepting
    await expect(fetch(`http://127.0.0.1:${port}/healthz`)).rejects.toThrow();
  });

  it('on SIGTERM with a stalled upload closes it after the grace period, stops the broker and exits 0', async () => {
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

    // an upload that stops after its headers and a few bytes
    const stalled = net.connect(port, '127.0.0.1', () => stalled.write('POST /ddi/v1/enroll HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 500\r\n\r\n{"provisi'));
    stalled.on('error', () => {});
    const stalledClosed = new Promise<void>((resolve) => stalled.on('close', () => resolve()));
    await new Promise<void>((resolve) => stalled.once('connect', () => setTimeout(resolve, 300)));

    gateway.proc.kill('SIGTERM');
    const code = await gateway.exited;
    const output = gateway.output();
    expect(code, output).toBe(0);
    await stalledClosed; // closed by the gateway, not by us
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
    gateway = await spawnGateway({ DATABASE_URL: db.url, HTTP_PORT: String(port), LOG_LEVEL: 'info', SHUTDOWN_TIMEOUT_MS: '600000' });
    const stalled = net.connect(port, '127.0.0.1', () => stalled.write('POST /dev/token HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 500\r\n\r\n{'));
    stalled.on('error', () => {});
    await new Promise<void>((resolve) => stalled.once('connect', () => setTimeout(resolve, 300)));
    gateway.proc.kill('SIGTERM');
    await waitFor(() => gateway!.output().includes('shutting down'), 20_000, 'shutdown started');
    // one key press can be relayed twice (npm, tsx): repeats within a second are ignored
    await new Promise((r) => setTimeout(r, 1200));
    expect(gateway.proc.exitCode).toBe(null); // still waiting for the stalled upload
    gateway.proc.kill('SIGTERM');
    expect(await gateway.exited).toBe(128 + 15);
    expect(gateway.output()).toContain('second signal: exiting without finishing the shutdown');
    stalled.destroy();
  });
});
