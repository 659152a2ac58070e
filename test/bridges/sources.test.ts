import type { IPublishPacket, MqttClient } from 'mqtt';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { expectProblem, startTestGateway, type TestGateway } from '../helpers/gateway.js';
import { createAccount, type TestAccount } from '../helpers/accounts.js';
import { enrollDevice } from '../helpers/devices.js';
import { waitFor } from '../helpers/wait.js';
import { connectDevice } from '../broker/fixtures.js';
import { createBridge, createRule, natsSink, rule, TestStream } from './helpers.js';

// Twin reports and command replies as rule sources (the device message log, migration 1960),
// against the machine's NATS JetStream (127.0.0.1:4222, else a nats-server -js of this file).
const nats = await natsSink();
if (!nats) console.warn('no NATS on 127.0.0.1:4222 and no nats-server: the twin and reply source tests are skipped');
let gw: TestGateway;
let A: TestAccount;
let B: TestAccount;
const streams: TestStream[] = [];
const clients: MqttClient[] = [];

beforeAll(async () => {
  gw = await startTestGateway();
  [A, B] = await Promise.all([createAccount(gw), createAccount(gw)]);
});
afterAll(async () => {
  await Promise.all(clients.map((c) => c.endAsync().catch(() => {})));
  await Promise.all(streams.map((s) => s.close()));
  await gw?.close();
  await nats?.close();
});

/** A device of `account` connected with mqtt.js (MQTT 5), answering each command with the next of `replies` (as text). */
async function device(account: TestAccount, replies: string[]) {
  const d = await enrollDevice(gw, account);
  const client = await connectDevice(gw.mqttPort!, d);
  clients.push(client);
  client.on('message', (topic, _payload, packet: IPublishPacket) => {
    if (topic !== `devices/${d.thingId}/commands`) return;
    void client.publishAsync(packet.properties!.responseTopic!, replies.shift() ?? '{}', { qos: 1, properties: { correlationData: packet.properties!.correlationData } });
  });
  await client.subscribeAsync(`devices/${d.thingId}/commands`, { qos: 1 });
  return { thingId: d.thingId, client };
}

const command = async (account: TestAccount, thingId: string, name: string) => {
  const res = await gw.http.post(`/api/v1/things/${thingId}/commands`, { name, payload: {}, timeoutMs: 10_000 }, { token: account.operator });
  expect(res.status, res.text).toBe(200);
  return res.body.id as string;
};

describe.skipIf(!nats)('twin reports and command replies', () => {
  it("reach their rules' sinks as CloudEvents with the device's payload, only the own account's; unsupported `from` is 400", async () => {
    const url = nats!.url;
    const [sTwin, sReply] = [await TestStream.create(url), await TestStream.create(url)];
    streams.push(sTwin, sReply);
    const twinBridge = await createBridge(gw, A, { type: 'nats', url, subject_prefix: sTwin.prefix });
    for (const [from, detail] of [
      ['devices/+/heartbeat', /^from: .*heartbeat.*\$events\/connectivity/],
      ['devices/#', /^from: .*several device topics/],
      ['devices/+/ota/status', /^from: .*durable/],
    ] as const) {
      expect(expectProblem(await gw.http.post('/api/v1/rules', { name: 'bad', from, bridge_id: twinBridge }, { token: A.operator }), 400).detail).toMatch(detail);
    }
    const twinRule = await createRule(gw, A, { from: 'devices/+/twin/reported', bridge_id: twinBridge });
    // only successful replies: `where` on the reply's fields
    const replyRule = await createRule(gw, A, {
      from: 'devices/+/commands/response', where: { payload: { ok: true } },
      bridge_id: await createBridge(gw, A, { type: 'nats', url, subject_prefix: sReply.prefix }),
    });
    expect((await rule(gw, A, replyRule)).source).toBe('commandReply');

    const okReply = '{"ok": true, "uptime": 7}';
    const a = await device(A, ['{"ok":false,"error":"busy"}', okReply]);
    const b = await device(B, ['{"ok":true,"uptime":1}']);
    const reports = [{ fw: '1.2.0', seq: 1 }, { fw: '1.2.1', seq: 2 }];
    for (const d of [a, b]) for (const r of reports) await d.client.publishAsync(`devices/${d.thingId}/twin/reported`, JSON.stringify(r), { qos: 1 });
    await command(A, a.thingId, 'reboot');
    const okId = await command(A, a.thingId, 'reboot');
    await command(B, b.thingId, 'reboot');

    // every message of the account delivered (lag 0), B's never
    for (const [id, n] of [[twinRule, 2], [replyRule, 1]] as const) {
      await waitFor(async () => { const r = await rule(gw, A, id); return r.delivered === n && r.lag.messages === 0 ? true : undefined; }, 30_000, `rule ${id} delivered ${n}`);
    }
    const twins = await sTwin.events();
    expect(twins.map((e) => e.data)).toEqual(reports);
    for (const e of twins) {
      expect(e).toMatchObject({
        specversion: '1.0', type: 'io.gateway.device.twinReported', subject: a.thingId, source: `/accounts/${A.id}/things/${a.thingId}`,
        account: A.id, kind: 'twin', rule: twinRule, _subject: `${sTwin.prefix}.${a.thingId}.twin`,
      });
      expect(Number.isNaN(Date.parse(e.time))).toBe(false);
    }
    const [reply, ...more] = await sReply.events();
    expect(more).toEqual([]);
    expect(reply).toMatchObject({
      specversion: '1.0', type: 'io.gateway.device.commandReplied', subject: a.thingId, account: A.id, kind: 'commandReply',
      rule: replyRule, commandid: okId, data: { ok: true, uptime: 7 }, _subject: `${sReply.prefix}.${a.thingId}.commandReply`,
    });
    // a reply's data is the device's bytes, spliced in as sent
    const raw = new TextDecoder().decode((await sReply.jsm.streams.getMessage(sReply.name, { seq: 1 }))!.data);
    expect(raw).toContain(`"data":${okReply}`);
  }, 120_000);
});
