import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { loadConfig } from '../../src/config.js';
import { freePort } from '../../src/db/embedded.js';
import { createLogger } from '../../src/log.js';
import { startGateway, type RunningGateway } from '../../src/server.js';
import type { DomainModule } from '../../src/gateway.js';

/**
 * One gateway in this process for an HTTP benchmark: embedded PostgreSQL and a PKI in a temporary
 * folder, loopback listeners, no background jobs (unless `env` says JOBS=true), warn-level logs.
 * `env` overrides settings. `stop` also removes the folder.
 */
export async function startBenchGateway(name: string, options: { domains?: DomainModule[]; env?: Record<string, string> } = {}): Promise<RunningGateway> {
  const tmp = fs.mkdtempSync(path.join(os.tmpdir(), `bench-${name}-`));
  const httpPort = await freePort();
  const config = loadConfig({
    DATA_DIR: tmp,
    CERTS_DIR: path.join(tmp, 'certs'),
    EMBEDDED_PG_PORT: String(await freePort()),
    HTTP_HOST: '127.0.0.1',
    HTTP_PORT: String(httpPort),
    MQTT_HOST: '127.0.0.1',
    MQTT_PORT: '0',
    PUBLIC_BASE_URL: `http://127.0.0.1:${httpPort}`,
    LOG_LEVEL: 'warn',
    JOBS: 'false',
    ...options.env,
  });
  console.log('starting gateway (embedded PostgreSQL, PKI)...');
  const gw = await startGateway(config, { log: createLogger('warn', false), ...(options.domains ? { domains: options.domains } : {}) });
  return {
    ...gw,
    async stop() {
      await gw.stop();
      fs.rmSync(tmp, { recursive: true, force: true });
    },
  };
}
