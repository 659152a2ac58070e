import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { BridgesRepo } from '../../src/bridges/repo.js';
import { createSql, type Sql } from '../../src/db/client.js';
import { createTestDatabase, type TestDatabase } from '../helpers/db.js';

let db: TestDatabase;
let one: Sql;
beforeAll(async () => {
  db = await createTestDatabase();
  one = createSql(db.url, 1); // one connection: what advance sets must not stay on it
});
afterAll(async () => {
  await one?.end({ timeout: 5 });
  await db?.drop();
});

/**
 * A rule's position is committed without waiting for its WAL flush (at least once: a lost position
 * sends its batch again). The setting is the statement's own transaction's: the pooled connection
 * goes on committing durably (the ingest's PUBACKs wait for those commits).
 */
describe('a rule position write', () => {
  it('leaves synchronous_commit on for the connection', async () => {
    const repo = new BridgesRepo(one);
    expect(await repo.advance('00000000-0000-4000-8000-000000000000', 'node-x', { xid: '1', thing: null, seq: null }, 3)).toBe(false);
    const [{ synchronous_commit }] = await one<{ synchronous_commit: string }[]>`show synchronous_commit`;
    expect(synchronous_commit).toBe('on');
  });
});
