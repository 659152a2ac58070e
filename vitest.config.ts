import { defineConfig } from 'vitest/config';

export default defineConfig({
  test: {
    include: ['test/**/*.test.ts'],
    globalSetup: ['test/setup/global.ts'],
    pool: 'forks',
    // two files at a time on the 2-core CI machine: most of a file's time is waiting (HTTP, Postgres,
    // MQTT, timers), so the suite takes 231 s instead of about 450 s with one (docs/decisions.md)
    maxWorkers: 2,
    testTimeout: 60_000,
    hookTimeout: 120_000,
    teardownTimeout: 30_000,
    reporters: ['default'],
  },
});
