import { createActor } from 'xstate';
import { describe, expect, it } from 'vitest';
import { bridgeRuleMachine } from '../../machines/bridgeRule.js';
import { encode } from '../../src/bridges/delivery.js';
import { Envelopes, passes, pick, pointRanges } from '../../src/bridges/envelope.js';
import { parseFrom } from '../../src/bridges/service.js';

describe('bridgeRule machine', () => {
  const start = () => {
    const emitted: string[] = [];
    const a = createActor(bridgeRuleMachine, { input: { id: 'r', accountId: 'a', name: 'n', failingAfterMs: 10_000, createdAt: '2026-01-01T00:00:00.000Z' } });
    a.on('*', (e) => emitted.push(e.type));
    a.start();
    return { a, emitted };
  };
  const at = (s: number) => new Date(Date.UTC(2026, 0, 1, 0, 0, s)).toISOString();

  it('a run of refusals as long as failingAfterMs makes it FAILING (once), the first success ENABLED again', () => {
    const { a, emitted } = start();
    a.send({ type: 'DELIVERY_FAILED', at: at(1), error: 'no responders' });
    a.send({ type: 'DELIVERY_FAILED', at: at(10), error: 'no responders' });
    expect(a.getSnapshot().value).toBe('ENABLED');
    expect(a.getSnapshot().context.failingSince).toBe(at(1));
    a.send({ type: 'DELIVERY_FAILED', at: at(11), error: 'timeout' });
    expect(a.getSnapshot().value).toBe('FAILING');
    a.send({ type: 'DELIVERY_FAILED', at: at(30), error: 'timeout' });
    expect(emitted.filter((e) => e === 'rule.failing')).toHaveLength(1);
    expect(a.getSnapshot().context.lastError).toBe('timeout');
    a.send({ type: 'DELIVERED', at: at(31) });
    expect(a.getSnapshot().value).toBe('ENABLED');
    expect(a.getSnapshot().context.failingSince).toBeNull();
    expect(emitted).toContain('rule.recovered');
  });

  it('a success ends a run: refusals before it do not count toward FAILING', () => {
    const { a } = start();
    a.send({ type: 'DELIVERY_FAILED', at: at(1), error: 'x' });
    a.send({ type: 'DELIVERED', at: at(5) });
    a.send({ type: 'DELIVERY_FAILED', at: at(12), error: 'x' });
    expect(a.getSnapshot().value).toBe('ENABLED');
  });

  it('disabled: no deliveries are taken; enabling resumes; deleted is final', () => {
    const { a } = start();
    a.send({ type: 'DISABLE', at: at(1), by: 'u' });
    expect(a.getSnapshot().can({ type: 'DELIVERY_FAILED', at: at(2), error: 'x' })).toBe(false);
    a.send({ type: 'ENABLE', at: at(3), by: 'u' });
    expect(a.getSnapshot().value).toBe('ENABLED');
    a.send({ type: 'DELETE', at: at(4), by: 'u' });
    expect(a.getSnapshot().status).toBe('done');
  });
});

/** pointRanges as time and payload text */
const splitPoints = (text: string) => pointRanges(text).map((p) => ({ at: p.at, json: text.slice(p.start, p.end) }));
const text = (b: string | Uint8Array) => Buffer.from(b as Uint8Array).toString('utf8');

describe('envelope', () => {
  it('splits stored points without re-encoding, strings with brackets and escapes included', () => {
    const text = '[[1700000000000,{"a":"x]}[{\\"","t":20.50}],[1700000000001,{"b":{"c":[1,2]}}]]';
    expect(splitPoints(text)).toEqual([
      { at: 1700000000000, json: '{"a":"x]}[{\\"","t":20.50}' },
      { at: 1700000000001, json: '{"b":{"c":[1,2]}}' },
    ]);
    // long strings, quotes after runs of backslashes (escaped or not), brackets inside them
    const values = [{ s: `${'x'.repeat(2000)}"]}` }, { s: 'a\\', t: '\\"]}[{', u: '\\\\' }, { s: '' }, { n: [1, { m: '}' }] }];
    const stored = `[${values.map((v, i) => `[${1700000000000 + i},${JSON.stringify(v)}]`).join(',')}]`;
    expect(splitPoints(stored).map((p) => [p.at, JSON.parse(p.json)])).toEqual(values.map((v, i) => [1700000000000 + i, v]));
  });

  it('is a CloudEvents 1.0 JSON object with the data spliced in', () => {
    const e = JSON.parse(new Envelopes('acc', 'r').of('telemetry', 'io.gateway.device.telemetry', 't', 'i', '2026-01-01T00:00:00.000Z', '{"t":1}'));
    expect(e).toEqual({
      specversion: '1.0', id: 'i', source: '/accounts/acc/things/t', type: 'io.gateway.device.telemetry', time: '2026-01-01T00:00:00.000Z',
      subject: 't', datacontenttype: 'application/json', account: 'acc', kind: 'telemetry', rule: 'r', data: { t: 1 },
    });
  });

  it('a rule\'s envelopes keep their fixed parts per thing and type: the same text as a fresh builder\'s', () => {
    const envs = new Envelopes('acc', 'r');
    for (const [thing, type, kind] of [['t1', 'io.gateway.device.connected', 'connectivity'], ['t2', 'io.gateway.device.connected', 'connectivity'], ['t1', 'io.gateway.device.disconnected', 'connectivity'], ['t1', 'io.gateway.device.connected', 'connectivity']] as const) {
      const args = [kind, type, thing, `${thing}-${type}`, envs.time(1767225600000), '{"t":"\\"q"}', 'c"1'] as const;
      const text = envs.of(...args);
      // a thing's or a type's parts never leak into another's
      expect(text).toBe(new Envelopes('acc', 'r').of(...args));
      expect(JSON.parse(text)).toMatchObject({ source: `/accounts/acc/things/${thing}`, type, subject: thing, time: '2026-01-01T00:00:00.000Z', commandid: 'c"1', data: { t: '"q' } });
    }
    expect(envs.time(1767225600001)).toBe('2026-01-01T00:00:00.001Z');
    // the milliseconds appended to a second formatted once: the same text as toISOString, across seconds
    const times = [1767225600000, 1767225600005, 1767225600050, 1767225600999, 1767225601000, 1767225601042, 1767225600999, -1, -1001, 0, 253402300799999];
    const fresh = new Envelopes('acc', 'r');
    expect(times.map((t) => fresh.time(t))).toEqual(times.map((t) => new Date(t).toISOString()));
  });

  it('batches: each subject\'s events of a delivery together, in order, within the count and size limits', () => {
    // each event's body: `{"n":..,"pad":"..","data":null}` (head, data, the closing brace encode adds)
    const ev = (subject: string, n: number, size = 10) => ({ subject, id: `r:${subject}-${n}`, head: `{"n":${n},"pad":"${'x'.repeat(size)}","data":`, data: 'null' });
    const events = [ev('a', 1), ev('a', 2), ev('a', 3), ev('b', 1), ev('a', 4), ev('a', 5, 100), ev('a', 6)];
    const out = encode(events, 'batch', 2, 120);
    // a's events apart in the read (b's between them) go together, in order, then b's
    expect(out.map((m) => [m.subject, m.id])).toEqual([['a', 'r:a-1:batch:2'], ['a', 'r:a-3:batch:2'], ['a', 'r:a-5:batch:1'], ['a', 'r:a-6:batch:1'], ['b', 'r:b-1:batch:1']]);
    expect(out.flatMap((m) => (JSON.parse(text(m.body)) as { n: number }[]).map((e) => e.n))).toEqual([1, 2, 3, 4, 5, 6, 1]);
    // rows of three things read in commit order (a b c a b c ...): one message per thing
    const read = [1, 2, 3, 4].flatMap((n) => ['a', 'b', 'c'].map((t) => ev(t, n)));
    const grouped = encode(read, 'batch', 10, 10_000);
    expect(grouped.map((m) => [m.subject, m.id])).toEqual([['a', 'r:a-1:batch:4'], ['b', 'r:b-1:batch:4'], ['c', 'r:c-1:batch:4']]);
    expect(grouped.map((m) => (JSON.parse(text(m.body)) as { n: number }[]).map((e) => e.n))).toEqual([[1, 2, 3, 4], [1, 2, 3, 4], [1, 2, 3, 4]]);
    expect(out.every((m) => m.contentType === 'application/cloudevents-batch+json')).toBe(true);
    // an event larger than the limit goes alone, never dropped
    expect(encode([ev('a', 1, 500)], 'batch', 10, 100).map((m) => JSON.parse(text(m.body)).length)).toEqual([1]);
    // the same read splits the same way (a redelivery keeps its ids for the sink's deduplication)
    expect(encode(events, 'batch', 2, 120).map((m) => [m.id, text(m.body)])).toEqual(out.map((m) => [m.id, text(m.body)]));
    // a longer read after a failure: the longer batch has an id of its own (not dropped as a repeat of the shorter one)
    expect(encode(events.slice(0, 2), 'batch', 10, 10_000)[0].id).toBe('r:a-1:batch:2');
    expect(encode(events.slice(0, 3), 'batch', 10, 10_000)[0].id).toBe('r:a-1:batch:3');
    // one event per message: each its own id, no array
    expect(encode(events.slice(0, 2), 'event').map((m) => [m.id, m.contentType, JSON.parse(text(m.body)).n])).toEqual([['r:a-1', undefined, 1], ['r:a-2', undefined, 2]]);
  });

  it('bodies written as bytes: the payload\'s UTF-8 bytes as sent, the same envelopes as the string builder', () => {
    // a stored row with multi-byte text, escapes and brackets inside strings; positions taken on its latin1 decoding
    const payloads = ['{"t":20.50,"note":"größe ✓ [x]"}', '{"q":"a\\"b}","e":"😀"}', '{"n":1}'];
    const row = Buffer.from(`[${payloads.map((p, i) => `[${1767225600000 + i},${p}]`).join(',')}]`);
    const ranges = pointRanges(row.toString('latin1'));
    expect(ranges.map((r) => row.toString('utf8', r.start, r.end))).toEqual(payloads);
    const envs = new Envelopes('acc', 'r');
    const parts = ranges.map((r, i) => ({
      subject: `p.t${i < 2 ? 1 : 2}.telemetry`, id: `r:${i}`, data: row.subarray(r.start, r.end),
      head: envs.head('telemetry', 'io.gateway.device.telemetry', `t${i < 2 ? 1 : 2}`, `${i}`, envs.time(r.at)),
    }));
    const strings = parts.map((p) => ({ subject: p.subject, id: p.id, body: `${p.head}${Buffer.from(p.data).toString('utf8')}}` }));
    // one event per message: byte for byte what the string builder gives
    expect(encode(parts, 'event').map((m) => [m.subject, m.id, text(m.body)])).toEqual(strings.map((m) => [m.subject, m.id, m.body]));
    expect(JSON.parse(text(encode(parts, 'event')[0].body)).data).toEqual({ t: 20.5, note: 'größe ✓ [x]' });
    expect(text(encode(parts, 'event')[0].body)).toContain('"data":{"t":20.50,');
    // batches: the same envelopes as JSON arrays, one per thing
    expect(encode(parts, 'batch').map((m) => [m.subject, m.id, m.contentType, text(m.body)])).toEqual([
      [strings[0].subject, `${strings[0].id}:batch:2`, 'application/cloudevents-batch+json', `[${strings[0].body},${strings[1].body}]`],
      [strings[2].subject, `${strings[2].id}:batch:1`, 'application/cloudevents-batch+json', `[${strings[2].body}]`],
    ]);
    // text data (a select's fields) is written as UTF-8 too
    expect(text(encode([{ ...parts[0], data: '{"note":"größe"}' }], 'event')[0].body)).toBe(`${parts[0].head}{"note":"größe"}}`);
    // heads in parts (what deliveries use): the same bytes, in both formats, mixed with text heads
    const inParts = parts.map((p, i) => ({ ...p, head: envs.headParts('telemetry', 'io.gateway.device.telemetry', `t${i < 2 ? 1 : 2}`, `${i}`, envs.time(ranges[i].at))! }));
    expect(inParts.every((p) => typeof p.head === 'object')).toBe(true);
    for (const format of ['event', 'batch'] as const) {
      expect(encode(inParts, format).map((m) => [m.subject, m.id, text(m.body)])).toEqual(encode(parts, format).map((m) => [m.subject, m.id, text(m.body)]));
      expect(encode([inParts[0], parts[1], inParts[2]], format).map((m) => text(m.body))).toEqual(encode(parts, format).map((m) => text(m.body)));
    }
    // an id that JSON must escape (or any character beyond printable ASCII) has no parts: the text head is used
    expect(envs.headParts('telemetry', 'io.gateway.device.telemetry', 't1', 'a"b', envs.time(0))).toBeUndefined();
    expect(envs.headParts('telemetry', 'io.gateway.device.telemetry', 't1', 'é', envs.time(0))).toBeUndefined();
    // a thing id that JSON escapes is in the fixed parts, escaped as in the text head
    const odd = envs.headParts('telemetry', 'io.gateway.device.telemetry', 'th"ing\\é', '7', envs.time(5))!;
    const oddEvent = [{ subject: 'p.x.telemetry', id: 'r:7', data: '{}', head: odd }];
    expect(text(encode(oddEvent, 'event')[0].body)).toBe(`${envs.head('telemetry', 'io.gateway.device.telemetry', 'th"ing\\é', '7', envs.time(5))}{}}`);
    expect(JSON.parse(text(encode(oddEvent, 'event')[0].body)).subject).toBe('th"ing\\é');
  });

  it('where and select', () => {
    expect(passes({ t: { gt: 20 }, mode: 'auto' }, { t: 21, mode: 'auto' })).toBe(true);
    expect(passes({ t: { gt: 20 } }, { t: '21' })).toBe(false);
    expect(passes({ x: { exists: false }, y: { in: [1, 2] } }, { y: 2 })).toBe(true);
    expect(pick(['a', 'z'], { a: 1, b: 2 })).toBe('{"a":1}');
  });

  it('from: one logged device topic or an event kind; heartbeats, several topics and unlogged topics refused', () => {
    expect(parseFrom('devices/+/telemetry')).toEqual({ source: 'telemetry', thingId: undefined });
    expect(parseFrom('devices/0F1C2A9E-6B7D-4E8F-9A0B-1C2D3E4F5A6B/telemetry').thingId).toBe('0f1c2a9e-6b7d-4e8f-9a0b-1c2d3e4f5a6b');
    expect(parseFrom('devices/+/twin/reported').source).toBe('twin');
    expect(parseFrom('devices/+/twin/+').source).toBe('twin');
    expect(parseFrom('devices/+/commands/response').source).toBe('commandReply');
    expect(parseFrom('devices/+/commands/#').source).toBe('commandReply');
    expect(parseFrom('$events/state').source).toBe('state');
    expect(() => parseFrom('devices/#')).toThrow(/^from: .*several device topics/);
    expect(() => parseFrom('devices/+/+')).toThrow(/several device topics \(telemetry, heartbeat\)/);
    expect(() => parseFrom('devices/+/heartbeat')).toThrow(/\$events\/connectivity/);
    expect(() => parseFrom('devices/+/ota/status')).toThrow(/durable/);
    expect(() => parseFrom('devices/+/telemetry/#/x')).toThrow(/topic filter/);
  });
});
