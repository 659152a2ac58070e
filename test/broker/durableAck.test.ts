import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { MqttClient } from 'mqtt';
import { startTestGateway, type TestGateway } from '../helpers/gateway.js';
import { waitFor } from '../helpers/wait.js';
import { closed, connectDevice, issueDevice, type TestDevice } from './fixtures.js';

// A QoS 1 PUBACK (QoS 2 PUBREC) is written only once the message is committed, so a message a
// device got one for survives a kill -9 of the gateway (test/bridges/crash.test.ts kills it).

let gw: TestGateway;
let a: TestDevice;
let b: TestDevice;

beforeAll(async () => {
  gw = await startTestGateway();
  [a, b] = await Promise.all([issueDevice(gw), issueDevice(gw)]);
});
afterAll(async () => gw?.close());

/** the message ids of the PUBACKs (and PUBRECs) the client received */
function acksOf(client: MqttClient): number[] {
  const acks: number[] = [];
  client.on('packetreceive', (p) => {
    if (p.cmd === 'puback' || p.cmd === 'pubrec') acks.push(p.messageId!);
  });
  return acks;
}

/** the device's messages in the telemetry history, oldest first */
async function history(thingId: string): Promise<unknown[]> {
  const rows = await gw.db.sql<{ points: [number, unknown][] }[]>`select points from telemetry_history where thing_id = ${thingId} order by tx, first_at`;
  return rows.flatMap((r) => r.points.map((p) => p[1]));
}

/**
 * Holds an exclusive lock on `table` while `publish` sends; returns once the gateway's write waits
 * for it, with `whileLocked` checked then, and resolves what was sent after the lock is released.
 */
async function whileTableLocked(table: string, publish: () => Promise<unknown>[], whileLocked: () => void): Promise<void> {
  const lock = await gw.db.sql.reserve();
  try {
    await lock`begin`;
    await lock.unsafe(`lock table ${table} in access exclusive mode`);
    const sent = publish();
    await waitFor(async () => {
      const [{ waiting }] = await gw.db.sql<{ waiting: number }[]>`
        select count(*)::int as waiting from pg_locks where relation = ${table}::regclass and not granted`;
      return waiting > 0;
    }, 10_000, `a write waiting for the lock on ${table}`);
    whileLocked();
    await lock`commit`;
    await Promise.all(sent);
  } finally {
    lock.release();
  }
}

describe('durable acknowledgements', () => {
  it('answers QoS 1 and 2 publishes only after their messages are committed, on the fast lane and through Aedes', async () => {
    const client = await connectDevice(gw.mqttPort!, a);
    const acks = acksOf(client);
    const published: number[] = [];
    client.on('packetsend', (p) => {
      if (p.cmd === 'publish') published.push(p.messageId!);
    });
    const topic = `devices/${a.thingId}/telemetry`;
    // the history's writer waits behind a lock this test holds: every message is in a batch that cannot commit, none is answered
    await whileTableLocked('telemetry_history', () => [
      client.publishAsync(topic, '{"n":1}', { qos: 1 }),
      // with a property: Aedes' path, not the fast lane
      client.publishAsync(topic, '{"n":2}', { qos: 1, properties: { contentType: 'application/json' } }),
      client.publishAsync(topic, '{"n":3}', { qos: 2 }),
    ], () => expect(acks).toEqual([]));
    // in the order of the publishes (the PUBREC may come before or after: MQTT orders PUBACKs among themselves)
    expect(acks.filter((id) => id !== published[2])).toEqual(published.slice(0, 2));
    expect(acks).toContain(published[2]);
    expect(await history(a.thingId)).toEqual([{ n: 1 }, { n: 2 }, { n: 3 }]);
    await client.endAsync();
  });

  it('answers a QoS 1 command reply and reported state only after their log and twin writes are committed', async () => {
    const client = await connectDevice(gw.mqttPort!, b);
    const acks = acksOf(client);
    await whileTableLocked('device_message_log', () => [
      client.publishAsync(`devices/${b.thingId}/commands/response`, '{"ok":true}', { qos: 1 }),
      client.publishAsync(`devices/${b.thingId}/twin/reported`, '{"fw":"1.2"}', { qos: 1 }),
    ], () => expect(acks).toEqual([]));
    expect(acks).toHaveLength(2);
    const [twin] = await gw.db.sql<{ reported: unknown }[]>`select reported from device_twins where thing_id = ${b.thingId}`;
    expect(twin.reported).toEqual({ fw: '1.2' });
    await client.endAsync();
  });

  it('closes the connection of a device whose message the database refuses, without its PUBACK; another device in the same batch gets its own', async () => {
    await gw.db.sql`alter table telemetry_history add constraint no_poison check (points::text not like '%poison%')`;
    try {
      const [ca, cb] = await Promise.all([connectDevice(gw.mqttPort!, a), connectDevice(gw.mqttPort!, b)]);
      const acksA = acksOf(ca);
      const acksB = acksOf(cb);
      const closedA = closed(ca);
      ca.publish(`devices/${a.thingId}/telemetry`, '{"poison":true}', { qos: 1 });
      const stored = cb.publishAsync(`devices/${b.thingId}/telemetry`, '{"fine":true}', { qos: 1 });
      await closedA;
      await stored;
      expect(acksA).toEqual([]);
      expect(acksB).toHaveLength(1);
      expect(await history(b.thingId)).toEqual([{ fine: true }]);
      expect(JSON.stringify(await history(a.thingId))).not.toContain('poison');
      await cb.endAsync();
    } finally {
      await gw.db.sql`alter table telemetry_history drop constraint no_poison`;
    }
  });
});
