import crypto from 'node:crypto';
import { inject } from 'vitest';
import postgres from 'postgres';
import { createSql, type Sql } from '../../src/db/client.js';
import { migrate } from '../../src/db/migrate.js';

export interface TestDatabase {
  url: string;
  sql: Sql;
  drop(): Promise<void>;
}

/** The admin URL of the run's PostgreSQL server (embedded, or DATABASE_URL). */
export function adminUrl(): string {
  return inject('pgAdminUrl');
}

/** A fresh database of its own (isolated from every other test file), migrated unless `migrated: false`. */
export async function createTestDatabase(options: { migrated?: boolean } = {}): Promise<TestDatabase> {
  const name = `t_${crypto.randomBytes(6).toString('hex')}`;
  const admin = postgres(adminUrl(), { max: 1, onnotice: () => {} });
  await admin.unsafe(`create database ${name}`);
  await admin.end();
  const u = new URL(adminUrl());
  u.pathname = `/${name}`;
  const url = u.toString();
  const sql = createSql(url, 5);
  if (options.migrated !== false) await migrate(sql);
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
