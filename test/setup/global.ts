import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import type { TestProject } from 'vitest/node';
import { startEmbeddedPostgres, type EmbeddedDatabase } from '../../src/db/embedded.js';
import { createSql } from '../../src/db/client.js';
import { migrate } from '../../src/db/migrate.js';
import { Jobs } from '../../src/jobs.js';
import { createLogger } from '../../src/log.js';
import { Pki } from '../../src/pki/pki.js';
import { compileSources } from './compile.js';
import { databaseUrl } from '../helpers/db.js';

declare module 'vitest' {
  export interface ProvidedContext {
    pgAdminUrl: string;
    certsDir: string;
    buildDir: string;
    pgTemplate: string;
  }
}

/**
 * One PostgreSQL server for the run (embedded in a temporary folder unless DATABASE_URL is set);
 * each test file then gets its own database (test/helpers/db.ts). One PKI for the run, too:
 * RSA-2048 generation is the slow part of a gateway's first start. And one compiled copy of the
 * sources, which child processes start from (test/helpers/compiled.ts). And one migrated template
 * database, with pg-boss's schema: a test database is a copy of it (test/helpers/db.ts), which
 * costs PostgreSQL about 0.1 s of CPU where migrating a new one cost about 1 s, at every one of the
 * suite's gateway starts.
 */
export default async function setup(project: TestProject) {
  const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'gateway-test-'));
  let embedded: EmbeddedDatabase | undefined;
  let adminUrl = process.env.DATABASE_URL;
  if (!adminUrl) {
    embedded = await startEmbeddedPostgres(path.join(tmp, 'pg'), { port: 0, ephemeral: true });
    adminUrl = embedded.url;
  }
  const buildDir = path.join(tmp, 'build');
  const compiling = compileSources(process.cwd(), buildDir);
  const certsDir = path.join(tmp, 'certs');
  const sql = createSql(adminUrl, 1);
  await Pki.ensure(sql, { dir: certsDir, serverNames: ['localhost'], crlUrl: 'http://127.0.0.1/api/v1/certificates/crl' });
  const pgTemplate = `t_template_${process.pid}_${Date.now()}`;
  await sql.unsafe(`create database ${pgTemplate}`);
  await sql.end();
  await prepareTemplate(adminUrl, pgTemplate);
  project.provide('pgAdminUrl', adminUrl);
  project.provide('certsDir', certsDir);
  project.provide('pgTemplate', pgTemplate);
  await compiling;
  project.provide('buildDir', buildDir);
  return async () => {
    const admin = createSql(adminUrl!, 1);
    await admin.unsafe(`drop database if exists ${pgTemplate}`).catch(() => {});
    await admin.end();
    await embedded?.stop();
    fs.rmSync(tmp, { recursive: true, force: true });
  };
}

/** Migrations and pg-boss's schema (what every gateway's start would create), then no connections allowed: copies only. */
async function prepareTemplate(adminUrl: string, name: string): Promise<void> {
  const url = databaseUrl(adminUrl, name);
  const sql = createSql(url, 1);
  await migrate(sql);
  const jobs = new Jobs(url, createLogger('error', false));
  await jobs.start(false);
  await jobs.stop();
  await sql.end();
  const admin = createSql(adminUrl, 1);
  await admin.unsafe(`alter database ${name} with allow_connections false`);
  await admin.unsafe(`select pg_terminate_backend(pid) from pg_stat_activity where datname = '${name}'`);
  await admin.end();
}
