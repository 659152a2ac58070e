import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll } from 'vitest';
import { createActor, type AnyMachineSnapshot, type AnyStateMachine } from 'xstate';
import type { Sql } from '../../src/db/client.js';
import { migrate } from '../../src/db/migrate.js';
import { createTestDatabase, type TestDatabase } from './db.js';

const SOURCE = path.resolve('src/db/migrations');

/**
 * A folder to migrate a test database step by step: `copy(filter)` brings the chosen migrations
 * of src/db/migrations into it (e.g. those before the one under test, then that one).
 */
export function migrationFolder(): { dir: string; copy(filter: (file: string) => boolean): void; remove(): void } {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'migrations-'));
  return {
    dir,
    copy(filter) {
      for (const f of fs.readdirSync(SOURCE).filter(filter)) fs.copyFileSync(path.join(SOURCE, f), path.join(dir, f));
    },
    remove() {
      fs.rmSync(dir, { recursive: true, force: true });
    },
  };
}

/**
 * A test database migrated step by step, created before the file's tests and dropped after:
 * `upTo(filter)` copies the chosen migrations of src/db/migrations into the file's folder and
 * applies what is new there (answering the migrations applied).
 */
export function migrationTestbed(): { readonly sql: Sql; upTo(filter: (file: string) => boolean): Promise<string[]> } {
  let db: TestDatabase | undefined;
  let folder: ReturnType<typeof migrationFolder> | undefined;
  beforeAll(async () => {
    db = await createTestDatabase({ migrated: false });
    folder = migrationFolder();
  });
  afterAll(async () => {
    await db?.drop();
    folder?.remove();
  });
  return {
    get sql() {
      if (!db) throw new Error('migrationTestbed: the database is made in beforeAll');
      return db.sql;
    },
    async upTo(filter) {
      folder!.copy((f) => f.endsWith('.sql') && filter(f));
      return (await migrate(db!.sql, folder!.dir)).applied;
    },
  };
}

/** A snapshot as its machine restores it (what a migration wrote must be one the machine can go on from). */
export const restoreSnapshot = (machine: AnyStateMachine, snapshot: unknown): AnyMachineSnapshot =>
  createActor(machine, { snapshot: snapshot as AnyMachineSnapshot }).getSnapshot() as AnyMachineSnapshot;
