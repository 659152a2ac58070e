import type { MqttClient } from 'mqtt';
import type { HttpResponse, TestGateway } from '../helpers/gateway.js';
import type { TestAccount } from '../helpers/accounts.js';
import { createClaimGroup, enrollDevice, type EnrolledDevice } from '../helpers/devices.js';
import { connectDevice } from '../broker/fixtures.js';
import { joinOta, otaTopics, type OtaBehaviour } from '../../src/sim/ota.js';

export const SOFTWARE = { version: '2.0.0', url: 'https://updates.example.com/fw-2.0.0.bin', sha256: 'a'.repeat(64), size: 1_048_576 };

/** Enrolls `n` devices of `model` over HTTP (claim flow), `concurrency` at a time. */
export async function enrollFleet(gw: TestGateway, account: TestAccount, n: number, model: string, concurrency = 16): Promise<EnrolledDevice[]> {
  const { sharedSecret } = await createClaimGroup(gw, account, { maxDevices: Math.max(n, 1) });
  const out: EnrolledDevice[] = [];
  let next = 0;
  await Promise.all(Array.from({ length: Math.min(concurrency, n) }, async () => {
    while (next < n) {
      next += 1;
      out.push(await enrollDevice(gw, account, { claimSecret: sharedSecret, model }));
    }
  }));
  return out;
}

/** Connects devices over MQTT 5 mutual TLS, `concurrency` handshakes at a time. */
export async function connectFleet(port: number, devices: EnrolledDevice[], concurrency = 32): Promise<MqttClient[]> {
  const clients: MqttClient[] = new Array(devices.length);
  let next = 0;
  await Promise.all(Array.from({ length: Math.min(concurrency, devices.length) }, async () => {
    while (next < devices.length) {
      const i = next++;
      clients[i] = await connectDevice(port, devices[i], { connectTimeout: 60_000 });
    }
  }));
  return clients;
}

/** A device that takes part in OTA as the simulator's devices do. */
export async function simulatedDevice(port: number, device: EnrolledDevice, behaviour: OtaBehaviour): Promise<MqttClient> {
  const client = await connectDevice(port, device);
  await joinOta(client, device.thingId, behaviour);
  return client;
}

/** A device that records its update actions and reports only when told. */
export async function manualDevice(port: number, device: EnrolledDevice) {
  const client = await connectDevice(port, device);
  const received: { action_id: string; rollout_id: string; version: string; url: string; sha256: string; size: number; correlation: string }[] = [];
  const topics = otaTopics(device.thingId);
  client.on('message', (topic, payload, packet) => {
    if (topic === topics.update) received.push({ ...JSON.parse(payload.toString()), correlation: Buffer.from(packet.properties?.correlationData ?? []).toString() });
  });
  await client.subscribeAsync(topics.update, { qos: 1 });
  const report = (body: Record<string, unknown>, correlation?: string) =>
    client.publishAsync(topics.status, JSON.stringify(body), { qos: 1, properties: correlation ? { correlationData: Buffer.from(correlation) } : undefined });
  return { client, received, report };
}

export async function createFilter(gw: TestGateway, account: TestAccount, query: Record<string, unknown>, name = `filter ${Math.random().toString(36).slice(2, 8)}`) {
  const res = await gw.http.post('/api/v1/ota/target-filters', { name, query }, { token: account.operator });
  if (res.status !== 201) throw new Error(`filter create failed: ${res.status} ${res.text}`);
  return res.body as { id: string; name: string };
}

export async function createRollout(gw: TestGateway, account: TestAccount, filterId: string, opts: { groups?: number | number[]; success?: number; error?: number } = {}) {
  const res = await gw.http.post('/api/v1/ota/rollouts', {
    name: 'rollout', filter_id: filterId, software: SOFTWARE, groups: opts.groups ?? 2, success_threshold: opts.success ?? 80, error_threshold: opts.error ?? 20,
  }, { token: account.operator });
  if (res.status !== 201) throw new Error(`rollout create failed: ${res.status} ${res.text}`);
  return res.body as { id: string; state: string; total_targets: number };
}

export async function control(gw: TestGateway, account: TestAccount, rolloutId: string, verb: 'start' | 'pause' | 'resume' | 'cancel') {
  return gw.http.post(`/api/v1/ota/rollouts/${rolloutId}/${verb}`, undefined, { token: account.operator });
}

export const rolloutOf = async (gw: TestGateway, account: TestAccount, id: string) => (await gw.http.get(`/api/v1/ota/rollouts/${id}`, { token: account.viewer })).body;
export const groupsOf = async (gw: TestGateway, account: TestAccount, id: string) => (await gw.http.get(`/api/v1/ota/rollouts/${id}/groups`, { token: account.viewer })).body.items as { index: number; state: string; succeeded: number; failed: number; skipped: number; total: number }[];

/** Every action of a rollout (all pages). */
export async function actionsOf(gw: TestGateway, account: TestAccount, id: string, query = ''): Promise<{ id: string; thing_id: string; group: number; status: string; progress: number | null; reason: string | null }[]> {
  const out = [];
  let after: string | null = null;
  do {
    const res: HttpResponse = await gw.http.get(`/api/v1/ota/rollouts/${id}/actions?limit=500${query}${after ? `&after=${after}` : ''}`, { token: account.viewer });
    if (res.status !== 200) throw new Error(`actions: ${res.status} ${res.text}`);
    out.push(...res.body.items);
    after = res.body.next_cursor;
  } while (after);
  return out;
}

/** Waits until the gateway wrote the reports it got (no timing: the report buffer says when it is empty). */
export const drained = (gw: TestGateway) => gw.testHooks.ota.drain();
