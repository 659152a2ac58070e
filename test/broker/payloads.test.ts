import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { MqttClient } from 'mqtt';
import { startTestGateway, type TestGateway } from '../helpers/gateway.js';
import { createAccount, type TestAccount } from '../helpers/accounts.js';
import { createClaimGroup, enrollDevice } from '../helpers/devices.js';
import { waitFor } from '../helpers/wait.js';
import { PAYLOAD_PROBLEMS, type PayloadProblem } from '../../src/broker/payload.js';
import { connectDevice, metric, nextMessage, pubackCode, type TestDevice } from './fixtures.js';

let gw: TestGateway;
let accounts: { account: TestAccount; claimSecret: string }[];

beforeAll(async () => {
  gw = await startTestGateway();
  accounts = [];
  for (let i = 0; i < 2; i++) {
    const account = await createAccount(gw);
    accounts.push({ account, claimSecret: (await createClaimGroup(gw, account)).sharedSecret });
  }
});
afterAll(async () => gw?.close());

const device = (i = 0): Promise<TestDevice> => enrollDevice(gw, accounts[i].account, { claimSecret: accounts[i].claimSecret });
/** broker_payloads_rejected_total on /metrics, by reason */
const rejected = async () => Object.fromEntries(await Promise.all(PAYLOAD_PROBLEMS.map(async (reason) => [reason, await metric(gw, 'broker_payloads_rejected_total', { reason })]))) as Record<PayloadProblem, number>;
const telemetryTopic = (d: TestDevice) => `devices/${d.thingId}/telemetry`;

type Stored = Map<string, Record<string, unknown>>;

/**
 * The stored latest telemetry of each thing, once every one has a row and `complete` holds (the
 * last values may be in the next batch); after 10 s, whatever is stored (the caller's expects fail).
 */
async function storedTelemetry(thingIds: string[], complete: (stored: Stored) => boolean = () => true): Promise<Stored> {
  const read = async () => {
    const rows = await gw.db.sql<{ thing_id: string; telemetry: Record<string, unknown> }[]>`
      select thing_id, telemetry from device_telemetry_latest where thing_id in ${gw.db.sql(thingIds)}`;
    return new Map(rows.map((r) => [r.thing_id, r.telemetry]));
  };
  try {
    return await waitFor(async () => {
      const stored = await read();
      return stored.size === thingIds.length && complete(stored) ? stored : undefined;
    }, 10_000, 'telemetry rows');
  } catch {
    return read();
  }
}

// JSON texts (as a device sends them): `\u0000` and an unpaired `\ud800` are escapes inside the JSON
const NUL_ESCAPED = '{"bad":"\\u0000"}';
const LONE_SURROGATE = '{"bad":"\\ud800"}';

describe('a payload the gateway cannot store is refused alone', () => {
  it('devices of two accounts publish in the same window as a poisoned one: every good message is stored', async () => {
    const good = await Promise.all(Array.from({ length: 16 }, (_, i) => device(i % 2)));
    const poisoned = await device(0);
    const clients = await Promise.all(good.map((d, i) => connectDevice(gw.mqttPort!, d, { protocolVersion: i % 4 === 3 ? 4 : 5 })));
    const poisonedClient = await connectDevice(gw.mqttPort!, poisoned);
    const before = await rejected();

    // all at once: three messages per good device, and NUL, lone surrogate, then a good value from the poisoned one
    const [goodCodes, poisonedCodes] = await Promise.all([
      Promise.all(clients.map((c, i) => Promise.all([0, 1, 2].map((k) => pubackCode(c, telemetryTopic(good[i]), JSON.stringify({ [`k${k}`]: i })))))),
      Promise.all([NUL_ESCAPED, LONE_SURROGATE, '{"ok":1}'].map((p) => pubackCode(poisonedClient, telemetryTopic(poisoned), p))),
    ]);
    expect(goodCodes.flat()).toEqual(Array(48).fill(0));
    expect(poisonedCodes).toEqual([0x99, 0x99, 0]);
    expect((await rejected()).nul - before.nul).toBe(1);
    expect((await rejected()).lone_surrogate - before.lone_surrogate).toBe(1);

    const stored = await storedTelemetry([...good, poisoned].map((d) => d.thingId), (s) => good.every((d) => Object.keys(s.get(d.thingId)!).length === 3));
    expect(stored.size).toBe(17);
    good.forEach((d, i) => expect(stored.get(d.thingId)).toEqual({ k0: i, k1: i, k2: i }));
    expect(stored.get(poisoned.thingId)).toEqual({ ok: 1 });
    // the refused publishes did not cost the connection
    expect(poisonedClient.connected).toBe(true);
    await Promise.all([...clients, poisonedClient].map((c) => c.endAsync()));
  });

  it('MQTT 5: PUBACK 0x99 for each kind of unstorable payload on the JSON topics, 0 for the rest; the connection stays', async () => {
    const d = await device();
    const client = await connectDevice(gw.mqttPort!, d);
    const topic = telemetryTopic(d);
    const nested = (depth: number) => `{"a":${'['.repeat(depth - 1)}${']'.repeat(depth - 1)}}`;
    const before = await rejected();
    const cases: [string, string | Buffer, number][] = [
      ['not JSON', 'temperature=21', 0x99],
      ['JSON but not an object', '[1,2]', 0x99],
      ['escaped NUL in a key', '{"\\u0000":1}', 0x99],
      ['raw NUL byte', Buffer.from('{"a":"x\u0000"}'), 0x99],
      ['raw invalid UTF-8', Buffer.from([0x7b, 0x22, 0x61, 0x22, 0x3a, 0x22, 0xff, 0x22, 0x7d]), 0x99],
      ['lone low surrogate', '{"a":"x\\udc00y"}', 0x99],
      ['high surrogate followed by a non-surrogate escape', '{"a":"\\ud800\\u0041"}', 0x99],
      ['65 levels', nested(65), 0x99],
      ['a number beyond what the database holds', '{"a":1e10000}', 0x99],
      ['a large number the database holds', '{"a":-1.5e9999}', 0],
      ['64 levels', nested(64), 0],
      ['an escaped backslash before u0000 (text, not a NUL)', '{"a":"\\\\u0000"}', 0],
      ['an escaped surrogate pair', '{"a":"\\ud83d\\ude00"}', 0],
      ['raw non-ASCII UTF-8', '{"a":"été ✓ 😀"}', 0],
    ];
    const codes: Record<string, number> = {};
    for (const [name, payload] of cases) codes[name] = await pubackCode(client, topic, payload);
    expect(codes).toEqual(Object.fromEntries(cases.map(([name, , code]) => [name, code])));
    const after = await rejected();
    expect(Object.fromEntries(Object.keys(after).map((k) => [k, after[k as keyof typeof after] - before[k as keyof typeof before]]))).toEqual({
      too_large: 0, invalid_utf8: 1, nul: 2, lone_surrogate: 2, not_json: 1, not_object: 1, too_deep: 1, number_out_of_range: 1,
    });

    // the same rules on reported state and command replies; heartbeat and the device's own topics take anything
    expect(await pubackCode(client, `devices/${d.thingId}/twin/reported`, LONE_SURROGATE)).toBe(0x99);
    expect(await pubackCode(client, `devices/${d.thingId}/twin/reported`, '"v1"')).toBe(0x99);
    expect(await pubackCode(client, `devices/${d.thingId}/commands/response`, 'done')).toBe(0x99);
    expect(await pubackCode(client, `devices/${d.thingId}/commands/response`, '"done"')).toBe(0);
    expect(await pubackCode(client, `devices/${d.thingId}/heartbeat`, 'not json')).toBe(0);
    // QoS 2: PUBREC 0x99 ends the exchange
    expect(await pubackCode(client, topic, NUL_ESCAPED, 2)).toBe(0x99);
    expect(await pubackCode(client, topic, '{"q2":true}', 2)).toBe(0);
    expect(await pubackCode(client, `devices/${d.thingId}/echo`, Buffer.from([0, 0xff]))).toBe(0);
    expect(client.connected).toBe(true);

    // nothing refused was stored, and /metrics reports the counts by reason
    const twin = await gw.http.get(`/api/v1/things/${d.thingId}/twin`, { token: accounts[0].account.viewer });
    expect(twin.body.reported.version).toBe(0);
    const stored = await storedTelemetry([d.thingId], (s) => 'q2' in s.get(d.thingId)!);
    expect(Object.keys(stored.get(d.thingId)!).sort()).toEqual(['a', 'q2']);
    const metrics = await (await fetch(`${gw.httpUrl}/metrics`)).text();
    expect(Number(/^broker_payloads_rejected_total\{reason="too_deep"\} (\d+)$/m.exec(metrics)?.[1])).toBe(after.too_deep);
    await client.endAsync();
  });

  it('an oversized JSON payload (over 64 KiB) is refused with 0x99', async () => {
    const d = await device();
    const client = await connectDevice(gw.mqttPort!, d);
    const before = (await rejected()).too_large;
    expect(await pubackCode(client, telemetryTopic(d), JSON.stringify({ a: 'x'.repeat(70 * 1024) }))).toBe(0x99);
    expect((await rejected()).too_large - before).toBe(1);
    await client.endAsync();
  });

  it('MQTT 3.1.1 (no failure code): a poisoned message, QoS 0 or 1, is acknowledged, dropped (never delivered) and counted', async () => {
    const d = await device(1);
    const client: MqttClient = await connectDevice(gw.mqttPort!, d, { protocolVersion: 4 });
    await client.subscribeAsync(telemetryTopic(d), { qos: 1 });
    const received: string[] = [];
    client.on('message', (topic, payload) => received.push(payload.toString()));
    const before = await rejected();
    await client.publishAsync(telemetryTopic(d), NUL_ESCAPED, { qos: 1 });
    await client.publishAsync(telemetryTopic(d), LONE_SURROGATE, { qos: 0 });
    await client.publishAsync(telemetryTopic(d), 'plain text', { qos: 1 });
    await client.publishAsync(telemetryTopic(d), '[]', { qos: 2 });
    const delivered = nextMessage(client, telemetryTopic(d));
    await client.publishAsync(telemetryTopic(d), '{"ok":true}', { qos: 1 });
    await delivered;
    // messages on one topic arrive in order: the refused ones, published first, were never forwarded
    expect(received).toEqual(['{"ok":true}']);
    expect((await rejected()).nul - before.nul).toBe(1);
    expect((await rejected()).lone_surrogate - before.lone_surrogate).toBe(1);
    expect((await rejected()).not_json - before.not_json).toBe(1);
    expect((await rejected()).not_object - before.not_object).toBe(1);
    expect(client.connected).toBe(true);
    expect((await storedTelemetry([d.thingId])).get(d.thingId)).toEqual({ ok: true });
    await client.endAsync();
  });

  it('a value the database refuses although it passed the checks costs only its device (the batch is retried in parts)', async () => {
    // a storage cap the broker does not know: an operator's constraint on the latest-values table
    await gw.db.sql`alter table device_telemetry_latest add constraint telemetry_capped check (pg_column_size(telemetry) < 1024)`;
    try {
      const good = await Promise.all(Array.from({ length: 8 }, (_, i) => device(i % 2)));
      const big = await device(0);
      const clients = await Promise.all([...good, big].map((d) => connectDevice(gw.mqttPort!, d)));
      const codes = await Promise.all([...good, big].map((d, i) =>
        pubackCode(clients[i], telemetryTopic(d), JSON.stringify(d === big ? { blob: 'x'.repeat(4096) } : { n: i }))));
      // valid JSON under 64 KiB: accepted on the wire
      expect(codes).toEqual(Array(9).fill(0));
      const stored = await storedTelemetry(good.map((d) => d.thingId));
      good.forEach((d, i) => expect(stored.get(d.thingId)).toEqual({ n: i }));
      const dropped = async () => /^broker_ingest_rows_dropped_total\{table="telemetry"\} (\d+)$/m.exec(await (await fetch(`${gw.httpUrl}/metrics`)).text())?.[1];
      await waitFor(async () => (await dropped()) === '1', 10_000, 'the refused row counted');
      const [{ count }] = await gw.db.sql<{ count: number }[]>`select count(*)::int as count from device_telemetry_latest where thing_id = ${big.thingId}`;
      expect(count).toBe(0);
      await Promise.all(clients.map((c) => c.endAsync()));
    } finally {
      await gw.db.sql`alter table device_telemetry_latest drop constraint telemetry_capped`;
    }
  });
});
