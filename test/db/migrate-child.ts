// Run by migrate.test.ts in two processes at once: applies migrations and prints what it applied.
import { createSql } from '../../src/db/client.js';
import { migrate } from '../../src/db/migrate.js';

const sql = createSql(process.argv[2], 2);
const { applied } = await migrate(sql);
await sql.end();
process.stdout.write(JSON.stringify(applied));
