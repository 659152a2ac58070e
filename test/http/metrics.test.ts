import { describe, expect, it } from 'vitest';
import { EVENT_LOOP_SAMPLE_MS, createMetrics, familiesOf } from '../../src/http/metrics.js';

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const figure = (text: string, name: string) => Number(new RegExp(`^${name} (\\S+)$`, 'm').exec(text)?.[1]);

/**
 * The event-loop lag figures sample every EVENT_LOOP_SAMPLE_MS instead of prom-client's 10 ms (an
 * idle gateway's wakeups, issue 19) and still read as at the default: an idle loop near 0.01 s, not
 * the sampling interval, and a stall as long as it was.
 */
describe('event-loop lag metrics', () => {
  it('read against the default 10 ms base, and a stall shows in the max', async () => {
    expect(EVENT_LOOP_SAMPLE_MS).toBeGreaterThan(10);
    const registry = createMetrics();
    await registry.metrics(); // the histogram restarts at each scrape
    await sleep(EVENT_LOOP_SAMPLE_MS * 4);
    const idle = await registry.metrics();
    // each raw sample is at least the sampling interval; less the offset, the shortest is near 10 ms
    expect(figure(idle, 'nodejs_eventloop_lag_min_seconds')).toBeLessThan(EVENT_LOOP_SAMPLE_MS / 1000 - 0.01);
    expect(figure(idle, 'nodejs_eventloop_lag_min_seconds')).toBeGreaterThanOrEqual(0);

    // (the interval a scrape restarted the histogram in is not recorded: the stall comes later)
    await sleep(EVENT_LOOP_SAMPLE_MS * 2);
    const until = Date.now() + 300;
    while (Date.now() < until) { /* a 300 ms stall */ }
    await sleep(EVENT_LOOP_SAMPLE_MS * 2);
    const stalled = await registry.metrics();
    expect(figure(stalled, 'nodejs_eventloop_lag_max_seconds')).toBeGreaterThanOrEqual(0.3 - EVENT_LOOP_SAMPLE_MS / 1000);
  });
});

describe('familiesOf (a multi-core node\'s merged text, filtered by ?name=)', () => {
  it('keeps the named families whole, HELP, TYPE and every series, and nothing else', async () => {
    const registry = createMetrics();
    const text = await registry.metrics();
    const only = familiesOf(text, ['process_cpu_user_seconds_total', 'nodejs_eventloop_lag_p99_seconds']);
    expect([...only.matchAll(/^# HELP (\S+)/gm)].map((m) => m[1])).toEqual(['process_cpu_user_seconds_total', 'nodejs_eventloop_lag_p99_seconds']);
    expect(only).toMatch(/^process_cpu_user_seconds_total \S+$/m);
    expect(only).not.toContain('nodejs_heap');
    expect(familiesOf(text, ['no_such_metric'])).toBe('');
  });
});
