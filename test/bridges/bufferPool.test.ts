import { afterAll, describe, expect, it } from 'vitest';
import { BufferPool } from '../../src/bridges/bufferPool.js';
import { InlineDelivery, type DeliveryRule } from '../../src/bridges/delivery.js';
import { ThreadDelivery } from '../../src/bridges/deliveryThread.js';
import { createLogger } from '../../src/log.js';
import { natsSink, TestStream } from './helpers.js';

describe('BufferPool', () => {
  it('hands out views of memory of their own, at least 64 KiB, rounded up to a power of two', () => {
    const pool = new BufferPool();
    const small = pool.take(10);
    expect(small.length).toBe(10);
    expect(small.byteOffset).toBe(0);
    expect(small.buffer.byteLength).toBe(64 * 1024);
    expect(pool.take(100_000).buffer.byteLength).toBe(131_072);
  });

  it('gives back the smallest free buffer that holds the bytes, and each buffer once', () => {
    const pool = new BufferPool();
    const big = new ArrayBuffer(1 << 20);
    const mid = new ArrayBuffer(1 << 18);
    const little = new ArrayBuffer(1 << 16);
    for (const b of [big, mid, little]) pool.give(b);
    expect(pool.take(100_000).buffer).toBe(mid);
    expect(pool.take(100_000).buffer).toBe(big);
    expect(pool.take(100_000).buffer).not.toBe(little); // too small: a new one
    expect(pool.take(10).buffer).toBe(little);
    expect(pool.size).toBe(0);
  });

  it('keeps at most 16, the larger ones, and ignores memory that moved away (detached)', () => {
    const pool = new BufferPool();
    for (let i = 0; i < 16; i++) pool.give(new ArrayBuffer(1024 * (i + 2)));
    pool.give(new ArrayBuffer(1024)); // smaller than all: dropped
    expect(pool.size).toBe(16);
    const large = new ArrayBuffer(1 << 20);
    pool.give(large); // replaces the smallest
    expect(pool.size).toBe(16);
    expect(pool.take(1 << 19).buffer).toBe(large);
    expect(pool.take(1500).buffer.byteLength).toBe(3 * 1024); // the 2 KiB one went
    const moved = new ArrayBuffer(4096);
    structuredClone(moved, { transfer: [moved] });
    pool.give(moved);
    expect(pool.size).toBe(14);
  });
});

describe('pooled memory of a delivery', () => {
  const thread = new ThreadDelivery(createLogger('silent', false));
  afterAll(() => thread.stop());

  it('the delivery thread hands a read\'s memory back with its answer: the next read uses it again', async () => {
    const row = Buffer.from('[[1767225600000,{"t":1}]]');
    const points = thread.packed.take(row.length);
    row.copy(points);
    const memory = points.buffer;
    // nothing listens on port 9: refused, and the memory still comes back
    const rule: DeliveryRule = { id: 'r1', runner: 'r1#1', accountId: 'a1', format: 'batch', where: null, select: null, prefix: 'p', sink: { key: 'k', settings: { type: 'nats', url: 'nats://127.0.0.1:9', timeoutMs: 2_000 } } };
    await thread.deliver(rule, { telemetry: { rows: [{ tx: '7', thingId: 'th', messages: 1, start: 0, end: row.length }], points } }).catch(() => {});
    expect(memory.byteLength).toBe(0); // it moved to the thread
    expect(thread.pool.size).toBe(1);
    thread.packed.take(100); // taken from the pool, not made anew
    expect(thread.pool.size).toBe(0);
  });

  it('bodies built in one buffer used again: consecutive deliveries reach JetStream intact', async (ctx) => {
    const sink = await natsSink();
    if (!sink) return ctx.skip();
    const stream = await TestStream.create(sink.url);
    const inline = new InlineDelivery();
    try {
      const rule: DeliveryRule = { id: 'r2', runner: 'r2#1', accountId: 'a1', format: 'event', where: null, select: null, prefix: stream.prefix, sink: { key: sink.url, settings: { type: 'nats', url: sink.url, timeoutMs: 5_000 } } };
      const bodies = (inline as unknown as { bodies: BufferPool }).bodies;
      const sent: string[] = [];
      for (let d = 0; d < 5; d++) {
        const payload = JSON.stringify({ d, fill: String(d).repeat(2000 - d * 300) }); // each delivery shorter than the one before
        sent.push(payload);
        const row = Buffer.from(`[[1767225600000,${payload}]]`);
        const points = Buffer.allocUnsafeSlow(row.length);
        row.copy(points);
        expect(await inline.deliver(rule, { telemetry: { rows: [{ tx: String(10 + d), thingId: 'th', messages: 1, start: 0, end: row.length }], points } })).toBe(1);
        expect(bodies.size).toBe(1); // the body's memory is back once the publish settled
      }
      const got = await stream.events();
      expect(got.map((e) => JSON.stringify(e.data))).toEqual(sent);
    } finally {
      await inline.stop();
      await stream.close();
      await sink.close();
    }
  });
});
