import crypto from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createAccount, type TestAccount } from '../helpers/accounts.js';
import { expectProblem, startTestGateway, type HttpResponse, type TestGateway } from '../helpers/gateway.js';
import { platformToken } from '../iam/helpers.js';
import { createFilter, createRollout, enrollFleet, SOFTWARE } from './helpers.js';

/**
 * The spec's capability table, OTA rows (1-credentials-access-quotas.md): create or edit target
 * filter, preview matched targets, create rollout (and control it) need `manage_ota_rollouts`;
 * viewing the rollout status of the account's own devices needs none. The layers run in order:
 * role, SCP explicit deny, capability.
 */
let gw: TestGateway;
let platform: string;
let qualified: TestAccount;
let unqualified: TestAccount;
/** a filter and a rollout of each account (the unqualified one's made while it still held the capability) */
const made = new Map<string, { filterId: string; rolloutId: string }>();

beforeAll(async () => {
  gw = await startTestGateway();
  platform = await platformToken(gw);
  qualified = await createAccount(gw, { capabilities: ['manage_ota_rollouts'] });
  unqualified = await createAccount(gw, { capabilities: ['manage_ota_rollouts'] });
  for (const a of [qualified, unqualified]) {
    await enrollFleet(gw, a, 2, 'CAP-1');
    const filter = await createFilter(gw, a, { model: 'CAP-1' });
    made.set(a.id, { filterId: filter.id, rolloutId: (await createRollout(gw, a, filter.id, { groups: 1 })).id });
  }
  const revoked = await gw.http.delete(`/platform/v1/accounts/${unqualified.id}/capabilities/manage_ota_rollouts`, { token: platform });
  expect(revoked.status).toBe(204);
});
afterAll(() => gw?.close());

type Call = (a: TestAccount, token: string) => Promise<HttpResponse>;
const filterBody = () => ({ name: `f-${crypto.randomUUID().slice(0, 8)}`, query: { model: 'CAP-1' } });
const ids = (a: TestAccount) => made.get(a.id)!;

/** Each gated operation, with its action (as SCPs name it) and its status when allowed. */
const GATED: { row: string; action: string; ok: number; call: Call }[] = [
  { row: 'Create or edit target filter', action: 'ota:TargetFilter:Create', ok: 201, call: (_a, token) => gw.http.post('/api/v1/ota/target-filters', filterBody(), { token }) },
  { row: 'Create or edit target filter', action: 'ota:TargetFilter:Update', ok: 200, call: (a, token) => gw.http.put(`/api/v1/ota/target-filters/${ids(a).filterId}`, filterBody(), { token }) },
  {
    row: 'Create or edit target filter', action: 'ota:TargetFilter:Delete', ok: 204,
    call: async (a, token) => {
      const spare = await gw.db.sql<{ id: string }[]>`
        insert into ota_target_filters (id, account_id, name, query, created_at, updated_at)
        values (${crypto.randomUUID()}, ${a.id}, ${crypto.randomUUID()}, '{}', now(), now()) returning id`;
      return gw.http.delete(`/api/v1/ota/target-filters/${spare[0].id}`, { token });
    },
  },
  { row: 'Preview matched targets', action: 'ota:TargetFilter:Preview', ok: 200, call: (a, token) => gw.http.get(`/api/v1/ota/target-filters/${ids(a).filterId}/preview`, { token }) },
  {
    row: 'Create rollout', action: 'ota:Rollout:Create', ok: 201,
    call: (a, token) => gw.http.post('/api/v1/ota/rollouts', { name: 'r', filter_id: ids(a).filterId, software: SOFTWARE, groups: 1, success_threshold: 100, error_threshold: 0 }, { token }),
  },
  // controlling a rollout is managing it: gated like its creation (START on a READY one answers 200)
  { row: 'Create rollout (control)', action: 'ota:Rollout:Start', ok: 200, call: (a, token) => gw.http.post(`/api/v1/ota/rollouts/${ids(a).rolloutId}/start`, undefined, { token }) },
  { row: 'Create rollout (control)', action: 'ota:Rollout:Pause', ok: 200, call: (a, token) => gw.http.post(`/api/v1/ota/rollouts/${ids(a).rolloutId}/pause`, undefined, { token }) },
  { row: 'Create rollout (control)', action: 'ota:Rollout:Resume', ok: 200, call: (a, token) => gw.http.post(`/api/v1/ota/rollouts/${ids(a).rolloutId}/resume`, undefined, { token }) },
  { row: 'Create rollout (control)', action: 'ota:Rollout:Cancel', ok: 200, call: (a, token) => gw.http.post(`/api/v1/ota/rollouts/${ids(a).rolloutId}/cancel`, undefined, { token }) },
];

/** `one`: reads one resource of the account (another account's caller gets 404); otherwise a list of the caller's own */
const READS: { row: string; one: boolean; call: Call }[] = [
  { row: 'View rollout status', one: false, call: (_a, token) => gw.http.get('/api/v1/ota/rollouts', { token }) },
  { row: 'View rollout status', one: true, call: (a, token) => gw.http.get(`/api/v1/ota/rollouts/${ids(a).rolloutId}`, { token }) },
  { row: 'View rollout status', one: true, call: (a, token) => gw.http.get(`/api/v1/ota/rollouts/${ids(a).rolloutId}/groups`, { token }) },
  { row: 'View rollout status', one: true, call: (a, token) => gw.http.get(`/api/v1/ota/rollouts/${ids(a).rolloutId}/actions`, { token }) },
  { row: 'View rollout status (filters)', one: true, call: (a, token) => gw.http.get(`/api/v1/ota/target-filters/${ids(a).filterId}`, { token }) },
  { row: 'View rollout status (filters)', one: false, call: (_a, token) => gw.http.get('/api/v1/ota/target-filters', { token }) },
];

describe('OTA rows of the capability table', () => {
  it('without manage_ota_rollouts every gated operation is the capability 403 and writes nothing', async () => {
    const before = await counts(unqualified.id);
    for (const op of GATED) {
      const problem = expectProblem(await op.call(unqualified, unqualified.operator), 403);
      expect(problem.detail, `${op.row}: ${op.action}`).toMatch(new RegExp(`^account not qualified: ${op.action} requires capability manage_ota_rollouts`));
    }
    // the Delete row's spare filters were inserted by the test itself
    const after = await counts(unqualified.id);
    expect({ ...after, filters: after.filters - 1 }).toEqual(before);
    expect((await gw.http.get(`/api/v1/ota/rollouts/${ids(unqualified).rolloutId}`, { token: unqualified.viewer })).body.state).toBe('READY');
  });

  it('with manage_ota_rollouts each gated operation succeeds (admin and operator)', async () => {
    for (const [i, op] of GATED.entries()) {
      const res = await op.call(qualified, i % 2 ? qualified.admin : qualified.operator);
      expect(res.status, `${op.row}: ${op.action}: ${res.text}`).toBe(op.ok);
    }
    expect((await gw.http.get(`/api/v1/ota/rollouts/${ids(qualified).rolloutId}`, { token: qualified.viewer })).body.state).toBe('CANCELLED');
  });

  it('viewing rollout status needs no capability: any role of the account reads its own; another account gets 404', async () => {
    for (const op of READS) {
      for (const token of [unqualified.viewer, unqualified.operator, unqualified.admin, qualified.viewer]) {
        const a = token === qualified.viewer ? qualified : unqualified;
        const res = await op.call(a, token);
        expect(res.status, `${op.row}: ${res.text}`).toBe(200);
      }
    }
    for (const op of READS.filter((r) => r.one)) expectProblem(await op.call(qualified, unqualified.viewer), 404);
    const listed = await gw.http.get('/api/v1/ota/rollouts', { token: unqualified.viewer });
    expect(listed.body.items.map((r: { id: string }) => r.id)).toEqual([ids(unqualified).rolloutId]);
  });

  it('layer order: role first (a viewer of a qualified account), then SCP deny (before the capability), then the capability', async () => {
    for (const op of GATED) {
      expect(expectProblem(await op.call(qualified, qualified.viewer), 403).detail, op.action).toMatch(/^insufficient role/);
    }
    const scp = await gw.http.post('/platform/v1/scps', { name: `deny-ota-${crypto.randomUUID().slice(0, 6)}`, document: { Version: '2012-10-17', Statement: [{ Effect: 'Deny', Action: ['ota:*'], Resource: '*' }] } }, { token: platform });
    expect(scp.status).toBe(201);
    for (const a of [qualified, unqualified]) expect((await gw.http.put(`/platform/v1/accounts/${a.id}/scps/${scp.body.id}`, undefined, { token: platform })).status).toBe(201);
    try {
      for (const op of GATED) {
        // role before SCP
        expect(expectProblem(await op.call(qualified, qualified.viewer), 403).detail).toMatch(/^insufficient role/);
        // SCP with the capability held, and SCP before the missing capability
        for (const a of [qualified, unqualified]) {
          expect(expectProblem(await op.call(a, a.operator), 403).detail, op.action).toMatch(new RegExp(`^action ${op.action} denied by policy`));
        }
      }
    } finally {
      for (const a of [qualified, unqualified]) await gw.http.delete(`/platform/v1/accounts/${a.id}/scps/${scp.body.id}`, { token: platform });
    }
    // granted again: the unqualified account passes every layer
    expect((await gw.http.put(`/platform/v1/accounts/${unqualified.id}/capabilities/manage_ota_rollouts`, undefined, { token: platform })).status).toBe(200);
    expect((await GATED[0].call(unqualified, unqualified.operator)).status).toBe(201);
  });
});

async function counts(accountId: string) {
  const [row] = await gw.db.sql<{ filters: number; rollouts: number; started: number }[]>`
    select (select count(*)::int from ota_target_filters where account_id = ${accountId}) as filters,
      (select count(*)::int from ota_rollouts where account_id = ${accountId}) as rollouts,
      (select count(*)::int from ota_rollouts where account_id = ${accountId} and state <> 'READY') as started`;
  return row;
}
