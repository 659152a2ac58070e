import crypto from 'node:crypto';
import { inject } from 'vitest';
import postgres from 'postgres';
import { createSql, type Sql } from '../../src/db/client.js';

export interface TestDatabase {
  url: string;
  sql: Sql;
  drop(): Promise<void>;
}

/** The admin URL of the run's PostgreSQL server (embedded, or DATABASE_URL). */
export function adminUrl(): string {
  return inject('pgAdminUrl');
}

/** The URL of database `name` on the server of `admin` (an admin URL). */
export function databaseUrl(admin: string, name: string): string {
  const u = new URL(admin);
  u.pathname = `/${name}`;
  return u.toString();
}

/**
 * A fresh database of its own (isolated from every other test file): a copy of the run's migrated
 * template (test/setup/global.ts), or empty with `migrated: false` (migration tests).
 */
export async function createTestDatabase(options: { migrated?: boolean } = {}): Promise<TestDatabase> {
  const name = `t_${crypto.randomBytes(6).toString('hex')}`;
  const admin = postgres(adminUrl(), { max: 1, onnotice: () => {} });
  await admin.unsafe(options.migrated === false ? `create database ${name}` : `create database ${name} template ${inject('pgTemplate')}`);
  await admin.end();
  const url = databaseUrl(adminUrl(), name);
  const sql = createSql(url, 5);
  return {
    url,
    sql,
    async drop() {
      await sql.end({ timeout: 5 });
      const a = postgres(adminUrl(), { max: 1, onnotice: () => {} });
      await a.unsafe(`drop database if exists ${name} with (force)`);
      await a.end();
    },
  };
}
