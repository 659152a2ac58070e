import { execFile } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createTestDatabase, type TestDatabase } from '../helpers/db.js';
import { compiled } from '../helpers/compiled.js';

const run = promisify(execFile);
const child = compiled('test/db/migrate-child.ts');
let db: TestDatabase;
beforeAll(async () => {
  db = await createTestDatabase({ migrated: false });
});
afterAll(() => db?.drop());

describe('migrations', () => {
  it('two processes starting at once apply each migration exactly once', async () => {
    const [a, b] = await Promise.all([
      run(process.execPath, [child, db.url]),
      run(process.execPath, [child, db.url]),
    ]);
    const appliedA: string[] = JSON.parse(a.stdout);
    const appliedB: string[] = JSON.parse(b.stdout);
    const all = fs.readdirSync('src/db/migrations').filter((f) => f.endsWith('.sql')).sort();
    // one process applied everything, the other waited on the lock and found nothing to do
    expect([...appliedA, ...appliedB].sort()).toEqual(all);
    expect(appliedA.length === 0 || appliedB.length === 0).toBe(true);
    const rows = await db.sql<{ name: string }[]>`select name from schema_migrations order by name`;
    expect(rows.map((r) => r.name)).toEqual(all);
  });

  it('a second run is a no-op', async () => {
    const { stdout } = await run(process.execPath, [child, db.url]);
    expect(JSON.parse(stdout)).toEqual([]);
  });
});
