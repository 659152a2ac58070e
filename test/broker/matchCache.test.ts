import mqemitter from 'mqemitter';
import { describe, expect, it } from 'vitest';
import { cacheTopicMatches } from '../../src/broker/matchCache.js';

type Emitter = ReturnType<typeof mqemitter>;
const emit = (mq: Emitter, topic: string) => new Promise<void>((resolve) => mq.emit({ topic, payload: 'x' }, () => resolve()));
const on = (mq: Emitter, topic: string, fn: (m: { topic: string }, cb: () => void) => void) => new Promise<void>((resolve) => mq.on(topic, fn, () => resolve()));
const off = (mq: Emitter, topic: string, fn: (m: { topic: string }, cb: () => void) => void) => new Promise<void>((resolve) => mq.removeListener(topic, fn, () => resolve()));

describe('topic match cache', () => {
  it('never serves a stale match: subscribe and unsubscribe take effect for cached topics', async () => {
    const mq = mqemitter();
    const hasListener = cacheTopicMatches(mq)!;
    expect(hasListener('devices/d1/telemetry')).toBe(false);
    const generations = [hasListener.generation()];
    const seen: string[] = [];
    const a = (m: { topic: string }, cb: () => void) => { seen.push(`a:${m.topic}`); cb(); };
    const b = (m: { topic: string }, cb: () => void) => { seen.push(`b:${m.topic}`); cb(); };
    await on(mq, 'devices/+/telemetry', a);
    generations.push(hasListener.generation());
    expect(hasListener('devices/d1/telemetry')).toBe(true);
    await emit(mq, 'devices/d1/telemetry');
    await emit(mq, 'devices/d1/telemetry'); // served from the cache
    await emit(mq, 'devices/d1/heartbeat'); // cached as "no listener"
    expect(seen).toEqual(['a:devices/d1/telemetry', 'a:devices/d1/telemetry']);

    await on(mq, 'devices/d1/#', b);
    await emit(mq, 'devices/d1/telemetry');
    await emit(mq, 'devices/d1/heartbeat');
    expect(seen.slice(2).sort()).toEqual(['a:devices/d1/telemetry', 'b:devices/d1/heartbeat', 'b:devices/d1/telemetry']);

    generations.push(hasListener.generation());
    await off(mq, 'devices/+/telemetry', a);
    generations.push(hasListener.generation());
    await off(mq, 'devices/d1/#', b);
    generations.push(hasListener.generation());
    expect(hasListener('devices/d1/telemetry')).toBe(false);
    // every subscribe and unsubscribe gives a new generation; matching alone does not
    expect(hasListener.generation()).toBe(generations.at(-1));
    expect(new Set(generations).size).toBe(generations.length);
    await on(mq, 'devices/d1/#', b);
    seen.length = 0;
    await emit(mq, 'devices/d1/telemetry');
    expect(seen).toEqual(['b:devices/d1/telemetry']);
  });

  it('leaves emitters without a topic trie alone', () => {
    expect(cacheTopicMatches({})).toBeUndefined();
  });
});
