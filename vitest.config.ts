import { defineConfig } from 'vitest/config';

export default defineConfig({
  test: {
    include: ['test/**/*.test.ts'],
    globalSetup: ['test/setup/global.ts'],
    pool: 'forks',
    // one module graph per worker process, not per file: the imports were 219 to 373 s of the files'
    // time; every file starts and stops its own gateways, so no state is meant to cross files
    // (docs/decisions.md, "Test suite")
    isolate: false,
    // three files at a time on the 2-core CI machine: most of a file's time is waiting (HTTP, Postgres,
    // MQTT, timers); two took 231 s instead of about 450 s with one, and on a slower machine three
    // take 565 to 605 s instead of 618 with two (docs/decisions.md, "Test suite")
    maxWorkers: 3,
    testTimeout: 60_000,
    hookTimeout: 120_000,
    teardownTimeout: 30_000,
    reporters: ['default'],
  },
});
