import net from 'node:net';
import { afterAll, describe, expect, it } from 'vitest';
import { DeliveryError, InlineDelivery, type DeliveryRule } from '../../src/bridges/delivery.js';
import { ThreadDelivery } from '../../src/bridges/deliveryThread.js';
import { createLogger } from '../../src/log.js';

const silent = createLogger('silent', false);
const delivery = new ThreadDelivery(silent);
afterAll(() => delivery.stop());

const rule = (url: string, timeoutMs = 2_000): DeliveryRule => ({
  id: 'r1', runner: 'r1#1', accountId: 'a1', format: 'batch', where: null, select: null, prefix: 'p',
  sink: { key: url, settings: { type: 'nats', url, timeoutMs } },
});
const telemetry = () => {
  const row = Buffer.from('[[1767225600000,{"t":1}],[1767225600001,{"t":2}]]');
  const points = new Uint8Array(new ArrayBuffer(row.length));
  points.set(row);
  return { rows: [{ tx: '7', thingId: 'th', messages: 2, start: 0, end: row.length }], points };
};

/**
 * The delivery thread (issue 34): telemetry's bytes cross to it as a transfer; a refused publish
 * comes back as a DeliveryError counting the events; a thread that ends fails what it had in hand
 * and the next delivery starts a new one.
 */
describe('ThreadDelivery', () => {
  it('transfers the bytes, and a sink that refuses is a DeliveryError with the events counted', async () => {
    const closed = await new Promise<number>((resolve) => {
      const s = net.createServer().listen(0, '127.0.0.1', () => {
        const { port } = s.address() as net.AddressInfo;
        s.close(() => resolve(port));
      });
    });
    const input = telemetry();
    const done = delivery.deliver(rule(`nats://127.0.0.1:${closed}`), { telemetry: input });
    expect(input.points.byteLength).toBe(0); // moved to the thread, not copied
    const err = await done.then(() => undefined, (e: unknown) => e);
    expect(err).toBeInstanceOf(DeliveryError);
    expect((err as DeliveryError).events).toBe(2);
  });

  it('a rule leased again delivers through a sink of its own: closing the old loop leaves the new one', async () => {
    const inline = new InlineDelivery();
    const state = () => (inline as unknown as { rules: Map<string, { sink?: unknown }> }).rules;
    const url = 'nats://127.0.0.1:9'; // nothing listens: refused, but each loop's sink is opened
    const events = { events: [{ kind: 'state' as const, thingId: 'th', id: 'ev-1', type: 't', time: '2026-01-01T00:00:00.000Z', payload: '{}' }] };
    await inline.deliver({ ...rule(url), runner: 'r1#1' }, events).catch(() => {});
    await inline.deliver({ ...rule(url), runner: 'r1#2' }, events).catch(() => {});
    const second = state().get('r1#2')?.sink;
    expect(second).toBeDefined();
    expect(state().get('r1#1')?.sink).not.toBe(second);
    await inline.close('r1#1');
    expect([...state().keys()]).toEqual(['r1#2']);
    expect(state().get('r1#2')?.sink).toBe(second);
    await inline.stop();
  });

  it('a thread that ends fails the deliveries it held; the next delivery gets a new thread', async () => {
    // a server that accepts and never speaks: the sink's connection waits (up to its timeout)
    const sockets: net.Socket[] = [];
    const mute = net.createServer((s) => sockets.push(s));
    await new Promise<void>((r) => mute.listen(0, '127.0.0.1', r));
    const { port } = mute.address() as net.AddressInfo;
    const held = delivery.deliver(rule(`nats://127.0.0.1:${port}`, 20_000), { telemetry: telemetry() });
    while (sockets.length === 0) await new Promise((r) => setTimeout(r, 20));
    await (delivery as unknown as { worker: { terminate(): Promise<number> } }).worker.terminate();
    const err = await held.then(() => undefined, (e: unknown) => e);
    expect(err).toBeInstanceOf(DeliveryError);
    expect((err as Error).message).toMatch(/delivery thread ended/);
    expect((err as DeliveryError).events).toBe(2);
    // a new thread answers (the mute server is gone: refused at once)
    for (const s of sockets) s.destroy();
    await new Promise<void>((r) => mute.close(() => r()));
    const again = await delivery.deliver(rule(`nats://127.0.0.1:${port}`), { events: [{ kind: 'state', thingId: 'th', id: 'ev-1', type: 't', time: '2026-01-01T00:00:00.000Z', payload: '{}' }] })
      .then(() => undefined, (e: unknown) => e);
    expect(again).toBeInstanceOf(DeliveryError);
    expect((again as DeliveryError).events).toBe(1);
  });
});
