import crypto from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createAccount, type TestAccount } from '../helpers/accounts.js';
import { enrollDevice } from '../helpers/devices.js';
import { expectProblem, startTestGateway, type HttpResponse, type TestGateway } from '../helpers/gateway.js';
import { platformToken } from './helpers.js';

/**
 * The capability table of spec 1 ("Authorization layers"), row by row, for the rows that exist:
 * each row with and without its capability, and the order of the layers: role, then an SCP's
 * explicit deny, then the capability. (The OTA rollout rows are tested with the OTA service.)
 */
let gw: TestGateway;
let platform: string;
/** owns things other accounts join */
let lender: TestAccount;
let pid = 0x5000;

beforeAll(async () => {
  gw = await startTestGateway();
  platform = await platformToken(gw);
  lender = await createAccount(gw);
});
afterAll(async () => gw?.close());

const grant = async (a: TestAccount, capability: string) =>
  expect((await gw.http.put(`/platform/v1/accounts/${a.id}/capabilities/${capability}`, undefined, { token: platform })).status).toBe(200);
const revoke = async (a: TestAccount, capability: string) =>
  expect((await gw.http.delete(`/platform/v1/accounts/${a.id}/capabilities/${capability}`, { token: platform })).status).toBe(204);

async function denyBySCP(a: TestAccount, action: string): Promise<string> {
  const name = `deny-${crypto.randomUUID().slice(0, 8)}`;
  const scp = await gw.http.post('/platform/v1/scps', { name, document: { Version: '2012-10-17', Statement: [{ Effect: 'Deny', Action: [action], Resource: '*' }] } }, { token: platform });
  expect(scp.status, scp.text).toBe(201);
  expect((await gw.http.put(`/platform/v1/accounts/${a.id}/scps/${scp.body.id}`, undefined, { token: platform })).status).toBe(201);
  return name;
}

async function model(a: TestAccount, extra: Record<string, unknown> = {}) {
  const res = await gw.http.post('/api/v1/models', { vid: 'FFF4', pid: (pid++).toString(16).toUpperCase(), name: 'table model', provisioning_method: 'claim_token', ...extra }, { token: a.operator });
  expect(res.status, res.text).toBe(201);
  return res.body as { id: string; descriptor: string };
}

interface Row {
  service: string;
  operation: string;
  action: string;
  capability?: string;
  /** the spec's "without it" beyond the 403 */
  hint?: RegExp;
  ok: number;
  /** one call of the operation by `token` of account `a`, on a fresh target each time (setup needs no capability) */
  call(a: TestAccount, token: string): Promise<HttpResponse>;
  /** what the refused calls must not have left behind */
  nothingDone?(a: TestAccount): Promise<void>;
}

const ROWS: Row[] = [
  {
    service: 'Device registry', operation: 'POST /things (enroll)', action: 'factory:Thing:Enroll', capability: 'enroll_things', ok: 201,
    hint: /join existing devices with POST \/api\/v1\/things\/join and an access_code instead/,
    call: (_a, token) => gw.http.post('/api/v1/things', { manufacturer: 'Acme', model: 'table-1', serial: `SN-${crypto.randomUUID().slice(0, 8)}` }, { token }),
    async nothingDone(a) {
      expect(await gw.db.sql`select 1 from things where account_id = ${a.id}`).toHaveLength(0);
    },
  },
  {
    service: 'Device registry', operation: 'POST /things/join', action: 'factory:Thing:Join', ok: 200,
    async call(_a, token) {
      const thing = await enrollDevice(gw, lender);
      const code = await gw.http.post(`/api/v1/things/${thing.thingId}/access-code`, undefined, { token: lender.operator });
      expect(code.status, code.text).toBe(201);
      return gw.http.post('/api/v1/things/join', { access_code: code.body.accessCode }, { token });
    },
  },
  {
    service: 'Device trust service', operation: 'Approve license', action: 'factory:License:Approve', capability: 'approve_licenses', ok: 200,
    async call(a, token) {
      const m = await model(a, { licenseApproval: 'manual', provisioning_method: 'none' });
      const licenseId = await pendingLicense(a, m.descriptor);
      return gw.http.post(`/api/v1/licenses/${licenseId}/approve`, undefined, { token });
    },
    async nothingDone(a) {
      expect(await gw.db.sql`select 1 from device_licenses l join things t on t.id = l.thing_id where t.account_id = ${a.id} and l.decision <> 'pending'`).toHaveLength(0);
    },
  },
  {
    service: 'Marketplace', operation: 'Publish product', action: 'marketplace:Product:Publish', capability: 'publish_marketplace', ok: 200,
    async call(a, token) {
      const m = await model(a);
      await gw.http.patch(`/api/v1/models/${m.id}`, { bundles: [{ kind: 'software', name: 'fw', version: '1.0.0', url: 'https://example.com/fw.bin' }] }, { token: a.operator });
      // the draft is set up through the marketplace's test hook (the HTTP create is itself gated: the next row)
      const draft = await gw.testHooks.marketplace.createDraft(a.id, { model_id: m.id, name: 'table product', bundles: [{ name: 'fw', version: '1.0.0' }] });
      return gw.http.post(`/api/v1/marketplace/products/${draft.id}/publish`, undefined, { token });
    },
    async nothingDone(a) {
      expect(await gw.db.sql`select 1 from marketplace_products where account_id = ${a.id} and state <> 'DRAFT'`).toHaveLength(0);
    },
  },
  {
    service: 'Marketplace', operation: 'Create product (draft)', action: 'marketplace:Product:Create', capability: 'publish_marketplace', ok: 201,
    async call(a, token) {
      const m = await model(a);
      return gw.http.post('/api/v1/marketplace/products', { model_id: m.id, name: 'table product' }, { token });
    },
    async nothingDone(a) {
      expect(await gw.db.sql`select 1 from marketplace_products where account_id = ${a.id}`).toHaveLength(0);
    },
  },
];

/**
 * A pending license of a new token-flow device of the model, registered over HTTP (POST /api/v1/things,
 * the enroll row: gated by enroll_things, which the account holds only for that request).
 */
async function pendingLicense(a: TestAccount, descriptor: string): Promise<string> {
  await grant(a, 'enroll_things');
  const created = await gw.http.post('/api/v1/things', { manufacturer: 'Acme', model: descriptor, serial: `SN-${crypto.randomUUID().slice(0, 8)}` }, { token: a.operator });
  await revoke(a, 'enroll_things');
  expect(created.status, created.text).toBe(201);
  const registered = created.body as { thingId: string; enrollmentToken: string };
  const enrolled = await gw.http.post('/ddi/v1/enroll', { enrollmentToken: registered.enrollmentToken });
  expect(enrolled.status, enrolled.text).toBe(200);
  const res = await gw.http.post(`/ddi/v1/${registered.thingId}/license/request`, {}, { headers: { authorization: `TargetToken ${registered.enrollmentToken}` } });
  expect(res.status, res.text).toBe(202);
  return res.body.licenseId;
}

const notQualified = (action: string, capability: string) => new RegExp(`^account not qualified: ${action} requires capability ${capability}`);

describe.each(ROWS)('$service | $operation | $capability', (row) => {
  if (row.capability) {
    const capability = row.capability;
    it(`without ${capability}: 403 account not qualified${row.hint ? ' with the join hint' : ''}; with it: ${row.ok}; revoked: 403 again`, async () => {
      const a = await createAccount(gw);
      const refused = expectProblem(await row.call(a, a.operator), 403);
      expect(refused.detail).toMatch(notQualified(row.action, capability));
      expect(refused.capability).toBe(capability);
      if (row.hint) expect(refused.detail).toMatch(row.hint);
      else expect(refused.detail).not.toMatch(/join/);
      await row.nothingDone?.(a);

      await grant(a, capability);
      // every user of the account shares its capabilities
      for (const token of [a.operator, a.admin]) {
        const res = await row.call(a, token);
        expect(res.status, res.text).toBe(row.ok);
      }
      await revoke(a, capability);
      expect(expectProblem(await row.call(a, a.admin), 403).detail).toMatch(notQualified(row.action, capability));
    });

    it('role first: a viewer gets the role 403, with or without the capability', async () => {
      const a = await createAccount(gw);
      expect(expectProblem(await row.call(a, a.viewer), 403).detail).toMatch(/^insufficient role/);
      await grant(a, capability);
      expect(expectProblem(await row.call(a, a.viewer), 403).detail).toMatch(/^insufficient role/);
      await row.nothingDone?.(a);
    });

    it('SCP before capability: an explicit deny beats the capability, and is answered before a missing one', async () => {
      const a = await createAccount(gw);
      const scp = await denyBySCP(a, row.action);
      const first = expectProblem(await row.call(a, a.operator), 403);
      expect(first.detail).toMatch(new RegExp(`^action ${row.action} denied by policy`));
      expect(first.detail).toContain(scp);
      await grant(a, capability);
      const denied = expectProblem(await row.call(a, a.operator), 403);
      expect(denied.detail).toMatch(new RegExp(`^action ${row.action} denied by policy`));
      expect(denied.detail).not.toMatch(/not qualified/);
      // the role layer still comes first
      expect(expectProblem(await row.call(a, a.viewer), 403).detail).toMatch(/^insufficient role/);
      await row.nothingDone?.(a);
    });
  } else {
    it(`needs no capability: an account holding none gets ${row.ok}`, async () => {
      const a = await createAccount(gw);
      const res = await row.call(a, a.operator);
      expect(res.status, res.text).toBe(row.ok);
    });

    it('still goes through role and SCP: a viewer gets the role 403, an explicit deny the SCP 403', async () => {
      const a = await createAccount(gw);
      expect(expectProblem(await row.call(a, a.viewer), 403).detail).toMatch(/^insufficient role/);
      await denyBySCP(a, row.action);
      expect(expectProblem(await row.call(a, a.operator), 403).detail).toMatch(new RegExp(`^action ${row.action} denied by policy`));
    });
  }
});

describe('capabilities gate creation and management, not read access', () => {
  it('an account with no capabilities reads its things, licenses, the marketplace and its own products', async () => {
    const a = await createAccount(gw);
    expect((await gw.http.get('/iam/v1/accounts/' + a.id + '/capabilities', { token: a.admin })).body.capabilities).toEqual([]);
    for (const path of ['/api/v1/things', '/api/v1/licenses', '/api/v1/marketplace/products', '/api/v1/marketplace/products/mine']) {
      const res = await gw.http.get(path, { token: a.viewer });
      expect(res.status, `${path}: ${res.text}`).toBe(200);
    }
  });
});
