import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestGateway, expectProblem, type TestGateway } from '../helpers/gateway.js';
import { createAccount, type TestAccount } from '../helpers/accounts.js';
import { EXACT_TOTAL_LIMIT } from '../../src/trust/registry.js';

/** GET /api/v1/things?q= (serial or id prefix) and the list's total / total_estimate, over real HTTP. */
let gw: TestGateway;
let a: TestAccount;
let b: TestAccount;

beforeAll(async () => {
  gw = await startTestGateway();
  [a, b] = await Promise.all([createAccount(gw), createAccount(gw)]);
});
afterAll(async () => gw?.close());

/** fixture rows (the registry only reads them) */
async function insert(accountId: string, serials: string[]): Promise<string[]> {
  const rows = await gw.db.sql<{ id: string }[]>`
    insert into things (id, account_id, manufacturer, model, serial, lifecycle_state)
    select gen_random_uuid(), ${accountId}, 'Acme', 'FFF1:8001', s, 'ACTIVATED' from unnest(${serials}::text[]) s returning id`;
  return rows.map((r) => r.id);
}

const list = async (token: string, query: string) => {
  const res = await gw.http.get(`/api/v1/things?${query}`, { token });
  expect(res.status, res.text).toBe(200);
  return res.body as { items: { id: string; serial: string }[]; next_cursor: string | null; total: number | null; total_estimate?: number };
};

describe('fleet search and totals', () => {
  it('q matches serial prefixes in any case and thing-id prefixes; wildcards are literal; totals count every page; other accounts are not searched', async () => {
    const [s20, s200, s21] = await insert(a.id, ['SIM-000020', 'SIM-0000201', 'sim-000021', 'OTHER-1', 'X%Y_1', 'XaYb1']);
    await insert(b.id, ['SIM-000020']);

    const bySerial = await list(a.viewer, 'q=SIM-00002&limit=1&sort=created_at');
    expect(bySerial.total).toBe(3);
    expect(bySerial.items).toHaveLength(1);
    const second = await list(a.viewer, `q=SIM-00002&limit=1&sort=created_at&cursor=${encodeURIComponent(bySerial.next_cursor!)}`);
    expect(second.total).toBe(3);
    const all = await list(a.viewer, 'q=sim-00002');
    expect(all.items.map((t) => t.id).sort()).toEqual([s20, s200, s21].sort());
    expect((await list(a.viewer, 'q=SIM-000020')).items.map((t) => t.serial).sort()).toEqual(['SIM-000020', 'SIM-0000201']);

    const byId = await list(a.viewer, `q=${s21.slice(0, 13).toUpperCase()}`);
    expect(byId.items.map((t) => t.id)).toEqual([s21]);
    expect(byId.total).toBe(1);

    // % and _ match themselves only
    expect((await list(a.viewer, `q=${encodeURIComponent('X%Y_')}`)).items.map((t) => t.serial)).toEqual(['X%Y_1']);
    expect((await list(a.viewer, 'q=X_')).total).toBe(0);
    // combined with a filter; no q: every thing
    expect((await list(a.viewer, 'q=SIM&revoked=true')).total).toBe(0);
    expect((await list(a.viewer, '')).total).toBe(6);
    expect((await list(b.viewer, 'q=SIM')).total).toBe(1);

    expectProblem(await gw.http.get(`/api/v1/things?q=${'x'.repeat(129)}`, { token: a.viewer }), 400);
  });

  it(`above ${EXACT_TOTAL_LIMIT} matches: total null and a total_estimate; a narrower search is exact again`, async () => {
    const c = await createAccount(gw);
    await gw.db.sql`
      insert into things (id, account_id, manufacturer, model, serial, lifecycle_state)
      select gen_random_uuid(), ${c.id}, 'Acme', 'FFF1:8001', 'BULK-' || lpad(i::text, 6, '0'), 'ACTIVATED' from generate_series(1, ${EXACT_TOTAL_LIMIT + 50}) i`;
    await gw.db.sql`analyze things`;
    const many = await list(c.viewer, 'limit=5');
    expect(many.total).toBeNull();
    expect(many.total_estimate).toBeGreaterThan(EXACT_TOTAL_LIMIT);
    expect(many.items).toHaveLength(5);
    const few = await list(c.viewer, 'q=BULK-0001');
    expect(few.total).toBe(100);
    expect(few.total_estimate).toBeUndefined();
  });
});
