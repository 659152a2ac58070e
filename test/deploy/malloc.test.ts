import fs from 'node:fs';
import { spawnSync } from 'node:child_process';
import { describe, expect, it } from 'vitest';
import { GATEWAY_MALLOC_ENV } from '../../bench/lib/brokers.js';

// The gateway runs with glibc's MALLOC_MMAP_THRESHOLD_=65536 (issue 19, memory per MQTT connection):
// Node's 64 KiB input buffer of every TLS connection then gets its own mapping, where only the
// pages written become resident. The image, `npm start` and the benchmarks must agree, and glibc
// must honour the variable as set.
const read = (file: string) => fs.readFileSync(file, 'utf8');

/**
 * A Node child that keeps 64 buffers of 64 KiB (each one malloc of 65,536 bytes, Node's
 * ArrayBuffer allocator) and reports how much its brk heap and its other anonymous mappings grew.
 */
function growth(env: NodeJS.ProcessEnv): { heap: number; anon: number } {
  const script = `
    const fs = require('node:fs');
    const sizes = () => {
      let heap = 0, anon = 0;
      for (const line of fs.readFileSync('/proc/self/maps', 'utf8').split('\\n')) {
        const m = /^([0-9a-f]+)-([0-9a-f]+) \\S+ \\S+ \\S+ (\\d+)\\s*(.*)$/.exec(line);
        if (!m) continue;
        const size = parseInt(m[2], 16) - parseInt(m[1], 16);
        if (m[4] === '[heap]') heap += size;
        else if (m[3] === '0' && m[4] === '') anon += size;
      }
      return { heap, anon };
    };
    const before = sizes();
    const kept = Array.from({ length: 64 }, () => Buffer.allocUnsafeSlow(65536));
    const after = sizes();
    process.stdout.write(JSON.stringify({ heap: after.heap - before.heap, anon: after.anon - before.anon, n: kept.length }));
  `;
  const out = spawnSync(process.execPath, ['-e', script], { env, encoding: 'utf8' });
  expect(out.status, out.stderr).toBe(0);
  return JSON.parse(out.stdout);
}

describe('malloc setting of the gateway process', () => {
  it('is the same in the image, npm start and the benchmarks', () => {
    const value = GATEWAY_MALLOC_ENV.MALLOC_MMAP_THRESHOLD_;
    expect(value).toBe('65536');
    expect(read('Dockerfile')).toMatch(new RegExp(`^\\s+MALLOC_MMAP_THRESHOLD_=${value}$`, 'm'));
    expect(JSON.parse(read('package.json')).scripts.start).toBe(`MALLOC_MMAP_THRESHOLD_=${value} tsx src/main.ts`);
  });

  it.runIf(process.platform === 'linux')('makes glibc serve 64 KiB allocations from their own mappings, not the brk heap', () => {
    const base = { PATH: process.env.PATH };
    const MiB = 2 ** 20;
    // 64 x 64 KiB = 4 MiB
    const withSetting = growth({ ...base, ...GATEWAY_MALLOC_ENV });
    expect(withSetting.anon).toBeGreaterThanOrEqual(4 * MiB);
    expect(withSetting.heap).toBeLessThan(1 * MiB);
    // without it (glibc's default threshold of 128 KiB) the same buffers come from the brk heap
    // (some from free space it already had)
    const without = growth(base);
    expect(without.heap).toBeGreaterThanOrEqual(3 * MiB);
  });
});
