/**
 * Test-only gateway entry for crash tests: src/main.ts's start-up with a fault hook built from
 * THIS process's environment. `FAULT_INJECT=<point>` exits the process with code 86 (as a crash
 * would) when the code reaches that point, right after the preceding step committed. Production
 * code never reads FAULT_INJECT.
 */
import { loadConfig } from '../../src/config.js';
import type { FaultHook } from '../../src/lib/faults.js';
import { createLogger } from '../../src/log.js';
import { startGateway } from '../../src/server.js';

export const FAULT_EXIT_CODE = 86;

const point = process.env.FAULT_INJECT;
const faults: FaultHook = (at) => {
  if (at !== point) return;
  process.stderr.write(`FAULT_INJECT=${at}: exiting now (test-only crash injection)\n`);
  process.exit(FAULT_EXIT_CODE);
};

const config = loadConfig();
const running = await startGateway(config, { log: createLogger(config.LOG_LEVEL, config.LOG_PRETTY), faults });
process.once('SIGTERM', () => void running.stop().then(() => process.exit(0)));
