import crypto from 'node:crypto';
import amqp from 'amqplib';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { expectProblem, startTestGateway, type TestGateway } from '../helpers/gateway.js';
import { createAccount, type TestAccount } from '../helpers/accounts.js';
import { enrollDevice, type EnrolledDevice } from '../helpers/devices.js';
import { waitFor } from '../helpers/wait.js';
import { AMQP_URL, createBridge, createRule, listening, natsSink, rule, TestStream, type CloudEvent } from './helpers.js';
import { mosquittoAvailable, mosquittoPub } from './mosquitto.js';
import { connectDevice } from '../broker/fixtures.js';

// Against the machine's NATS JetStream (127.0.0.1:4222, else a nats-server -js of this file) and
// RabbitMQ (127.0.0.1:5672; its part is skipped where it does not run).
const nats = await natsSink();
const rabbitUp = await listening(5672);
if (!nats) console.warn('no NATS on 127.0.0.1:4222 and no nats-server: the bridge delivery tests are skipped (.ci/run installs nats-server)');
if (!rabbitUp) console.warn('no RabbitMQ on 127.0.0.1:5672: the AMQP deliveries are not checked');
const NATS_URL = nats?.url ?? 'nats://127.0.0.1:4222';
let gw: TestGateway;
let A: TestAccount;
let B: TestAccount;
let C: TestAccount;
const streams: TestStream[] = [];
let amqpConn: amqp.ChannelModel;

beforeAll(async () => {
  // a rule whose sink refuses for 1 s is FAILING (and its owner told)
  gw = await startTestGateway({ BRIDGE_FAILING_AFTER_SECONDS: '1', BRIDGE_RETRY_MAX_MS: '1000' });
  [A, B, C] = await Promise.all([createAccount(gw), createAccount(gw), createAccount(gw)]);
  if (rabbitUp) amqpConn = await amqp.connect(AMQP_URL);
});
afterAll(async () => {
  await Promise.all(streams.map((s) => s.close()));
  await amqpConn?.close().catch(() => {});
  await gw?.close();
  await nats?.close();
});

const stream = async () => {
  const s = await TestStream.create(NATS_URL);
  streams.push(s);
  return s;
};
// written as text: 20.50 as a device sends it (JSON.stringify would write 20.5)
const lines = (device: string, n: number) => Array.from({ length: n }, (_, i) => `{"seq":${i},"device":"${device.slice(0, 8)}","temp":20.50}`);
const seqsByThing = (events: CloudEvent[]) => {
  const out = new Map<string, number[]>();
  for (const e of events) out.set(e.subject, [...(out.get(e.subject) ?? []), e.data.seq as number]);
  return out;
};
const range = (n: number) => Array.from({ length: n }, (_, i) => i);

// Waits are upper bounds of 30 s (they return as soon as they hold): a rule reads below the
// snapshot horizon of the whole PostgreSQL server, which a transaction of another test file's
// database holds back while it runs (docs/decisions.md, Data bridges: "A long transaction anywhere
// in the database holds the horizon back"); in a full parallel run that took over 10 s once.
describe('validation', () => {
  it('answers 400 naming the field, and never returns credentials', async () => {
    const bad = async (path: string, body: Record<string, unknown>, field: RegExp) => {
      const problem = expectProblem(await gw.http.post(path, body, { token: A.operator }), 400);
      expect(problem.detail).toMatch(field);
    };
    const base = { name: 'n', type: 'nats', url: NATS_URL, subject_prefix: 'p' };
    await bad('/api/v1/bridges', { ...base, type: 'kafka' }, /type/);
    await bad('/api/v1/bridges', { ...base, url: 'http://x' }, /url/);
    await bad('/api/v1/bridges', { ...base, type: 'amqp' }, /url/);
    await bad('/api/v1/bridges', { ...base, subject_prefix: 'a.*' }, /subject_prefix/);
    await bad('/api/v1/bridges', { ...base, exchange: 'x' }, /exchange/);
    const amqpBridge = await gw.http.post('/api/v1/bridges', { name: 'rabbit', type: 'amqp', url: 'amqp://guest:s3cret-pw@127.0.0.1:5672', subject_prefix: 'p' }, { token: A.operator });
    expect(amqpBridge.status).toBe(201);
    expect(amqpBridge.text).not.toMatch(/s3cret-pw/);
    expect(amqpBridge.body).toMatchObject({ url: 'amqp://127.0.0.1:5672', has_credentials: true, exchange: 'amq.topic' });
    const [stored] = await gw.db.sql<{ secret_sealed: Buffer; url: string }[]>`select secret_sealed, url from bridges where id = ${amqpBridge.body.id}`;
    expect(stored.secret_sealed.toString('latin1')).not.toMatch(/s3cret-pw/);
    expect(stored.url).not.toMatch(/s3cret-pw/);
    const bridge = amqpBridge.body.id;
    const rb = { name: 'r', bridge_id: bridge, from: 'devices/+/telemetry' };
    await bad('/api/v1/rules', { ...rb, from: 'devices/+/heartbeat' }, /from: .*heartbeat.*\$events\/connectivity/);
    await bad('/api/v1/rules', { ...rb, from: 'devices/#' }, /from: .*several/);
    await bad('/api/v1/rules', { ...rb, from: 'devices/a#' }, /from:/);
    await bad('/api/v1/rules', { ...rb, from: 'things/+/telemetry' }, /from:/);
    await bad('/api/v1/rules', { ...rb, format: 'csv' }, /format/);
    await bad('/api/v1/rules', { ...rb, from: '$events/nothing' }, /from:/);
    await bad('/api/v1/rules', { ...rb, bridge_id: crypto.randomUUID() }, /bridge_id/);
    await bad('/api/v1/rules', { ...rb, select: [] }, /select/);
    await bad('/api/v1/rules', { ...rb, where: { payload: { t: { gt: 'x' } } } }, /where/);
    // another account's bridge does not exist for B
    const foreign = await gw.http.post('/api/v1/rules', rb, { token: B.operator });
    expect(foreign.status).toBe(400);
    expect((await gw.http.get(`/api/v1/bridges/${bridge}`, { token: B.viewer })).status).toBe(404);
    // a viewer reads, never writes
    expect((await gw.http.post('/api/v1/bridges', base, { token: A.viewer })).status).toBe(403);
    // a bridge with rules is not deleted
    const r = await gw.http.post('/api/v1/rules', rb, { token: A.operator });
    expect(r.status).toBe(201);
    expect(r.body.format).toBe('event');
    const badFormat = expectProblem(await gw.http.patch(`/api/v1/rules/${r.body.id}`, { format: 'csv' }, { token: A.operator }), 400);
    expect(badFormat.detail).toMatch(/format/);
    expect((await gw.http.delete(`/api/v1/bridges/${bridge}`, { token: A.operator })).status).toBe(409);
    expect((await gw.http.delete(`/api/v1/rules/${r.body.id}`, { token: A.operator })).status).toBe(204);
    expect((await gw.http.delete(`/api/v1/bridges/${bridge}`, { token: A.operator })).status).toBe(204);
    // the console page and its script
    const pageRes = await gw.http.get('/console/bridges');
    expect(pageRes.status).toBe(200);
    expect(pageRes.text).toMatch(/id="rule-rows"/);
    expect((await gw.http.get('/console/assets/bridges.js')).text).toMatch(/\/api\/v1\/rules/);
  });
});

describe.skipIf(!mosquittoAvailable || !nats)('delivery', () => {
  it("each account's rule receives exactly its own devices' messages, in order (mosquitto_pub, JetStream and RabbitMQ)", async () => {
    const [sA, sB] = [await stream(), await stream()];
    const ruleA = await createRule(gw, A, { from: 'devices/+/telemetry', bridge_id: await createBridge(gw, A, { type: 'nats', url: NATS_URL, subject_prefix: sA.prefix }) });
    const ruleB = await createRule(gw, B, { from: 'devices/+/telemetry', bridge_id: await createBridge(gw, B, { type: 'nats', url: NATS_URL, subject_prefix: sB.prefix }) });
    // B also to RabbitMQ: a queue bound to the bridge's routing keys on amq.topic
    const ch = rabbitUp ? await amqpConn.createChannel() : undefined;
    const fromRabbit: CloudEvent[] = [];
    if (ch) {
      const { queue } = await ch.assertQueue('', { exclusive: true });
      const rabbitPrefix = `rb${crypto.randomBytes(4).toString('hex')}`;
      await ch.bindQueue(queue, 'amq.topic', `${rabbitPrefix}.#`);
      await ch.consume(queue, (m) => { if (m) fromRabbit.push(JSON.parse(m.content.toString())); }, { noAck: true });
      // only values above 9, only `seq`: where and select
      await createRule(gw, B, {
        from: 'devices/+/telemetry', where: { payload: { seq: { gte: 10 } } }, select: ['seq'],
        bridge_id: await createBridge(gw, B, { type: 'amqp', url: 'amqp://127.0.0.1:5672', username: 'guest', password: 'guest', subject_prefix: rabbitPrefix }),
      });
    }
    const N = 30;
    const devices: [TestAccount, EnrolledDevice][] = [];
    for (const acc of [A, A, B, B]) devices.push([acc, await enrollDevice(gw, acc)]);
    const results = await Promise.all(devices.map(([, d]) => mosquittoPub(gw.mqttPort!, d, `devices/${d.thingId}/telemetry`, lines(d.thingId, N))));
    for (const r of results) expect(r.code, r.out).toBe(0);

    await waitFor(async () => (await sA.count()) >= 2 * N && (await sB.count()) >= 2 * N && (!ch || fromRabbit.length >= 2 * (N - 10)), 30_000, 'deliveries');
    const [eA, eB] = [await sA.events(), await sB.events()];
    const own = (acc: TestAccount) => devices.filter(([a]) => a === acc).map(([, d]) => d.thingId).sort();
    for (const [acc, events, ruleId] of [[A, eA, ruleA], [B, eB, ruleB]] as const) {
      const byThing = seqsByThing(events);
      expect([...byThing.keys()].sort()).toEqual(own(acc));
      for (const seqs of byThing.values()) expect(seqs).toEqual(range(N));
      for (const e of events) {
        expect(e).toMatchObject({ specversion: '1.0', type: 'io.gateway.device.telemetry', account: acc.id, kind: 'telemetry', rule: ruleId });
        expect(e._subject).toBe(`${acc === A ? sA.prefix : sB.prefix}.${e.subject}.telemetry`);
        expect(e.source).toBe(`/accounts/${acc.id}/things/${e.subject}`);
        expect(Number.isNaN(Date.parse(e.time))).toBe(false);
      }
    }
    // the payload as the device sent it (20.50 stays 20.50 in the envelope's text)
    const raw = new TextDecoder().decode((await sA.jsm.streams.getMessage(sA.name, { seq: 1 }))!.data);
    expect(raw).toMatch(/"data":\{"seq":0,"device":"[0-9a-f]{8}","temp":20.50\}/);
    if (ch) {
      const rabbitByThing = seqsByThing(fromRabbit);
      expect([...rabbitByThing.keys()].sort()).toEqual(own(B));
      for (const seqs of rabbitByThing.values()) expect(seqs).toEqual(range(N).slice(10));
      for (const e of fromRabbit) expect(Object.keys(e.data)).toEqual(['seq']);
      await ch.close();
    }

    const view = await waitFor(async () => { const r = await rule(gw, A, ruleA); return r.lag.messages === 0 && r.delivered >= 2 * N ? r : undefined; }, 30_000, 'lag 0');
    expect(view).toMatchObject({ status: 'ENABLED', failed: 0, lag: { messages: 0, seconds: 0 } });
    // the gauge is the worker's measure of every 2 s (GET computes the lag when asked): it follows
    const lagZero = new RegExp(`bridge_rule_lag_messages\\{rule="${ruleA}"\\} 0`);
    const metrics = await waitFor(async () => { const text = (await gw.http.get('/metrics')).text; return lagZero.test(text) ? text : undefined; }, 10_000, 'lag gauge 0');
    expect(metrics).toMatch(new RegExp(`bridge_rule_delivered_total\\{rule="${ruleA}"\\} ${2 * N}`));
    // the rules were at the head when the devices published: they took the points from the node's memory of what it wrote
    // (RecentHistory), the same bytes as stored (the 20.50 above)
    expect(Number(/telemetry_log_rows_read_total\{points="memory"\} (\d+)/.exec(metrics)?.[1])).toBeGreaterThan(0);
  }, 120_000);

  it("connectivity events reach an events rule; a disabled rule delivers nothing until enabled, then resumes", async () => {
    const s = await stream();
    const id = await createRule(gw, A, { from: '$events/connectivity', bridge_id: await createBridge(gw, A, { type: 'nats', url: NATS_URL, subject_prefix: s.prefix }) });
    expect((await gw.http.patch(`/api/v1/rules/${id}`, { enabled: false }, { token: A.operator })).body.status).toBe('DISABLED');
    const d = await enrollDevice(gw, A);
    expect((await mosquittoPub(gw.mqttPort!, d, `devices/${d.thingId}/telemetry`, ['{"x":1}'])).code).toBe(0);
    await waitFor(async () => (await rule(gw, A, id)).lag.messages === 2, 30_000, 'connect and disconnect waiting');
    expect(await s.count()).toBe(0);
    expect((await gw.http.patch(`/api/v1/rules/${id}`, { enabled: true }, { token: A.operator })).body.status).toBe('ENABLED');
    await waitFor(async () => (await s.count()) === 2, 30_000, 'two events');
    const events = await s.events();
    expect(events.map((e) => e.type)).toEqual(['io.gateway.device.connected', 'io.gateway.device.disconnected']);
    expect(events.every((e) => e.subject === d.thingId && e.kind === 'connectivity')).toBe(true);
  }, 120_000);

  it('format batch: a backlog goes as JSON arrays of the same CloudEvents, in order, one thing per message, with the first event\'s id', async () => {
    const [sEvent, sBatch] = [await stream(), await stream()];
    const d = await enrollDevice(gw, A);
    const only = `devices/${d.thingId}/telemetry`;
    const eventRule = await createRule(gw, A, { from: only, bridge_id: await createBridge(gw, A, { type: 'nats', url: NATS_URL, subject_prefix: sEvent.prefix }) });
    const batchRule = await createRule(gw, A, { from: only, format: 'batch', enabled: false, bridge_id: await createBridge(gw, A, { type: 'nats', url: NATS_URL, subject_prefix: sBatch.prefix }) });
    expect((await rule(gw, A, batchRule)).format).toBe('batch');
    const ch = rabbitUp ? await amqpConn.createChannel() : undefined;
    const fromRabbit: amqp.ConsumeMessage[] = [];
    if (ch) {
      const { queue } = await ch.assertQueue('', { exclusive: true });
      const rabbitPrefix = `rb${crypto.randomBytes(4).toString('hex')}`;
      await ch.bindQueue(queue, 'amq.topic', `${rabbitPrefix}.#`);
      await ch.consume(queue, (m) => { if (m) fromRabbit.push(m); }, { noAck: true });
      await createRule(gw, A, {
        from: only, format: 'batch', bridge_id: await createBridge(gw, A, { type: 'amqp', url: AMQP_URL, subject_prefix: rabbitPrefix }),
      });
    }
    const N = 30;
    const r = await mosquittoPub(gw.mqttPort!, d, only, lines(d.thingId, N));
    expect(r.code, r.out).toBe(0);
    // every message stored and waiting for the disabled batch rule: enabled, it reads them as one backlog
    await waitFor(async () => (await rule(gw, A, batchRule)).lag.messages === N, 30_000, 'backlog');
    expect((await gw.http.patch(`/api/v1/rules/${batchRule}`, { enabled: true }, { token: A.operator })).body.status).toBe('ENABLED');
    await waitFor(async () => (await sEvent.count()) === N && (await rule(gw, A, batchRule)).delivered === N, 30_000, 'both rules');

    const single = await sEvent.events();
    const batches = await sBatch.raw();
    // one device's backlog in one read: fewer messages than events (a read of 64 rows holds all 30)
    expect(batches.length).toBeLessThan(N);
    const flat: CloudEvent[] = [];
    for (const b of batches) {
      const events = JSON.parse(b.text) as CloudEvent[];
      expect(Array.isArray(events) && events.length > 0).toBe(true);
      expect(b.subject).toBe(`${sBatch.prefix}.${d.thingId}.telemetry`);
      expect(b.msgId).toBe(`${batchRule}:${events[0].id}:batch:${events.length}`);
      flat.push(...events);
    }
    // the same events as the one-per-message rule's (ids, times, data as sent), in order; only `rule` differs
    const strip = ({ rule: ruleId, ...e }: CloudEvent & { _subject?: string }) => { void ruleId; const { _subject, ...rest } = e; void _subject; return rest; };
    expect(flat.map(strip)).toEqual(single.map(strip));
    expect(flat.every((e) => e.rule === batchRule) && single.every((e) => e.rule === eventRule)).toBe(true);
    expect(flat.map((e) => e.data.seq)).toEqual(range(N));
    expect(batches.map((b) => b.text).join('')).toMatch(/"temp":20\.50\}/);
    if (ch) {
      await waitFor(async () => fromRabbit.reduce((n, m) => n + (JSON.parse(m.content.toString()) as unknown[]).length, 0) >= N, 30_000, 'RabbitMQ batches');
      for (const m of fromRabbit) expect(m.properties.contentType).toBe('application/cloudevents-batch+json');
      expect(fromRabbit.flatMap((m) => (JSON.parse(m.content.toString()) as CloudEvent[]).map((e) => e.data.seq))).toEqual(range(N));
      await ch.close();
    }
    // back to one event per message: the next messages go one by one
    expect((await gw.http.patch(`/api/v1/rules/${batchRule}`, { format: 'event' }, { token: A.operator })).body.format).toBe('event');
    expect((await mosquittoPub(gw.mqttPort!, d, only, ['{"seq":99}'])).code).toBe(0);
    await waitFor(async () => (await sBatch.count()) === batches.length + 1, 30_000, 'one more message');
    const last = (await sBatch.raw()).at(-1)!;
    expect(JSON.parse(last.text)).toMatchObject({ specversion: '1.0', rule: batchRule, data: { seq: 99 } });
  }, 120_000);

  it('a backlog longer than one read (150 history rows) arrives whole and in order, in both formats', async () => {
    const [sEvent, sBatch] = [await stream(), await stream()];
    const d = await enrollDevice(gw, A);
    const only = `devices/${d.thingId}/telemetry`;
    const rules = [
      await createRule(gw, A, { from: only, enabled: false, bridge_id: await createBridge(gw, A, { type: 'nats', url: NATS_URL, subject_prefix: sEvent.prefix }) }),
      await createRule(gw, A, { from: only, format: 'batch', enabled: false, bridge_id: await createBridge(gw, A, { type: 'nats', url: NATS_URL, subject_prefix: sBatch.prefix }) }),
    ];
    // one message at a time: each waits for its PUBACK, so each is an ingest batch and a history row of its own
    const N = 150;
    const client = await connectDevice(gw.mqttPort!, d);
    for (let i = 0; i < N; i++) await client.publishAsync(only, `{"seq":${i}}`, { qos: 1 });
    await client.endAsync();
    await waitFor(async () => (await Promise.all(rules.map((id) => rule(gw, A, id)))).every((r) => r.lag.messages === N), 30_000, 'backlog');
    const [rows] = await gw.db.sql<{ n: number }[]>`select count(*)::int as n from telemetry_history where thing_id = ${d.thingId}`;
    expect(rows.n).toBeGreaterThan(64); // more than a rule's first read
    for (const id of rules) expect((await gw.http.patch(`/api/v1/rules/${id}`, { enabled: true }, { token: A.operator })).status).toBe(200);
    await waitFor(async () => (await Promise.all(rules.map((id) => rule(gw, A, id)))).every((r) => r.delivered === N && r.lag.messages === 0), 30_000, 'both delivered');
    expect((await sEvent.events()).map((e) => e.data.seq)).toEqual(range(N));
    expect((await sBatch.raw()).flatMap((m) => (JSON.parse(m.text) as CloudEvent[]).map((e) => e.data.seq))).toEqual(range(N));
  }, 120_000);

  it('a bridge changed while its rule runs: the next deliveries go where it now says', async () => {
    const [before, after] = [await stream(), await stream()];
    const d = await enrollDevice(gw, A);
    const only = `devices/${d.thingId}/telemetry`;
    const bridge = await createBridge(gw, A, { type: 'nats', url: NATS_URL, subject_prefix: before.prefix });
    const id = await createRule(gw, A, { from: only, bridge_id: bridge });
    const client = await connectDevice(gw.mqttPort!, d);
    for (let i = 0; i < 5; i++) await client.publishAsync(only, `{"seq":${i}}`, { qos: 1 });
    await waitFor(async () => (await before.count()) === 5, 30_000, 'the first five under the old prefix');
    // the rule keeps its bridge between deliveries: the change must reach it
    expect((await gw.http.patch(`/api/v1/bridges/${bridge}`, { subject_prefix: after.prefix }, { token: A.operator })).status).toBe(200);
    for (let i = 5; i < 10; i++) await client.publishAsync(only, `{"seq":${i}}`, { qos: 1 });
    await client.endAsync();
    await waitFor(async () => (await rule(gw, A, id)).delivered === 10, 30_000, 'ten delivered');
    expect((await after.events()).map((e) => e.data.seq)).toEqual([5, 6, 7, 8, 9]);
    expect((await before.events()).map((e) => e.data.seq)).toEqual([0, 1, 2, 3, 4]);
  });

  it("a sink refusing one account's messages does not delay another account's rule; the refused rule is FAILING, its owner told, and nothing is lost", async () => {
    // C's prefix is captured by no stream yet: JetStream refuses every publish (no responders)
    const refusedPrefix = `refused${crypto.randomBytes(4).toString('hex')}`;
    const ruleC = await createRule(gw, C, { from: 'devices/+/telemetry', bridge_id: await createBridge(gw, C, { type: 'nats', url: NATS_URL, subject_prefix: refusedPrefix }) });
    const sA = await stream();
    const ruleA = await createRule(gw, A, { from: 'devices/+/telemetry', bridge_id: await createBridge(gw, A, { type: 'nats', url: NATS_URL, subject_prefix: sA.prefix }) });
    const [dA, dC] = [await enrollDevice(gw, A), await enrollDevice(gw, C)];
    expect((await mosquittoPub(gw.mqttPort!, dC, `devices/${dC.thingId}/telemetry`, lines(dC.thingId, 10))).code).toBe(0);
    const failing = await waitFor(async () => { const r = await rule(gw, C, ruleC); return r.status === 'FAILING' ? r : undefined; }, 30_000, 'C failing');
    expect(failing.last_error).toMatch(/refused/i);
    expect(failing.failing_since).not.toBeNull();
    expect(failing.delivered).toBe(0);
    expect(failing.lag.messages).toBe(10);
    // while C fails, A's messages go through
    expect((await mosquittoPub(gw.mqttPort!, dA, `devices/${dA.thingId}/telemetry`, lines(dA.thingId, 10))).code).toBe(0);
    // A's rule is new, but telemetry of A's device of the test before may commit after it started: count dA's own
    await waitFor(async () => ((seqsByThing(await sA.events()).get(dA.thingId) ?? []).length === 10 ? true : undefined), 30_000, "A's messages");
    expect(seqsByThing(await sA.events()).get(dA.thingId)).toEqual(range(10));
    expect((await rule(gw, A, ruleA)).status).toBe('ENABLED');
    expect((await rule(gw, C, ruleC)).delivered).toBe(0);
    // C's owner is told
    const feed = await waitFor(async () => {
      const res = await gw.http.get('/api/notifications/feed', { token: C.admin, headers: { 'x-account-id': C.id } });
      return res.body.items?.find((i: { title: string }) => /is failing/.test(i.title));
    }, 30_000, 'failing notification');
    expect(feed.title).toMatch(/rule .* is failing/i);
    // the sink accepts again: C's messages arrive, in order, and the rule recovers
    const sC = await TestStream.create(NATS_URL, refusedPrefix);
    streams.push(sC);
    await waitFor(async () => ((seqsByThing(await sC.events()).get(dC.thingId) ?? []).length === 10 ? true : undefined), 30_000, "C's messages after recovery");
    expect(seqsByThing(await sC.events()).get(dC.thingId)).toEqual(range(10));
    await waitFor(async () => (await rule(gw, C, ruleC)).status === 'ENABLED', 30_000, 'C recovered');
    expect((await gw.http.get('/metrics')).text).toMatch(new RegExp(`bridge_rule_failed_total\\{rule="${ruleC}"\\} [1-9]`));
  }, 120_000);
});
