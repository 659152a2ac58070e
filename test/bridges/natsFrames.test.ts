import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { headers } from '@nats-io/transport-node';
import { frames, openSink, protocolOf, type Sink, type SinkMessage } from '../../src/bridges/sinks.js';
import { natsSink, TestStream } from './helpers.js';

const nats = await natsSink();

describe('NATS publish frames written by the sink', () => {
  it('are byte for byte what the client\'s publish sends for each message: HPUB, its Nats-Msg-Id header, the body', () => {
    const messages: SinkMessage[] = [
      { subject: 'p.thing-1.telemetry', id: 'rule:1-a-0', body: '{"t":"☃ é 🌡"}' },
      { subject: 'p.thing-2.telemetry', id: 'rule:1-b-0', body: Buffer.from('{"v":1}') },
      { subject: 'p.thing-2.telemetry', id: 'rule:1-b-1', body: new Uint8Array(0) },
    ];
    const out = frames(messages, 0, 3, '_INBOX.x.7.', 1024 * 1024);
    // what nats-core's ProtocolHandler.publish sends: the line, the headers' own encoding, the payload, CRLF
    const expected = Buffer.concat(messages.map((m, i) => {
      const h = headers();
      h.set('Nats-Msg-Id', m.id);
      const hb = (h as unknown as { encode(): Uint8Array }).encode(); // (the implementation's own, not in the typed interface)
      const body = typeof m.body === 'string' ? Buffer.from(m.body) : Buffer.from(m.body);
      return Buffer.concat([Buffer.from(`HPUB ${m.subject} _INBOX.x.7.${i} ${hb.length} ${hb.length + body.length}\r\n`), hb, body, Buffer.from('\r\n')]);
    }));
    expect(out.equals(expected)).toBe(true);
    // a range of the messages: their own indexes in the reply subjects
    expect(frames(messages, 1, 2, 'r.', 1024).toString()).toBe(`HPUB p.thing-2.telemetry r.1 ${hLength('rule:1-b-0')} ${hLength('rule:1-b-0') + 7}\r\nNATS/1.0\r\nNats-Msg-Id: rule:1-b-0\r\n\r\n{"v":1}\r\n`);
  });

  it('refuse a subject with white space, an id with a line break, and a message over the server\'s max_payload', () => {
    expect(() => frames([{ subject: 'p.a b', id: 'x', body: '{}' }], 0, 1, 'r.', 1024)).toThrow(/not a NATS subject/);
    // a subject is tested once for a run of messages that share it: a different one after it is tested too
    expect(() => frames([{ subject: 'p.a', id: 'x', body: '{}' }, { subject: 'p.a', id: 'y', body: '{}' }, { subject: 'p.a\tb', id: 'z', body: '{}' }], 0, 3, 'r.', 1024)).toThrow(/not a NATS subject/);
    expect(() => frames([{ subject: 'p.a', id: 'x\r\nEvil: 1', body: '{}' }], 0, 1, 'r.', 1024)).toThrow(/line break/);
    expect(() => frames([{ subject: 'p.a', id: 'x', body: 'y'.repeat(1000) }], 0, 1, 'r.', 1024)).toThrow(/max_payload/);
  });
});

const hLength = (id: string) => Buffer.byteLength(`NATS/1.0\r\nNats-Msg-Id: ${id}\r\n\r\n`);

describe.skipIf(!nats)('the NATS sink on JetStream', () => {
  let stream: TestStream;
  let sink: Sink;
  beforeAll(async () => {
    stream = await TestStream.create(nats!.url);
    sink = openSink({ type: 'nats', url: nats!.url, timeoutMs: 5_000 });
  });
  afterAll(async () => {
    await sink?.close();
    await stream?.close();
    await nats?.close();
  });

  it('the client this was written for: its connections have the protocol handler the frames go through', () => {
    // (an upgrade of @nats-io/nats-core that changed it would make the sink publish message by message: this says so)
    const protocol = protocolOf(stream.nc);
    expect(protocol).toBeDefined();
    expect(protocol!.info?.max_payload).toBeGreaterThan(0);
  });

  it('stores 700 messages (three slices of frames) in order with their ids; the same ids again are dropped as repeats', async () => {
    const messages: SinkMessage[] = Array.from({ length: 700 }, (_, i) => ({ subject: `${stream.prefix}.t${i % 3}.telemetry`, id: `m-${i}`, body: JSON.stringify({ i, s: 'é☃' }) }));
    await sink.publish(messages);
    const stored = await stream.raw();
    expect(stored.map((m) => [m.subject, m.msgId, m.text])).toEqual(messages.map((m) => [m.subject, m.id, m.body]));
    await sink.publish(messages.slice(0, 300));
    expect(await stream.count()).toBe(700);
  });

  it('uses its frames\' memory again once a batch is acknowledged, never a failed batch\'s; every body arrives as sent', async () => {
    const memory = (sink as unknown as { frameMemory: { size: number } }).frameMemory;
    const before = (await stream.raw()).length;
    const sent: SinkMessage[] = [];
    for (let b = 0; b < 4; b++) {
      // 600 messages of 300 bytes: three slices of frames, each over 64 KiB, their memory from the batch before
      const batch = Array.from({ length: 600 }, (_, i) => ({ subject: `${stream.prefix}.r${b}.telemetry`, id: `reuse-${b}-${i}`, body: JSON.stringify({ b, i, pad: String.fromCharCode(97 + ((b + i) % 26)).repeat(260) }) }));
      await sink.publish(batch);
      sent.push(...batch);
      expect(memory.size).toBeGreaterThan(0);
    }
    const stored = (await stream.raw()).slice(before);
    expect(stored.map((m) => [m.msgId, m.text])).toEqual(sent.map((m) => [m.id, m.body]));
    // a refused batch's frames may still be queued on the socket: not taken back
    const held = memory.size;
    await expect(sink.publish([{ subject: `nostream${Date.now()}.x.telemetry`, id: 'n-0', body: 'z'.repeat(100_000) }])).rejects.toThrow(/NATS JetStream refused/);
    expect(memory.size).toBeLessThanOrEqual(held);
  });

  it('rejects when no stream captures a subject (no acknowledgement), and goes on publishing after', async () => {
    await expect(sink.publish([{ subject: `nostream${Date.now()}.x.telemetry`, id: 'n-1', body: '{}' }])).rejects.toThrow(/NATS JetStream refused/);
    await sink.publish([{ subject: `${stream.prefix}.after.telemetry`, id: 'after-1', body: '{"ok":true}' }]);
    expect((await stream.raw()).at(-1)).toMatchObject({ msgId: 'after-1', text: '{"ok":true}' });
  });
});
