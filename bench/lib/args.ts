import { parseArgs } from 'node:util';

/**
 * Options of the A/B request benchmarks (bench:auth, bench:factory): alternating rounds of
 * `--duration` seconds at `--connections`; `--no-write` only prints.
 */
export function roundOptions(): { duration: number; connections: number; rounds: number; write: boolean } {
  const { values } = parseArgs({
    options: {
      duration: { type: 'string', default: '5' },
      connections: { type: 'string', default: '32' },
      rounds: { type: 'string', default: '4' },
      'no-write': { type: 'boolean', default: false },
    },
  });
  return { duration: Number(values.duration), connections: Number(values.connections), rounds: Number(values.rounds), write: !values['no-write'] };
}
