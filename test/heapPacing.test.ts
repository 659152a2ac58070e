import { execFileSync } from 'node:child_process';
import { describe, expect, it } from 'vitest';
import { loadConfig } from '../src/config.js';
import { compiled } from './helpers/compiled.js';

// (the run's compiled copy: under tsx each child would compile its modules again)
const fullCollections = (percent: number) => {
  const out = execFileSync(process.execPath, ['--trace-gc', compiled('test/helpers/heapChurn.ts'), String(percent)], { encoding: 'utf8' });
  return out.split('\n').filter((l) => l.includes('Mark-Compact')).length;
};

describe("V8's heap pacing (V8_HEAP_GROWING_PERCENT)", () => {
  it('is 200 by default, 0 leaves V8 its own, and is bounded', () => {
    expect(loadConfig({}).V8_HEAP_GROWING_PERCENT).toBe(200);
    expect(loadConfig({ V8_HEAP_GROWING_PERCENT: '0' }).V8_HEAP_GROWING_PERCENT).toBe(0);
    for (const bad of ['-1', '1001', 'lots']) expect(() => loadConfig({ V8_HEAP_GROWING_PERCENT: bad })).toThrow(/V8_HEAP_GROWING_PERCENT/);
  });

  it('set at start-up as main.ts sets it, it takes effect: the same churn makes fewer full collections at 300% than at 10%', () => {
    const tight = fullCollections(10);
    const loose = fullCollections(300);
    expect(tight).toBeGreaterThan(loose);
  }, 60_000);
});
