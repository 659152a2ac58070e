import crypto from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { freePort } from '../../src/db/embedded.js';
import type { HttpResponse, TestGateway } from '../helpers/gateway.js';
import { createTestDatabase, type TestDatabase } from '../helpers/db.js';
import { createAccount, type TestAccount } from '../helpers/accounts.js';
import { createClaimGroup, enrollDevice } from '../helpers/devices.js';
import { spawnGateway, type GatewayProcess } from '../helpers/process.js';
import type { FeedItem } from './helpers.js';

/**
 * 10,000 state changes read page by page while they are written: two gateway processes
 * (`tsx src/main.ts`) on one database, and a reader paging through both in turn. Writers run
 * on both processes at once: devices enroll over HTTP (`/ddi/v1/enroll`, the thing actor's birth
 * in ROLLEDOFF, 2 x 50), and, for the bulk that keeps the test fast, writers on their own
 * connections insert state-change rows into the log in transactions of 20, each holding its
 * transaction open a few milliseconds after taking its sequence numbers, so commits interleave
 * out of sequence order. Every change is read exactly once.
 */
let db: TestDatabase;
let nodes: GatewayProcess[] = [];
let a: TestAccount;

/** What the shared helpers need of a gateway, for a process reached only over HTTP. */
const asTestGateway = (node: GatewayProcess) => ({
  http: node.http,
  gw: { services: {} },
  token: async (input: object) => (await node.http.post('/dev/token', input)).body.access_token,
}) as unknown as TestGateway;

beforeAll(async () => {
  db = await createTestDatabase();
  const ports = [await freePort(), await freePort()];
  // one PUBLIC_BASE_URL (as behind a load balancer): a token of one process is valid on the other
  const publicBase = `http://127.0.0.1:${ports[0]}`;
  // JOBS=false: no background work is needed here, and two nodes starting pg-boss at once on a
  // fresh database can deadlock in its queue creation (seen here: the process exits at start)
  const start = (port: number) => spawnGateway({ DATABASE_URL: db.url, HTTP_PORT: String(port), PUBLIC_BASE_URL: publicBase, NODE_ID: `feed-${port}`, JOBS: 'false' });
  const started = await Promise.allSettled(ports.map(start));
  nodes = started.flatMap((r) => (r.status === 'fulfilled' ? [r.value] : []));
  const failed = started.find((r): r is PromiseRejectedResult => r.status === 'rejected');
  if (failed) throw failed.reason; // afterAll stops the one that started
  a = await createAccount(asTestGateway(nodes[0]));
}, 120_000);
afterAll(async () => {
  for (const n of nodes) {
    n.proc.kill('SIGTERM');
    await n.exited;
  }
  await db?.drop();
});

const TOTAL = 10_000;
const DEVICES_PER_PROCESS = 50;
const LOG_WRITERS = 4;
const LOG_ROWS = TOTAL - 2 * DEVICES_PER_PROCESS;

/** Inserts `count` thing.stateChanged rows of new thing ids, `perTx` to a transaction. */
async function writeLog(accountId: string, count: number, perTx = 20): Promise<void> {
  for (let i = 0; i < count; i += perTx) {
    const n = Math.min(perTx, count - i);
    await db.sql.begin(async (tx) => {
      await tx`
        insert into domain_events (actor_type, actor_id, type, account_id, payload)
        select 'thing', gen_random_uuid()::text, 'thing.stateChanged', ${accountId},
          jsonb_build_object('from', 'ACTIVATED', 'to', 'DEACTIVATED', 'event', 'DEACTIVATE', 'at', now())
        from generate_series(1, ${n})`;
      await tx`select pg_sleep(${Math.random() * 0.004})`;
    });
  }
}

describe('10,000 changes, written on two gateway processes while read', () => {
  it('no gap, no repeat', async () => {
    const { sharedSecret } = await createClaimGroup(asTestGateway(nodes[0]), a, { maxDevices: 2 * DEVICES_PER_PROCESS });
    let writing = true;
    let failed: unknown;
    const enrolled: string[] = [];
    const enrollOn = async (node: GatewayProcess, count: number) => {
      for (let i = 0; i < count; i++) enrolled.push((await enrollDevice(asTestGateway(node), a, { claimSecret: sharedSecret, serial: crypto.randomUUID() })).thingId);
    };
    const written = Promise.all([
      ...nodes.flatMap((node) => [enrollOn(node, DEVICES_PER_PROCESS / 2), enrollOn(node, DEVICES_PER_PROCESS / 2)]),
      ...Array.from({ length: LOG_WRITERS }, () => writeLog(a.id, LOG_ROWS / LOG_WRITERS)),
    ]).catch((err) => (failed = err)).finally(() => {
      writing = false;
    });

    const items: FeedItem[] = [];
    let cursor: string | undefined;
    let pages = 0;
    let pagesWhileWriting = 0;
    for (;;) {
      const res: HttpResponse = await nodes[pages % 2].http.get(`/provisioning/v1/state-changes?limit=500${cursor ? `&since=${cursor}` : ''}`, { token: a.viewer });
      expect(res.status, res.text).toBe(200);
      pages++;
      if (writing) pagesWhileWriting++;
      items.push(...res.body.items);
      cursor = res.body.next_cursor;
      if (failed) throw failed;
      if (!writing && !res.body.has_more && items.length >= TOTAL) break;
      if (!res.body.has_more && writing) await new Promise((r) => setTimeout(r, 20));
      if (pages > 5000) throw new Error('the reader never caught up');
    }
    await written;

    expect(items).toHaveLength(TOTAL);
    const sequences = items.map((i) => i.sequence);
    expect(new Set(sequences).size).toBe(TOTAL);
    const logged = await db.sql<{ seq: number }[]>`select seq from thing_state_changes where account_id = ${a.id} order by seq`;
    expect([...sequences].sort((x, y) => x - y)).toEqual(logged.map((r) => r.seq));
    expect(pagesWhileWriting).toBeGreaterThan(1);
    const births = items.filter((i) => i.new_state === 'ROLLEDOFF');
    expect(births.map((i) => i.thing_id).sort()).toEqual([...enrolled].sort());
    expect(births.every((i) => i.serial && i.model === 'sensor-1')).toBe(true);
  }, 120_000);
});
