import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import type { Sql } from './client.js';

const MIGRATIONS_DIR = path.join(path.dirname(fileURLToPath(import.meta.url)), 'migrations');
/** Any constant: every node takes the same advisory lock, so only one applies migrations. */
const MIGRATION_LOCK = 7_211_042;

export interface MigrationResult { applied: string[] }

/**
 * Applies forward-only SQL migrations (`src/db/migrations/NNNN_name.sql`, in file-name order),
 * each in its own transaction, under a session advisory lock: two nodes starting together wait
 * for each other instead of racing. Files are numbered by domain range (0001 foundation,
 * 01xx trust, 02xx broker, 03xx iam, 04xx notifications, 05xx quotas).
 */
export async function migrate(sql: Sql, dir = MIGRATIONS_DIR): Promise<MigrationResult> {
  const files = fs.readdirSync(dir).filter((f) => /^\d{4}_.+\.sql$/.test(f)).sort();
  const applied: string[] = [];
  await sql.begin(async (tx) => {
    // A transaction-level lock on one reserved connection; the migrations run inside it.
    await tx`select pg_advisory_xact_lock(${MIGRATION_LOCK})`;
    await tx`create table if not exists schema_migrations (name text primary key, applied_at timestamptz not null default now())`;
    const done = new Set((await tx<{ name: string }[]>`select name from schema_migrations`).map((r) => r.name));
    for (const file of files) {
      if (done.has(file)) continue;
      const body = fs.readFileSync(path.join(dir, file), 'utf8');
      await tx.savepoint(async (sp) => {
        await sp.unsafe(body);
        await sp`insert into schema_migrations (name) values (${file})`;
      });
      applied.push(file);
    }
  });
  return { applied };
}
