import path from 'node:path';
import { inject } from 'vitest';

/**
 * The path of a TypeScript entry (`src/main.ts`, `test/helpers/faultyGateway.ts`, ...) in the run's
 * compiled copy of the sources (built once by test/setup/global.ts). Child processes start from it
 * with plain `node`: under `tsx` every child compiled its modules again, about 2 s of CPU per start
 * on the 2-core CI machine, and the suite starts dozens (docs/decisions.md, "Test suite").
 */
export function compiled(entry: string): string {
  return path.join(inject('buildDir'), entry.replace(/\.ts$/, '.js'));
}

/** `node <compiled entry> ...args`, as spawn's command and arguments. */
export function nodeCommand(entry: string, ...args: string[]): [string, string[]] {
  return [process.execPath, [compiled(entry), ...args]];
}
