import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestGateway, type TestGateway } from '../helpers/gateway.js';
import { createAccount } from '../helpers/accounts.js';
import { enrollDevice } from '../helpers/devices.js';
import { waitFor } from '../helpers/wait.js';
import { createBridge, createRule, natsSink, TestStream } from './helpers.js';
import { mosquittoAvailable, mosquittoPub } from './mosquitto.js';

/**
 * Two gateway nodes on one database, devices on both, one telemetry rule (held by one of them): the
 * node that holds it reads the points of the rows it wrote from memory (RecentHistory) and those of
 * the other node's rows from PostgreSQL, by key; everything arrives, in order per thing.
 */
const nats = await natsSink();
if (!nats) console.warn('no NATS on 127.0.0.1:4222 and no nats-server: the two-node bridge test is skipped');

describe.skipIf(!nats || !mosquittoAvailable)('a telemetry rule with devices on two nodes', () => {
  let a: TestGateway;
  let b: TestGateway;
  let stream: TestStream;
  beforeAll(async () => {
    a = await startTestGateway({ NODE_ID: 'bridges-a' });
    b = await startTestGateway({ NODE_ID: 'bridges-b', JOBS: 'false' }, { db: a.db });
    stream = await TestStream.create(nats!.url);
  });
  afterAll(async () => {
    await stream?.close();
    await b?.close();
    await a?.close();
    await nats?.close();
  });

  const rowsRead = async (gw: TestGateway) => {
    const text = (await gw.http.get('/metrics')).text;
    const of = (points: string) => Number(new RegExp(`telemetry_log_rows_read_total\\{points="${points}"\\} (\\d+)`).exec(text)?.[1] ?? 0);
    return { memory: of('memory'), database: of('database') };
  };

  it('delivers every message of both nodes\' devices in order: the holder\'s own rows from memory, the other node\'s from PostgreSQL', async () => {
    const acc = await createAccount(a);
    const ruleId = await createRule(a, acc, { from: 'devices/+/telemetry', bridge_id: await createBridge(a, acc, { type: 'nats', url: nats!.url, subject_prefix: stream.prefix }) });
    // the rule runs on one node (its lag is measured after its first read): from then on that node keeps what it writes
    const running = new RegExp(`bridge_rule_lag_messages\\{rule="${ruleId}"\\}`);
    let holder: TestGateway | undefined;
    await waitFor(async () => {
      for (const gw of [a, b]) if (running.test((await gw.http.get('/metrics')).text)) holder = gw;
      return holder !== undefined;
    }, 30_000, 'the rule read once');
    const other = holder === a ? b : a;
    const devices: Awaited<ReturnType<typeof enrollDevice>>[] = [];
    for (let i = 0; i < 4; i++) devices.push(await enrollDevice(a, acc));
    const nodeOf = (i: number) => (i % 2 === 0 ? holder! : other);
    const N = 40;
    const publish = (i: number, seqs: number[]) => mosquittoPub(nodeOf(i).mqttPort!, devices[i], `devices/${devices[i].thingId}/telemetry`, seqs.map((seq) => `{"seq":${seq},"on":"${nodeOf(i) === holder ? 'holder' : 'other'}"}`));
    const range = (from: number, to: number) => Array.from({ length: to - from }, (_, k) => from + k);
    // first the holder's own devices alone: their rows come from its memory (a read that mixes both nodes' rows and
    // misses more than it finds sends the next reads to PostgreSQL, so only a read of its own rows is sure to)
    for (const r of await Promise.all([0, 2].map((i) => publish(i, range(0, N / 2))))) expect(r.code, r.out).toBe(0);
    await waitFor(async () => (await stream.count()) >= N, 30_000, 'the holder\'s devices\' first messages at the sink');
    expect((await rowsRead(holder!)).memory).toBeGreaterThan(0);
    // then devices on both nodes at once: the other node's rows are read from PostgreSQL, in the same reads
    const results = await Promise.all([0, 1, 2, 3].map((i) => publish(i, i % 2 === 0 ? range(N / 2, N) : range(0, N))));
    for (const r of results) expect(r.code, r.out).toBe(0);
    await waitFor(async () => (await stream.count()) >= 4 * N, 30_000, 'every message at the sink');
    const events = await stream.events();
    expect(events).toHaveLength(4 * N);
    const byThing = new Map<string, number[]>();
    for (const e of events) byThing.set(e.subject, [...(byThing.get(e.subject) ?? []), e.data.seq as number]);
    expect([...byThing.keys()].sort()).toEqual(devices.map((d) => d.thingId).sort());
    for (const seqs of byThing.values()) expect(seqs).toEqual(range(0, N));
    const [own, others] = [await rowsRead(holder!), await rowsRead(other)];
    expect(own.database).toBeGreaterThan(0); // the other node's rows
    // only the holder read: the other node kept nothing and read nothing
    expect(others.memory + others.database).toBe(0);
  }, 120_000);
});
