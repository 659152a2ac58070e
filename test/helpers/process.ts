import { spawn, type ChildProcess } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { inject } from 'vitest';
import { HttpClient } from './gateway.js';
import { waitFor } from './wait.js';
import { compiled } from './compiled.js';

export interface GatewayProcess {
  proc: ChildProcess;
  http: HttpClient;
  /** everything the process printed so far */
  output(): string;
  /** resolves with the exit code */
  exited: Promise<number | null>;
}

/**
 * Starts `src/main.ts` (compiled: test/helpers/compiled.ts) as a real child process (crash, restart, signal and cluster tests) on
 * loopback, with the run's shared PKI, and waits until /readyz answers 200. `env` overrides
 * anything; DATABASE_URL and HTTP_PORT are required. `entry` runs another start-up script (e.g. the
 * crash tests' test/helpers/faultyGateway.ts).
 */
export async function spawnGateway(env: Record<string, string> & { DATABASE_URL: string; HTTP_PORT: string }, entry = 'src/main.ts'): Promise<GatewayProcess> {
  let output = '';
  const proc = spawn(process.execPath, [compiled(entry)], {
    env: {
      ...process.env,
      HTTP_HOST: '127.0.0.1',
      MQTT_HOST: '127.0.0.1',
      MQTT_PORT: '0',
      CERTS_DIR: inject('certsDir'),
      DATA_DIR: fs.mkdtempSync(path.join(os.tmpdir(), 'gw-process-')),
      PUBLIC_BASE_URL: `http://127.0.0.1:${env.HTTP_PORT}`,
      LOG_LEVEL: 'warn',
      LOG_PRETTY: 'false',
      // tests refuse credentials on purpose; test/http/authFailures.test.ts and authLimits.test.ts set their own limits
      AUTH_FAILURE_LIMIT: '100000',
      AUTH_FAILURE_IDENTIFIER_LIMIT: '100000',
      AUTH_FAILURE_SOURCE_LIMIT: '100000',
      ...env,
    },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  proc.stdout!.on('data', (d) => (output += d));
  proc.stderr!.on('data', (d) => (output += d));
  const exited = new Promise<number | null>((resolve) => proc.once('exit', (code) => resolve(code)));
  const http = new HttpClient(`http://127.0.0.1:${env.HTTP_PORT}`);
  await waitFor(async () => {
    if (proc.exitCode !== null) throw new Error(`gateway exited at start (${proc.exitCode}):\n${output}`);
    return (await http.get('/readyz')).status === 200;
  }, 60_000, 'gateway process ready', 200);
  return { proc, http, output: () => output, exited };
}
