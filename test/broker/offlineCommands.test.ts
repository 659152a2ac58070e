import type { MqttClient, IPublishPacket } from 'mqtt';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestGateway, expectProblem, type TestGateway } from '../helpers/gateway.js';
import { createAccount, type TestAccount } from '../helpers/accounts.js';
import { waitFor } from '../helpers/wait.js';
import { enrollDevice, createClaimGroup } from '../helpers/devices.js';
import { connectDevice, type TestDevice } from './fixtures.js';
import { EXPIRE_COMMANDS_JOB } from '../../src/broker/offlineCommands.js';

let gw: TestGateway;
let port: number;
let account: TestAccount;
let other: TestAccount;
let claimSecret: string;

beforeAll(async () => {
  gw = await startTestGateway({ COMMAND_MAX_PENDING: '8' });
  port = gw.mqttPort!;
  account = await createAccount(gw);
  other = await createAccount(gw);
  claimSecret = (await createClaimGroup(gw, account)).sharedSecret;
});
afterAll(async () => gw?.close());

const ownedDevice = (): Promise<TestDevice> => enrollDevice(gw, account, { claimSecret });
const commands = (thingId: string) => `/api/v1/things/${thingId}/commands`;
const send = (thingId: string, body: Record<string, unknown>) => gw.http.post(commands(thingId), body, { token: account.operator });
const status = async (thingId: string, id: string) => (await gw.http.get(`${commands(thingId)}/${id}`, { token: account.viewer })).body;

/** Connects, records every command received, and subscribes to the command topic. */
async function deviceClient(device: TestDevice): Promise<{ client: MqttClient; received: { body: { id: string; name: string; payload: unknown }; packet: IPublishPacket }[] }> {
  const client = await connectDevice(port, device);
  const received: { body: { id: string; name: string; payload: unknown }; packet: IPublishPacket }[] = [];
  client.on('message', (topic, payload, packet) => {
    if (topic === `devices/${device.thingId}/commands`) received.push({ body: JSON.parse(payload.toString()), packet });
  });
  await client.subscribeAsync(`devices/${device.thingId}/commands`, { qos: 1 });
  return { client, received };
}

const answer = (client: MqttClient, packet: IPublishPacket, body: unknown) =>
  client.publishAsync(packet.properties!.responseTopic!, JSON.stringify(body), { qos: 1, properties: { correlationData: packet.properties!.correlationData } });

describe('offline commands (ttlSeconds)', () => {
  it('stores a command for an offline device and delivers it after it connects, with a message expiry; the reply succeeds it', async () => {
    const device = await ownedDevice();
    const accepted = await send(device.thingId, { name: 'reboot', payload: { delay: 5 }, ttlSeconds: 600 });
    expect(accepted.status, JSON.stringify(accepted.body)).toBe(202);
    expect(accepted.body).toMatchObject({ status: 'pending' });
    expect(Date.parse(accepted.body.expiresAt) - Date.now()).toBeGreaterThan(500_000);
    const id: string = accepted.body.id;
    expect(await status(device.thingId, id)).toMatchObject({ id, status: 'pending', deliveredAt: null, response: null, ttlSeconds: 600 });

    const { client, received } = await deviceClient(device);
    const [message] = await waitFor(() => (received.length ? received : undefined), 10_000, 'command delivered');
    expect(message.body).toEqual({ id, name: 'reboot', payload: { delay: 5 } });
    const expiry = message.packet.properties?.messageExpiryInterval;
    expect(expiry).toBeGreaterThan(0);
    expect(expiry).toBeLessThanOrEqual(600);
    expect(Buffer.from(message.packet.properties!.correlationData!).toString()).toBe(id);
    expect((await status(device.thingId, id)).status).toBe('delivered');

    await answer(client, message.packet, { ok: true, uptime: 1 });
    const done = await waitFor(async () => {
      const s = await status(device.thingId, id);
      return s.status === 'succeeded' ? s : undefined;
    }, 10_000, 'succeeded');
    expect(done.response).toEqual({ ok: true, uptime: 1 });
    expect(done.deliveredAt).not.toBeNull();
    expect(done.completedAt).not.toBeNull();
    const list = await gw.http.get(`${commands(device.thingId)}?status=succeeded`, { token: account.viewer });
    expect(list.body.items.map((c: { id: string }) => c.id)).toEqual([id]);
    expect((await gw.http.get(`${commands(device.thingId)}?status=pending`, { token: account.viewer })).body.items).toEqual([]);
    await client.endAsync();
  });

  it('never delivers a command whose TTL passed while offline: it is expired; the next one goes (and fails on an error reply)', async () => {
    const device = await ownedDevice();
    const stale = (await send(device.thingId, { name: 'old', ttlSeconds: 1 })).body;
    await waitFor(() => Date.now() > Date.parse(stale.expiresAt) + 50, 5_000, 'TTL passed', 50);
    const fresh = (await send(device.thingId, { name: 'new', ttlSeconds: 600 })).body;

    const { client, received } = await deviceClient(device);
    // delivery is oldest first: had the stale one gone out, it would have come before this one
    await waitFor(() => received.some((m) => m.body.id === fresh.id), 10_000, 'fresh command delivered');
    expect(received.map((m) => m.body.name)).toEqual(['new']);
    expect(await status(device.thingId, stale.id)).toMatchObject({ status: 'expired', deliveredAt: null });

    await answer(client, received[0].packet, { error: 'disk full' });
    const failed = await waitFor(async () => {
      const s = await status(device.thingId, fresh.id);
      return s.status === 'failed' ? s : undefined;
    }, 10_000, 'failed');
    expect(failed.response).toEqual({ error: 'disk full' });
    await client.endAsync();
  });

  it('the scheduled sweep expires a pending command once its TTL passes', async () => {
    const device = await ownedDevice();
    const c = (await send(device.thingId, { name: 'late', ttlSeconds: 1 })).body;
    await waitFor(() => Date.now() > Date.parse(c.expiresAt) + 50, 5_000, 'TTL passed', 50);
    expect((await status(device.thingId, c.id)).status).toBe('pending');
    await gw.gw.jobs.send(EXPIRE_COMMANDS_JOB, {});
    const expired = await waitFor(async () => {
      const s = await status(device.thingId, c.id);
      return s.status === 'expired' ? s : undefined;
    }, 15_000, 'expired by the sweep');
    expect(expired.completedAt).not.toBeNull();
  });

  it('delivers at once to a connected device (202 delivered); without ttlSeconds an offline device is still 409', async () => {
    const device = await ownedDevice();
    expectProblem(await send(device.thingId, { name: 'sync' }), 409);
    const { client, received } = await deviceClient(device);
    await waitFor(async () => (await gw.http.get(`/api/v1/things/${device.thingId}/connectivity`, { token: account.viewer })).body.connected, 10_000, 'connected');
    const accepted = await send(device.thingId, { name: 'now', ttlSeconds: 30 });
    expect(accepted.status, JSON.stringify(accepted.body)).toBe(202);
    expect(accepted.body.status).toBe('delivered');
    await waitFor(() => received.some((m) => m.body.id === accepted.body.id), 10_000, 'delivered');
    expect(received).toHaveLength(1);
    await client.endAsync();
  });

  it('publishes each pending command once, oldest first, when deliveries race (two subscribes at once)', async () => {
    const device = await ownedDevice();
    const ids: string[] = [];
    for (let i = 0; i < 5; i += 1) ids.push((await send(device.thingId, { name: `c${i}`, ttlSeconds: 600 })).body.id);
    const client = await connectDevice(port, device);
    const received: string[] = [];
    client.on('message', (topic, payload) => {
      if (topic === `devices/${device.thingId}/commands`) received.push(JSON.parse(payload.toString()).id);
    });
    // both subscriptions cover the command topic: each starts a delivery of the pending commands
    await Promise.all([
      client.subscribeAsync(`devices/${device.thingId}/commands`, { qos: 1 }),
      client.subscribeAsync(`devices/${device.thingId}/#`, { qos: 1 }),
    ]);
    await waitFor(async () => {
      const pending = (await gw.http.get(`${commands(device.thingId)}?status=delivered`, { token: account.viewer })).body.items;
      return pending.length === 5;
    }, 10_000, 'all delivered');
    // Aedes sends one copy per client even for overlapping subscriptions; a marker command sent
    // now arrives after anything published before it on this connection
    const marker = (await send(device.thingId, { name: 'marker', ttlSeconds: 60 })).body.id;
    await waitFor(() => received.includes(marker), 10_000, 'marker received');
    expect(received).toEqual([...ids, marker]);
    await client.endAsync();
  });

  it('delivers on reconnect of a persistent session, which does not subscribe again', async () => {
    const device = await ownedDevice();
    const persistent = { clean: false, properties: { sessionExpiryInterval: 300 } };
    const first = await connectDevice(port, device, persistent);
    await first.subscribeAsync(`devices/${device.thingId}/commands`, { qos: 1 });
    await first.endAsync();
    await waitFor(async () => !(await gw.http.get(`/api/v1/things/${device.thingId}/connectivity`, { token: account.viewer })).body.connected, 10_000, 'disconnected');
    const c = (await send(device.thingId, { name: 'while-away', ttlSeconds: 600 })).body;
    expect(c.status).toBe('pending');
    const again = await connectDevice(port, device, persistent);
    const received: string[] = [];
    again.on('message', (_topic, payload) => received.push(JSON.parse(payload.toString()).id));
    await waitFor(() => received.includes(c.id), 10_000, 'delivered to the resumed session');
    expect((await status(device.thingId, c.id)).status).toBe('delivered');
    await again.endAsync();
  });

  it('caps the pending commands of one thing, also when submits race (409), and other things are unaffected', async () => {
    const device = await ownedDevice();
    const results = await Promise.all(Array.from({ length: 12 }, (_, i) => send(device.thingId, { name: `n${i}`, ttlSeconds: 600 })));
    expect(results.filter((r) => r.status === 202)).toHaveLength(8);
    const refused = results.filter((r) => r.status !== 202);
    expect(refused).toHaveLength(4);
    for (const r of refused) expect(expectProblem(r, 409).detail).toMatch(/pending commands/);
    const pending = (await gw.http.get(`${commands(device.thingId)}?status=pending`, { token: account.viewer })).body.items;
    expect(pending).toHaveLength(8);
    const otherThing = await ownedDevice();
    expect((await send(otherThing.thingId, { name: 'fine', ttlSeconds: 60 })).status).toBe(202);
  });

  it('answers 404 for another account\'s thing and command, 400 for bad input', async () => {
    const device = await ownedDevice();
    const c = (await send(device.thingId, { name: 'mine', ttlSeconds: 60 })).body;
    expectProblem(await gw.http.get(`${commands(device.thingId)}/${c.id}`, { token: other.viewer }), 404);
    expectProblem(await gw.http.get(commands(device.thingId), { token: other.viewer }), 404);
    expectProblem(await gw.http.post(commands(device.thingId), { name: 'x', ttlSeconds: 60 }, { token: other.operator }), 404);
    // a command id of this account under another of its things is not found either
    const second = await ownedDevice();
    expectProblem(await gw.http.get(`${commands(second.thingId)}/${c.id}`, { token: account.viewer }), 404);
    expectProblem(await send(device.thingId, { name: 'x', ttlSeconds: 0 }), 400);
    expectProblem(await gw.http.get(`${commands(device.thingId)}?status=done`, { token: account.viewer }), 400);
    const list = await gw.http.get(commands(device.thingId), { token: account.viewer });
    expect(list.body.items.map((i: { id: string }) => i.id)).toEqual([c.id]);
  });

  it('cancels a pending command: never delivered afterwards; 409 once delivered; 404 for another account', async () => {
    const device = await ownedDevice();
    const c = (await send(device.thingId, { name: 'withdrawn', ttlSeconds: 600 })).body;
    const keep = (await send(device.thingId, { name: 'kept', ttlSeconds: 600 })).body;
    const cancel = (thingId: string, id: string, token = account.operator) => gw.http.post(`${commands(thingId)}/${id}/cancel`, undefined, { token });
    expectProblem(await cancel(device.thingId, c.id, other.operator), 404);
    expectProblem(await cancel(device.thingId, c.id, account.viewer), 403);
    const cancelled = await cancel(device.thingId, c.id);
    expect(cancelled.status, JSON.stringify(cancelled.body)).toBe(200);
    expect(cancelled.body).toMatchObject({ id: c.id, status: 'cancelled', deliveredAt: null, completedAt: expect.any(String) });
    // again: no longer pending
    expect(expectProblem(await cancel(device.thingId, c.id), 409)).toMatchObject({ state: 'cancelled', detail: expect.stringContaining('cancelled') });

    const { client, received } = await deviceClient(device);
    await waitFor(() => received.some((m) => m.body.id === keep.id), 10_000, 'the other command delivered');
    expect(received.map((m) => m.body.id)).toEqual([keep.id]);
    const late = expectProblem(await cancel(device.thingId, keep.id), 409);
    expect(late.detail).toContain('delivered');
    expect((await status(device.thingId, keep.id)).status).toBe('delivered');
    expect((await gw.http.get(`${commands(device.thingId)}?status=cancelled`, { token: account.viewer })).body.items.map((i: { id: string }) => i.id)).toEqual([c.id]);
    await client.endAsync();
  });

  it('a cancel racing the delivery: either the device gets the command or it is cancelled, never both', async () => {
    const device = await ownedDevice();
    const ids: string[] = [];
    for (let i = 0; i < 6; i += 1) ids.push((await send(device.thingId, { name: `r${i}`, ttlSeconds: 600 })).body.id);
    const { client, received } = await deviceClient(device);
    const outcomes = await Promise.all(ids.map((id) => gw.http.post(`${commands(device.thingId)}/${id}/cancel`, undefined, { token: account.operator })));
    await waitFor(async () => {
      const items = (await gw.http.get(`${commands(device.thingId)}?status=pending`, { token: account.viewer })).body.items;
      return items.length === 0;
    }, 10_000, 'nothing pending');
    // a marker sent now arrives after anything published before it
    const marker = (await send(device.thingId, { name: 'marker', ttlSeconds: 60 })).body.id;
    await waitFor(() => received.some((m) => m.body.id === marker), 10_000, 'marker received');
    for (const [i, id] of ids.entries()) {
      const final = (await status(device.thingId, id)).status;
      const got = received.some((m) => m.body.id === id);
      expect(outcomes[i].status === 200 ? ['cancelled', false] : ['delivered', true]).toEqual([final, got]);
    }
    await client.endAsync();
  });

  it('redelivery: a command the device never acknowledged comes again, same correlation data, when its persistent session resumes; an acknowledged one does not', async () => {
    const device = await ownedDevice();
    const persistent = { clean: false, properties: { sessionExpiryInterval: 300 } };
    const topic = `devices/${device.thingId}/commands`;
    // a device that receives the command but crashes before its PUBACK
    let unacked: IPublishPacket | undefined;
    const crashing = await connectDevice(port, device, { ...persistent, customHandleAcks: (_t, _m, packet) => { unacked = packet; } });
    await crashing.subscribeAsync(topic, { qos: 1 });
    const c = (await send(device.thingId, { name: 'reboot', ttlSeconds: 600 })).body;
    expect(c.status).toBe('delivered');
    await waitFor(() => unacked, 10_000, 'command received');
    await crashing.endAsync(true);

    const received: IPublishPacket[] = [];
    const again = await connectDevice(port, device, persistent);
    again.on('message', (_t, _p, packet) => received.push(packet));
    const [redelivered] = await waitFor(() => (received.length ? received : undefined), 10_000, 'redelivered by the session');
    expect(JSON.parse(redelivered.payload.toString()).id).toBe(c.id);
    expect(Buffer.from(redelivered.properties!.correlationData!).toString()).toBe(c.id);
    expect(Buffer.from(redelivered.properties!.correlationData!)).toEqual(Buffer.from(unacked!.properties!.correlationData!));
    await answer(again, redelivered, { ok: true });
    await waitFor(async () => (await status(device.thingId, c.id)).status === 'succeeded', 10_000, 'succeeded');

    // acknowledged but unanswered: the gateway does not send it again (at most once); it expires at its TTL
    const d2 = (await send(device.thingId, { name: 'once', ttlSeconds: 600 })).body;
    await waitFor(() => received.some((p) => JSON.parse(p.payload.toString()).id === d2.id), 10_000, 'second command received');
    await again.endAsync();
    const back: string[] = [];
    const third = await connectDevice(port, device, persistent);
    third.on('message', (_t, payload) => back.push(JSON.parse(payload.toString()).id));
    const marker = (await send(device.thingId, { name: 'marker', ttlSeconds: 60 })).body.id;
    await waitFor(() => back.includes(marker), 10_000, 'marker received');
    expect(back).toEqual([marker]);
    expect((await status(device.thingId, d2.id)).status).toBe('delivered');
    await third.endAsync();
  });

  it('a clean start drops what the previous session held unacknowledged: not sent again, then or later', async () => {
    const device = await ownedDevice();
    const topic = `devices/${device.thingId}/commands`;
    let unacked: IPublishPacket | undefined;
    const crashing = await connectDevice(port, device, { clean: false, properties: { sessionExpiryInterval: 300 }, customHandleAcks: (_t, _m, packet) => { unacked = packet; } });
    await crashing.subscribeAsync(topic, { qos: 1 });
    const c = (await send(device.thingId, { name: 'dropped', ttlSeconds: 600 })).body;
    await waitFor(() => unacked, 10_000, 'command received');
    await crashing.endAsync(true);
    // Clean Start with a session expiry: a new persistent session, the old one's queue dropped as it is read
    const fresh = await connectDevice(port, device, { clean: true, properties: { sessionExpiryInterval: 300 } });
    const seen: string[] = [];
    fresh.on('message', (_t, payload) => seen.push(JSON.parse(payload.toString()).id));
    await fresh.subscribeAsync(topic, { qos: 1 });
    const marker = (await send(device.thingId, { name: 'marker', ttlSeconds: 60 })).body.id;
    await waitFor(() => seen.includes(marker), 10_000, 'marker received');
    await fresh.endAsync();
    const resumed = await connectDevice(port, device, { clean: false, properties: { sessionExpiryInterval: 300 } });
    resumed.on('message', (_t, payload) => seen.push(JSON.parse(payload.toString()).id));
    const marker2 = (await send(device.thingId, { name: 'marker', ttlSeconds: 60 })).body.id;
    await waitFor(() => seen.includes(marker2), 10_000, 'second marker received by the resumed session');
    expect(seen).toEqual([marker, marker2]);
    expect(seen).not.toContain(c.id);
    await resumed.endAsync();
  });
});
