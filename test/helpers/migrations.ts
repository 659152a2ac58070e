import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';

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
