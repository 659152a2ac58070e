import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestGateway, type HttpResponse, type TestGateway } from '../helpers/gateway.js';
import { createTestDatabase, type TestDatabase } from '../helpers/db.js';
import { createAccount, type TestAccount } from '../helpers/accounts.js';
import { bornThings, step, type FeedItem } from './helpers.js';

/**
 * 10,000 state changes read page by page while they are written: two gateway nodes on one
 * database and a reader paging through both in turn. On each node one writer drives things
 * through the actor store (500 births, then a PROVISION of each: 2,000 changes in all, in
 * transactions of 25) and four more write the log's rows themselves in transactions of 20
 * (8,000 in all: the bulk that keeps the test fast; they commit out of order like any writer).
 * Every change is read exactly once, and each thing's changes in their order.
 */
let db: TestDatabase;
let nodes: TestGateway[];
let a: TestAccount;
/** a viewer token of the account from each node's development issuer */
let viewers: string[];

beforeAll(async () => {
  db = await createTestDatabase({ migrated: false });
  const first = await startTestGateway({}, { db });
  nodes = [first, await startTestGateway({}, { db })];
  a = await createAccount(first);
  viewers = await Promise.all(nodes.map((n) => n.token({ realm: `acc-${a.id}`, sub: 'feed-reader', roles: ['viewer'] })));
});
afterAll(async () => {
  for (const n of nodes ?? []) await n.close();
  await db?.drop();
});

const TOTAL = 10_000;
const THINGS_PER_NODE = 500; // each: birth + PROVISION
const LOG_WRITERS_PER_NODE = 4;
const LOG_ROWS_PER_WRITER = (TOTAL - 2 * 2 * THINGS_PER_NODE) / (2 * LOG_WRITERS_PER_NODE);

/** Writes `count` thing.stateChanged rows of new thing ids, `perTx` to a transaction, on the node's pool. */
async function writeLog(node: TestGateway, accountId: string, count: number, perTx = 20): Promise<void> {
  for (let i = 0; i < count; i += perTx) {
    const n = Math.min(perTx, count - i);
    await node.gw.sql.begin(async (tx) => {
      await tx`
        insert into domain_events (actor_type, actor_id, type, account_id, payload)
        select 'thing', gen_random_uuid()::text, 'thing.stateChanged', ${accountId},
          jsonb_build_object('from', 'ACTIVATED', 'to', 'DEACTIVATED', 'event', 'DEACTIVATE', 'at', now())
        from generate_series(1, ${n})`;
      // a little work between the sequence taken and the commit, as real transactions have
      await tx`select pg_sleep(${Math.random() * 0.004})`;
    });
  }
}

describe('10,000 changes, written on two nodes while read', () => {
  it('no gap, no repeat, each thing in order', async () => {
    let writing = true;
    const writers = nodes.flatMap((node) => [
      (async () => {
        const ids = await bornThings(node, a.id, THINGS_PER_NODE, { perTx: 25 });
        await step(node, ids, 'PROVISION', 25);
      })(),
      ...Array.from({ length: LOG_WRITERS_PER_NODE }, () => writeLog(node, a.id, LOG_ROWS_PER_WRITER)),
    ]);
    let failed: unknown;
    const written = Promise.all(writers).catch((err) => (failed = err)).finally(() => {
      writing = false;
    });

    const items: FeedItem[] = [];
    let cursor: string | undefined;
    let pages = 0;
    for (;;) {
      const res: HttpResponse = await nodes[pages % 2].http.get(`/provisioning/v1/state-changes?limit=500${cursor ? `&since=${cursor}` : ''}`, { token: viewers[pages % 2] });
      expect(res.status, res.text).toBe(200);
      pages++;
      items.push(...res.body.items);
      cursor = res.body.next_cursor;
      if (!writing && !res.body.has_more && items.length >= TOTAL) break;
      if (!res.body.has_more && writing) await new Promise((r) => setTimeout(r, 20));
      if (failed) throw failed;
      if (pages > 5000) throw new Error('the reader never caught up');
    }
    await written;

    expect(items).toHaveLength(TOTAL);
    const sequences = items.map((i) => i.sequence);
    expect(new Set(sequences).size).toBe(TOTAL);
    const logged = await db.sql<{ seq: number }[]>`select seq from thing_state_changes where account_id = ${a.id} order by seq`;
    expect([...sequences].sort((x, y) => x - y)).toEqual(logged.map((r) => r.seq));
    // read while written: many pages, over both nodes
    expect(pages).toBeGreaterThan(TOTAL / 500);

    const seen = new Map<string, string[]>();
    for (const i of items) seen.set(i.thing_id, [...(seen.get(i.thing_id) ?? []), i.new_state]);
    const driven = [...seen.values()].filter((states) => states[0] !== 'DEACTIVATED');
    expect(driven).toHaveLength(2 * THINGS_PER_NODE);
    for (const states of driven) expect(states).toEqual(['ROLLEDOFF', 'PROVISIONED']);
  }, 120_000);
});
