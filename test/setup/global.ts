import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import type { TestProject } from 'vitest/node';
import { startEmbeddedPostgres, type EmbeddedDatabase } from '../../src/db/embedded.js';
import { createSql } from '../../src/db/client.js';
import { Pki } from '../../src/pki/pki.js';

declare module 'vitest' {
  export interface ProvidedContext {
    pgAdminUrl: string;
    certsDir: string;
  }
}

/**
 * One PostgreSQL server for the run (embedded in a temporary folder unless DATABASE_URL is set);
 * each test file then gets its own database (test/helpers/db.ts). One PKI for the run, too:
 * RSA-2048 generation is the slow part of a gateway's first start.
 */
export default async function setup(project: TestProject) {
  const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'gateway-test-'));
  let embedded: EmbeddedDatabase | undefined;
  let adminUrl = process.env.DATABASE_URL;
  if (!adminUrl) {
    embedded = await startEmbeddedPostgres(path.join(tmp, 'pg'), { port: 0, ephemeral: true });
    adminUrl = embedded.url;
  }
  const certsDir = path.join(tmp, 'certs');
  const sql = createSql(adminUrl, 1);
  await Pki.ensure(sql, { dir: certsDir, serverNames: ['localhost'], crlUrl: 'http://127.0.0.1/api/v1/certificates/crl' });
  await sql.end();
  project.provide('pgAdminUrl', adminUrl);
  project.provide('certsDir', certsDir);
  return async () => {
    await embedded?.stop();
    fs.rmSync(tmp, { recursive: true, force: true });
  };
}
