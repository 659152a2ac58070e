import crypto from 'node:crypto';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ManualClock } from '../../src/lib/clock.js';
import { signedFetch, signedHeaders, signingTimestamp, type Credentials } from '../../src/clients/svcSigner.js';
import { startTestGateway, expectProblem, type HttpResponse, type TestGateway } from '../helpers/gateway.js';
import { createAccount, type TestAccount } from '../helpers/accounts.js';
import { waitFor } from '../helpers/wait.js';
import { platformToken, registrar as approvedRegistrar } from '../registry/helpers.js';

/**
 * Factory services over real HTTP and Postgres: every row of the spec's table for
 * /api/v1/factory-services with bearer tokens and with SVC-HMAC-SHA256 signed requests, and the
 * signed-request refusals. Time for the signature checks comes from the gateway's ManualClock.
 */
const clock = new ManualClock();
let gw: TestGateway;
let a: TestAccount;
let b: TestAccount;
let pid = 0x2000;

beforeAll(async () => {
  gw = await startTestGateway({}, { clock });
  [a, b] = await Promise.all([createAccount(gw), createAccount(gw)]);
});
afterAll(async () => {
  await gw?.close();
});

async function model(account: TestAccount): Promise<string> {
  const body = { vid: 'FFF3', pid: (pid++).toString(16).toUpperCase(), name: 'factory model', provisioning_method: 'none' };
  const res = await gw.http.post('/api/v1/models', body, { token: account.admin });
  if (res.status !== 201) throw new Error(`model create failed: ${res.status} ${res.text}`);
  return res.body.id;
}

interface Registered { id: string; creds: Credentials; body: Record<string, any> }

async function register(account: TestAccount, extra: Record<string, unknown> = {}): Promise<Registered> {
  const res = await gw.http.post('/api/v1/factory-services', { role: 'provision', model_id: await model(account), endpoint_url: 'https://factory.example', ...extra }, { token: account.admin });
  expect(res.status, res.text).toBe(201);
  return { id: res.body.id, creds: { accessKeyId: res.body.access_key_id, secretAccessKey: res.body.secret_access_key }, body: res.body };
}

/** A signed request through the shared signer; `send` overrides what goes on the wire (tampering). */
async function signed(creds: Credentials, method: string, target: string, body?: string, o: { at?: Date; send?: { target?: string; body?: string }; drop?: string } = {}): Promise<HttpResponse> {
  const headers: Record<string, string> = signedHeaders(creds, { method, target, host: new URL(gw.httpUrl).host, timestamp: signingTimestamp(o.at ?? clock.now()), body });
  if (o.drop) delete headers[o.drop];
  const sendBody = o.send?.body ?? body;
  return gw.http.request(method, o.send?.target ?? target, undefined, { headers, raw: sendBody });
}

const PATH = '/api/v1/factory-services';

describe('register (POST /api/v1/factory-services)', () => {
  it('201: access key id and secret shown once; the secret is stored sealed, never in clear', async () => {
    const r = await register(a, { registrar_id: (await approvedRegistrar(gw, a, await platformToken(gw))).id });
    expect(r.body).toMatchObject({ account_id: a.id, role: 'provision', state: 'ACTIVE', rotation_pending: false, endpoint_url: 'https://factory.example', last_health_check_at: null });
    expect(r.creds.accessKeyId).toMatch(/^AKSV[0-9A-F]{16}$/);
    expect(r.creds.secretAccessKey.length).toBeGreaterThanOrEqual(40);
    const read = await gw.http.get(`${PATH}/${r.id}`, { token: a.viewer });
    expect(read.status).toBe(200);
    expect(read.body).not.toHaveProperty('secret_access_key');
    const [row] = await gw.db.sql<{ secret_sealed: Buffer }[]>`select secret_sealed from factory_services where id = ${r.id}`;
    expect(row.secret_sealed.includes(Buffer.from(r.creds.secretAccessKey))).toBe(false);
    // key prefix (5) | nonce (12) | tag (16) | ciphertext: sealed with the gateway's sealing key
    expect(row.secret_sealed.length).toBe(33 + Buffer.byteLength(r.creds.secretAccessKey));
  });

  it('400 for bad input: unknown field, bad role, bad URL, a model of another account', async () => {
    const m = await model(a);
    const cases: [Record<string, unknown>, RegExp][] = [
      [{ role: 'provision', model_id: m, endpoint_url: 'https://x.example', colour: 'red' }, /unknown field\(s\) colour/],
      [{ role: 'flash', model_id: m, endpoint_url: 'https://x.example' }, /body\.role/],
      [{ role: 'identify', model_id: m, endpoint_url: 'ftp://x.example' }, /body\.endpoint_url/],
      [{ role: 'identify', model_id: m, endpoint_url: `https://x.example/${'a'.repeat(3000)}` }, /body\.endpoint_url/],
      [{ role: 'identify', model_id: m, endpoint_url: 'https://user:pw@x.example' }, /without credentials/],
      [{ role: 'identify', model_id: await model(b), endpoint_url: 'https://x.example' }, /names no model of your account/],
    ];
    for (const [body, detail] of cases) expect(expectProblem(await gw.http.post(PATH, body, { token: a.admin }), 400).detail).toMatch(detail);
  });

  it('409 when the model already has an active service of that role; another role is fine', async () => {
    const m = await model(a);
    expect((await gw.http.post(PATH, { role: 'provision', model_id: m, endpoint_url: 'https://f.example' }, { token: a.admin })).status).toBe(201);
    expect(expectProblem(await gw.http.post(PATH, { role: 'provision', model_id: m, endpoint_url: 'https://g.example' }, { token: a.admin }), 409).detail).toMatch(/already has an active provision factory service/);
    expect((await gw.http.post(PATH, { role: 'identify', model_id: m, endpoint_url: 'https://f.example' }, { token: a.admin })).status).toBe(201);
  });

  it('401 without credentials; 403 for operators, viewers and factory services (registering needs a human admin)', async () => {
    const r = await register(a);
    const body = { role: 'identify', model_id: r.body.model_id, endpoint_url: 'https://x.example' };
    expectProblem(await gw.http.post(PATH, body), 401);
    expect(expectProblem(await gw.http.post(PATH, body, { token: a.operator }), 403).detail).toMatch(/insufficient role/);
    expect(expectProblem(await gw.http.post(PATH, body, { token: a.viewer }), 403).detail).toMatch(/factory:FactoryService:Create/);
    expect(expectProblem(await signed(r.creds, 'POST', PATH, JSON.stringify(body)), 403).detail).toMatch(/policy does not allow factory:FactoryService:Create/);
  });
});

describe('list and read', () => {
  it('GET list: keyset pages and the filters role, state, registrar, model; only the caller account', async () => {
    const registrar = (await approvedRegistrar(gw, a, await platformToken(gw))).id;
    const one = await register(a, { registrar_id: registrar });
    const two = await register(a, { role: 'identify', registrar_id: registrar });
    const all: string[] = [];
    let cursor: string | null = null;
    do {
      const page: HttpResponse = await gw.http.get(`${PATH}?limit=2${cursor ? `&after=${cursor}` : ''}`, { token: a.viewer });
      expect(page.status).toBe(200);
      expect(page.body.items.length).toBeLessThanOrEqual(2);
      all.push(...page.body.items.map((i: { id: string }) => i.id));
      cursor = page.body.next_cursor;
    } while (cursor);
    expect(all).toEqual(expect.arrayContaining([one.id, two.id]));
    expect(new Set(all).size).toBe(all.length);

    const ids = async (q: string) => (await gw.http.get(`${PATH}?${q}`, { token: a.operator })).body.items.map((i: { id: string }) => i.id);
    expect(await ids(`registrar=${registrar}`)).toEqual([one.id, two.id].sort());
    expect(await ids(`registrar=${registrar}&role=identify`)).toEqual([two.id]);
    expect(await ids(`model=${one.body.model_id}`)).toEqual([one.id]);
    expect(await ids(`registrar=${registrar}&state=SOFT_DELETED`)).toEqual([]);
    expect(await ids('state=ACTIVE')).toEqual(expect.arrayContaining([one.id, two.id]));
    expect((await gw.http.get(PATH, { token: b.admin })).body.items.map((i: { id: string }) => i.id)).not.toContain(one.id);
    expectProblem(await gw.http.get(`${PATH}?role=flash`, { token: a.viewer }), 400);

    // signed: the factory service lists its account's services
    const res = await signed(one.creds, 'GET', `${PATH}?registrar=${registrar}&role=provision`);
    expect(res.status, res.text).toBe(200);
    expect(res.body.items.map((i: { id: string }) => i.id)).toEqual([one.id]);
  });

  it('GET one: 200 bearer and signed; 404 unknown and another account\'s', async () => {
    const r = await register(a);
    expect((await gw.http.get(`${PATH}/${r.id}`, { token: a.viewer })).body).toMatchObject({ id: r.id, access_key_id: r.creds.accessKeyId });
    const viaSignature = await signed(r.creds, 'GET', `${PATH}/${r.id}`);
    expect(viaSignature.status, viaSignature.text).toBe(200);
    expect(viaSignature.body.id).toBe(r.id);
    expectProblem(await gw.http.get(`${PATH}/${crypto.randomUUID()}`, { token: a.viewer }), 404);
    expectProblem(await gw.http.get(`${PATH}/${r.id}`, { token: b.admin }), 404);
  });
});

describe('PATCH', () => {
  it('200 changes only endpoint_url; any other field 400; 404 unknown and cross-account; factory services 403', async () => {
    const r = await register(a);
    const res = await gw.http.patch(`${PATH}/${r.id}`, { endpoint_url: 'https://moved.example/base' }, { token: a.admin });
    expect(res.status, res.text).toBe(200);
    expect(res.body.endpoint_url).toBe('https://moved.example/base');
    expect(expectProblem(await gw.http.patch(`${PATH}/${r.id}`, { endpoint_url: 'https://x.example', role: 'identify' }, { token: a.admin }), 400).detail).toMatch(/unknown field\(s\) role/);
    expect(expectProblem(await gw.http.patch(`${PATH}/${r.id}`, { rotation_pending: true }, { token: a.admin }), 400).detail).toMatch(/rotation_pending/);
    expectProblem(await gw.http.patch(`${PATH}/${r.id}`, {}, { token: a.admin }), 400);
    expectProblem(await gw.http.patch(`${PATH}/${crypto.randomUUID()}`, { endpoint_url: 'https://x.example' }, { token: a.admin }), 404);
    expectProblem(await gw.http.patch(`${PATH}/${r.id}`, { endpoint_url: 'https://x.example' }, { token: b.admin }), 404);
    expectProblem(await signed(r.creds, 'PATCH', `${PATH}/${r.id}`, JSON.stringify({ endpoint_url: 'https://x.example' })), 403);
    expect((await gw.http.get(`${PATH}/${r.id}`, { token: a.viewer })).body.endpoint_url).toBe('https://moved.example/base');
  });
});

describe('credential rotation', () => {
  it('rotate: new secret once, rotation_pending; both secrets sign until confirm; then the old one is refused', async () => {
    const r = await register(a);
    const rot = await gw.http.post(`${PATH}/${r.id}/rotate-credentials`, undefined, { token: a.admin });
    expect(rot.status, rot.text).toBe(200);
    expect(rot.body).toMatchObject({ id: r.id, rotation_pending: true, access_key_id: r.creds.accessKeyId });
    const fresh: Credentials = { accessKeyId: r.creds.accessKeyId, secretAccessKey: rot.body.secret_access_key };
    expect(fresh.secretAccessKey).not.toBe(r.creds.secretAccessKey);
    expect((await signed(r.creds, 'GET', `${PATH}/${r.id}`)).status).toBe(200);
    expect((await signed(fresh, 'GET', `${PATH}/${r.id}`)).status).toBe(200);

    const confirmed = await gw.http.post(`${PATH}/${r.id}/confirm-rotation`, undefined, { token: a.admin });
    expect(confirmed.status, confirmed.text).toBe(200);
    expect(confirmed.body.rotation_pending).toBe(false);
    // identical requests signed within the same second are the same signature: a replay
    clock.advance(1000);
    expect(expectProblem(await signed(r.creds, 'GET', `${PATH}/${r.id}`), 401).detail).toMatch(/signature does not match/);
    expect((await signed(fresh, 'GET', `${PATH}/${r.id}`)).status).toBe(200);

    expect(expectProblem(await gw.http.post(`${PATH}/${r.id}/confirm-rotation`, undefined, { token: a.admin }), 409).detail).toMatch(/no rotation pending/);
  });

  it('a factory service rotates and confirms its own credentials by signed requests, not another service\'s', async () => {
    const r = await register(a);
    const other = await register(a);
    const rot = await signed(r.creds, 'POST', `${PATH}/${r.id}/rotate-credentials`);
    expect(rot.status, rot.text).toBe(200);
    const fresh: Credentials = { accessKeyId: r.creds.accessKeyId, secretAccessKey: rot.body.secret_access_key };
    expect((await signed(fresh, 'POST', `${PATH}/${r.id}/confirm-rotation`)).body.rotation_pending).toBe(false);
    expect(expectProblem(await signed(fresh, 'POST', `${PATH}/${other.id}/rotate-credentials`), 403).detail).toMatch(/only its own credentials/);
    expect(expectProblem(await signed(fresh, 'POST', `${PATH}/${other.id}/confirm-rotation`), 403).detail).toMatch(/only its own credentials/);
  });

  it('404 for unknown ids and other accounts; viewers may not rotate', async () => {
    const r = await register(a);
    for (const verb of ['rotate-credentials', 'confirm-rotation']) {
      expectProblem(await gw.http.post(`${PATH}/${crypto.randomUUID()}/${verb}`, undefined, { token: a.admin }), 404);
      expectProblem(await gw.http.post(`${PATH}/${r.id}/${verb}`, undefined, { token: b.admin }), 404);
      expectProblem(await gw.http.post(`${PATH}/${r.id}/${verb}`, undefined, { token: a.viewer }), 403);
    }
  });
});

describe('health check (private targets refused by default)', () => {
  it('400 for http://127.0.0.1 and for a name resolving to loopback; nothing recorded; 404 unknown and cross-account', async () => {
    const r = await register(a, { endpoint_url: 'http://127.0.0.1:9' });
    expect(expectProblem(await gw.http.post(`${PATH}/${r.id}/health-check`, undefined, { token: a.operator }), 400).detail).toMatch(/refused target: 127\.0\.0\.1 is a loopback address/);
    await gw.http.patch(`${PATH}/${r.id}`, { endpoint_url: 'http://localhost:9' }, { token: a.admin });
    const byName = expectProblem(await gw.http.post(`${PATH}/${r.id}/health-check`, undefined, { token: a.operator }), 400).detail;
    // a name is refused without the address it resolved to (nor its kind): no mapping internal DNS names
    expect(byName).toMatch(/http:\/\/localhost:9 is a refused target: the host name resolves to an address that is not public/);
    expect(byName).not.toMatch(/127\.0\.0\.1|::1|loopback address/);
    await gw.http.patch(`${PATH}/${r.id}`, { endpoint_url: 'http://169.254.169.254' }, { token: a.admin });
    expect(expectProblem(await signed(r.creds, 'POST', `${PATH}/${r.id}/health-check`), 400).detail).toMatch(/link-local/);
    await gw.http.patch(`${PATH}/${r.id}`, { endpoint_url: 'http://[::ffff:10.1.2.3]' }, { token: a.admin });
    expect(expectProblem(await gw.http.post(`${PATH}/${r.id}/health-check`, undefined, { token: a.admin }), 400).detail).toMatch(/private/);
    expect((await gw.http.get(`${PATH}/${r.id}`, { token: a.viewer })).body.last_health_check_at).toBeNull();
    expectProblem(await gw.http.post(`${PATH}/${crypto.randomUUID()}/health-check`, undefined, { token: a.admin }), 404);
    expectProblem(await gw.http.post(`${PATH}/${r.id}/health-check`, undefined, { token: b.admin }), 404);
    expectProblem(await gw.http.post(`${PATH}/${r.id}/health-check`, undefined, { token: a.viewer }), 403);
  });

  it('400 "refused target" for every IPv6 spelling of a refused IPv4 address (NAT64, IPv4-compatible, IPv4-mapped, 6to4, Teredo); nothing probed', async () => {
    // a listener on the loopback port the spellings point at: a probe that got through would reach it
    let reached = 0;
    const trap = http.createServer((_req, res) => {
      reached++;
      res.end();
    });
    await new Promise<void>((resolve) => trap.listen(0, '127.0.0.1', resolve));
    const port = (trap.address() as AddressInfo).port;
    try {
      const r = await register(a, { endpoint_url: `http://127.0.0.1:${port}` });
      for (const literal of ['[64:ff9b::7f00:1]', '[64:ff9b::127.0.0.1]', '[::127.0.0.1]', '[::ffff:127.0.0.1]', '[::ffff:0:127.0.0.1]', '[2002:7f00:1::]', '[64:ff9b::a9fe:a9fe]', '[2002:a00:1::]', '[2001:0:4136:e378:8000:63bf:3fff:fdd2]', '[64:ff9b:1::a00:1]']) {
        expect((await gw.http.patch(`${PATH}/${r.id}`, { endpoint_url: `http://${literal}:${port}` }, { token: a.admin })).status).toBe(200);
        const p = expectProblem(await gw.http.post(`${PATH}/${r.id}/health-check`, undefined, { token: a.operator }), 400);
        expect(p.detail, literal).toMatch(/is a refused target: .* is a (loopback|link-local|private or reserved) address/);
        expect(p.type).toMatch(/\/target-refused$/);
      }
      expect(reached).toBe(0);
      expect((await gw.http.get(`${PATH}/${r.id}`, { token: a.viewer })).body.last_health_check_at).toBeNull();
    } finally {
      await new Promise((resolve) => trap.close(resolve));
    }
  });
});

describe('delete, drain, garbage collection', () => {
  it('DELETE 204 soft-deletes: state SOFT_DELETED, its key stops signing, the (model, role) is free again; 404 unknown and cross-account', async () => {
    const r = await register(a);
    expectProblem(await gw.http.delete(`${PATH}/${r.id}`, { token: b.admin }), 404);
    expectProblem(await gw.http.delete(`${PATH}/${crypto.randomUUID()}`, { token: a.admin }), 404);
    expectProblem(await signed(r.creds, 'DELETE', `${PATH}/${r.id}`), 403);
    expect((await gw.http.delete(`${PATH}/${r.id}`, { token: a.admin })).status).toBe(204);
    expect((await gw.http.get(`${PATH}/${r.id}`, { token: a.viewer })).body).toMatchObject({ state: 'SOFT_DELETED', deleted_at: clock.now().toISOString() });
    expect(expectProblem(await signed(r.creds, 'GET', `${PATH}/${r.id}`), 401).detail).toMatch(/unknown access key id/);
    expect(expectProblem(await gw.http.delete(`${PATH}/${r.id}`, { token: a.admin }), 409).detail).toMatch(/SOFT_DELETED/);
    expect(expectProblem(await gw.http.patch(`${PATH}/${r.id}`, { endpoint_url: 'https://x.example' }, { token: a.admin }), 409).detail).toMatch(/SOFT_DELETED/);
    const again = await gw.http.post(PATH, { role: 'provision', model_id: r.body.model_id, endpoint_url: 'https://new.example' }, { token: a.admin });
    expect(again.status, again.text).toBe(201);
    const { body } = await gw.http.get(`${PATH}?model=${r.body.model_id}&state=SOFT_DELETED`, { token: a.viewer });
    expect(body.items.map((i: { id: string }) => i.id)).toEqual([r.id]);
  });

  it('expedite-drain: 409 while active, 409 while a saga leg references it, then 204, 404 after; the row is collected', async () => {
    const r = await register(a);
    expect(expectProblem(await gw.http.post(`${PATH}/${r.id}/expedite-drain`, undefined, { token: a.admin }), 409).detail).toMatch(/only a soft-deleted/);
    await gw.http.delete(`${PATH}/${r.id}`, { token: a.admin });
    // the PROVISION saga records the legs in flight that call a factory service
    await gw.db.sql`insert into factory_service_leg_refs (factory_service_id, leg_id) values (${r.id}, 'leg-1')`;
    expect(expectProblem(await gw.http.post(`${PATH}/${r.id}/expedite-drain`, undefined, { token: a.admin }), 409).detail).toMatch(/1 active saga leg/);
    await gw.db.sql`delete from factory_service_leg_refs where factory_service_id = ${r.id}`;
    expectProblem(await gw.http.post(`${PATH}/${r.id}/expedite-drain`, undefined, { token: b.admin }), 404);
    expectProblem(await gw.http.post(`${PATH}/${r.id}/expedite-drain`, undefined, { token: a.operator }), 403);
    expect((await gw.http.post(`${PATH}/${r.id}/expedite-drain`, undefined, { token: a.admin })).status).toBe(204);
    expectProblem(await gw.http.get(`${PATH}/${r.id}`, { token: a.admin }), 404);
    expectProblem(await gw.http.post(`${PATH}/${r.id}/expedite-drain`, undefined, { token: a.admin }), 404);
    // garbage collection runs as a job; the sweep collects whatever a job missed
    await gw.testHooks.factory.sweep();
    expect(await gw.db.sql`select 1 from factory_services where id = ${r.id}`).toHaveLength(0);
    expect(await gw.db.sql`select 1 from actors where type = 'factoryService' and id = ${r.id}`).toHaveLength(0);
  });
});

describe('signed-request refusals: each a 401 problem with its own detail', () => {
  let r: Registered;
  let target: string;
  beforeAll(async () => {
    r = await register(a);
    target = `${PATH}/${r.id}/rotate-credentials`;
  });

  const refusal = async (res: Promise<HttpResponse>, detail: RegExp) => {
    const p = expectProblem(await res, 401);
    expect(p.detail).toMatch(detail);
    return p;
  };

  it('missing header, malformed timestamp, unknown key', async () => {
    for (const h of ['X-SVC-Signature', 'X-SVC-Timestamp', 'X-SVC-Access-Key-Id']) {
      await refusal(signed(r.creds, 'GET', `${PATH}/${r.id}`, undefined, { drop: h }), new RegExp(`lacks the ${h} header`));
    }
    const headers = { ...signedHeaders(r.creds, { method: 'GET', target: PATH, host: new URL(gw.httpUrl).host, timestamp: signingTimestamp(clock.now()) }), 'X-SVC-Timestamp': clock.now().toISOString() };
    await refusal(gw.http.get(PATH, { headers }), /not RFC 3339 UTC to the second/);
    await refusal(signed({ accessKeyId: 'AKSV0000000000000000', secretAccessKey: r.creds.secretAccessKey }, 'GET', PATH), /unknown access key id "AKSV0000000000000000"/);
  });

  it('wrong secret, tampered body, path and query: signature does not match', async () => {
    const mismatch = /signature does not match/;
    await refusal(signed({ ...r.creds, secretAccessKey: `${r.creds.secretAccessKey}x` }, 'GET', PATH), mismatch);
    const other = await register(a);
    await refusal(signed(r.creds, 'GET', `${PATH}/${r.id}`, undefined, { send: { target: `${PATH}/${other.id}` } }), mismatch);
    await refusal(signed(r.creds, 'GET', `${PATH}?role=provision`, undefined, { send: { target: `${PATH}?role=identify` } }), mismatch);
    await refusal(signed(r.creds, 'PATCH', `${PATH}/${r.id}`, '{"endpoint_url":"https://a.example"}', { send: { body: '{"endpoint_url":"https://b.example"}' } }), mismatch);
    // a body the signature does not cover at all
    await refusal(signed(r.creds, 'POST', target, undefined, { send: { body: '{}' } }), mismatch);
    // nothing was rotated by any of these
    expect((await gw.http.get(`${PATH}/${r.id}`, { token: a.viewer })).body.rotation_pending).toBe(false);
  });

  it('clock skew: more than 5 minutes either way is refused, within is accepted', async () => {
    const at = (ms: number) => new Date(clock.now().getTime() + ms);
    await refusal(signed(r.creds, 'GET', `${PATH}/${r.id}`, undefined, { at: at(-6 * 60_000) }), /more than 5 minutes from the gateway's time/);
    await refusal(signed(r.creds, 'GET', `${PATH}/${r.id}`, undefined, { at: at(6 * 60_000) }), /more than 5 minutes/);
    expect((await signed(r.creds, 'GET', `${PATH}/${r.id}`, undefined, { at: at(-4 * 60_000) })).status).toBe(200);
    // the gateway's clock moves, not the request: a request signed now is stale 6 minutes later
    const headers = signedHeaders(r.creds, { method: 'GET', target: `${PATH}/${r.id}`, host: new URL(gw.httpUrl).host, timestamp: signingTimestamp(clock.now()) });
    clock.advance(6 * 60_000);
    try {
      await refusal(gw.http.get(`${PATH}/${r.id}`, { headers }), /more than 5 minutes/);
    } finally {
      clock.advance(-6 * 60_000);
    }
  });

  it('replay: the same signed request twice is refused the second time; a new signature is accepted', async () => {
    const headers = signedHeaders(r.creds, { method: 'GET', target: `${PATH}/${r.id}`, host: new URL(gw.httpUrl).host, timestamp: signingTimestamp(clock.now()) });
    expect((await gw.http.get(`${PATH}/${r.id}`, { headers })).status).toBe(200);
    await refusal(gw.http.get(`${PATH}/${r.id}`, { headers }), /replayed request/);
    clock.advance(1000);
    expect((await signed(r.creds, 'GET', `${PATH}/${r.id}`)).status).toBe(200);
  });

  it('replay: of the same signed request sent concurrently, exactly one is accepted', async () => {
    clock.advance(1000);
    const headers = signedHeaders(r.creds, { method: 'GET', target: `${PATH}/${r.id}`, host: new URL(gw.httpUrl).host, timestamp: signingTimestamp(clock.now()) });
    const statuses = (await Promise.all(Array.from({ length: 8 }, () => gw.http.get(`${PATH}/${r.id}`, { headers })))).map((res) => res.status);
    expect(statuses.filter((s) => s === 200)).toHaveLength(1);
    expect(statuses.filter((s) => s === 401)).toHaveLength(7);
  });

  it('the distinct refusals carry distinct problem types', async () => {
    const types = new Set<string>();
    const add = async (res: Promise<HttpResponse>) => types.add((await res).body.type);
    await add(signed(r.creds, 'GET', PATH, undefined, { drop: 'X-SVC-Signature' }));
    await add(signed({ ...r.creds, accessKeyId: 'AKSV0000000000000001' }, 'GET', PATH));
    await add(signed({ ...r.creds, secretAccessKey: 'wrong' }, 'GET', PATH));
    await add(signed(r.creds, 'GET', PATH, undefined, { at: new Date(clock.now().getTime() - 3_600_000) }));
    const headers = signedHeaders(r.creds, { method: 'GET', target: PATH, host: new URL(gw.httpUrl).host, timestamp: signingTimestamp(new Date(clock.now().getTime() + 2000)) });
    await gw.http.get(PATH, { headers });
    await add(gw.http.get(PATH, { headers }));
    expect(types.size).toBe(5);
  });

  it('remembered signatures are swept once past the skew window', async () => {
    expect((await signed(r.creds, 'GET', PATH, undefined, { at: new Date(clock.now().getTime() + 3000) })).status).toBe(200);
    const count = async () => (await gw.db.sql<{ n: number }[]>`select count(*)::int as n from factory_signature_replays`)[0].n;
    expect(await count()).toBeGreaterThan(0);
    clock.advance(11 * 60_000);
    await gw.testHooks.factory.sweep();
    expect(await count()).toBe(0);
  });
});

describe('two nodes on one database (behind one load-balanced host name)', () => {
  let node2: TestGateway;
  beforeAll(async () => {
    node2 = await startTestGateway({ NODE_ID: 'factory-node-2', JOBS: 'false' }, { db: gw.db, clock });
  });
  afterAll(async () => {
    await node2?.close();
  });

  /** GET with the signed headers and the Host header a load balancer would pass on. */
  function getVia(node: TestGateway, target: string, headers: Record<string, string>): Promise<number> {
    return new Promise((resolve, reject) => {
      const req = http.get(`${node.httpUrl}${target}`, { headers: { ...headers, host: 'factory-gateway.example' } }, (res) => {
        res.resume();
        resolve(res.statusCode ?? 0);
      });
      req.on('error', reject);
    });
  }
  const sign = (creds: Credentials, target: string) =>
    signedHeaders(creds, { method: 'GET', target, host: 'factory-gateway.example', timestamp: signingTimestamp(clock.now()) });

  it('a signature accepted by one node is a replay on the other', async () => {
    const r = await register(a);
    const headers = sign(r.creds, `${PATH}/${r.id}`);
    expect(await getVia(gw, `${PATH}/${r.id}`, headers)).toBe(200);
    expect(await getVia(node2, `${PATH}/${r.id}`, headers)).toBe(401);
  });

  it('a rotation confirmed or a delete on one node takes the old secret from the other node\'s cache', async () => {
    const r = await register(a);
    // node 2 caches the signing identity
    clock.advance(1000);
    expect(await getVia(node2, `${PATH}/${r.id}`, sign(r.creds, `${PATH}/${r.id}`))).toBe(200);
    const rot = await gw.http.post(`${PATH}/${r.id}/rotate-credentials`, undefined, { token: a.admin });
    await gw.http.post(`${PATH}/${r.id}/confirm-rotation`, undefined, { token: a.admin });
    const fresh: Credentials = { ...r.creds, secretAccessKey: rot.body.secret_access_key };
    await waitFor(async () => {
      clock.advance(1000);
      return (await getVia(node2, `${PATH}/${r.id}`, sign(r.creds, `${PATH}/${r.id}`))) === 401;
    }, 10_000, 'node 2 to refuse the retired secret');
    clock.advance(1000);
    expect(await getVia(node2, `${PATH}/${r.id}`, sign(fresh, `${PATH}/${r.id}`))).toBe(200);
    await gw.http.delete(`${PATH}/${r.id}`, { token: a.admin });
    await waitFor(async () => {
      clock.advance(1000);
      return (await getVia(node2, `${PATH}/${r.id}`, sign(fresh, `${PATH}/${r.id}`))) === 401;
    }, 10_000, 'node 2 to refuse the deleted service');
  });
});

describe('with ALLOW_PRIVATE_TARGETS and a low authentication-failure limit', () => {
  let gw2: TestGateway;
  let c: TestAccount;
  let backend: http.Server;
  let base: string;
  beforeAll(async () => {
    gw2 = await startTestGateway({ ALLOW_PRIVATE_TARGETS: 'true', AUTH_FAILURE_LIMIT: '3', AUTH_FAILURE_WINDOW_SECONDS: '600' });
    c = await createAccount(gw2);
    backend = http.createServer((req, res) => {
      res.statusCode = req.url === '/ok/healthz' ? 200 : 503;
      res.end();
    });
    await new Promise<void>((resolve) => backend.listen(0, '127.0.0.1', resolve));
    base = `http://127.0.0.1:${(backend.address() as AddressInfo).port}`;
  });
  afterAll(async () => {
    await gw2?.close();
    await new Promise((resolve) => backend?.close(resolve));
  });

  async function register2(endpoint: string) {
    const m = await gw2.http.post('/api/v1/models', { vid: 'FFF4', pid: (pid++).toString(16).toUpperCase(), name: 'm', provisioning_method: 'none' }, { token: c.admin });
    const res = await gw2.http.post(PATH, { role: 'identify', model_id: m.body.id, endpoint_url: endpoint }, { token: c.admin });
    expect(res.status, res.text).toBe(201);
    return res.body;
  }

  it('health-check probes endpoint_url + /healthz of a real server and records last_health_check_*', async () => {
    const healthy = await register2(`${base}/ok`);
    const res = await gw2.http.post(`${PATH}/${healthy.id}/health-check`, undefined, { token: c.operator });
    expect(res.status, res.text).toBe(200);
    expect(res.body).toMatchObject({ last_health_check_status: 'HEALTHY', last_health_check_http_status: 200, last_health_check_error: null });
    expect(res.body.last_health_check_at).toEqual(expect.any(String));

    const sick = await register2(`${base}/sick/`);
    const bad = await gw2.http.post(`${PATH}/${sick.id}/health-check`, undefined, { token: c.admin });
    expect(bad.body).toMatchObject({ last_health_check_status: 'UNHEALTHY', last_health_check_http_status: 503, last_health_check_error: 'GET /healthz answered 503' });

    // a signed health check by the service itself, with the shared signer's fetch helper
    const viaSigner = await signedFetch(`${gw2.httpUrl}${PATH}/${healthy.id}/health-check`, { accessKeyId: healthy.access_key_id, secretAccessKey: healthy.secret_access_key }, { method: 'POST' });
    expect(viaSigner.status).toBe(200);
    expect(((await viaSigner.json()) as { last_health_check_status: string }).last_health_check_status).toBe('HEALTHY');

    const down = await register2('http://127.0.0.1:9');
    expect((await gw2.http.post(`${PATH}/${down.id}/health-check`, undefined, { token: c.admin })).body).toMatchObject({ last_health_check_status: 'UNHEALTHY', last_health_check_http_status: null, last_health_check_error: expect.stringMatching(/ECONNREFUSED/) });
    // by name: the error names the host, never the address it resolved to
    const downByName = await register2('http://localhost:9');
    const error = (await gw2.http.post(`${PATH}/${downByName.id}/health-check`, undefined, { token: c.admin })).body.last_health_check_error as string;
    expect(error).toMatch(/ECONNREFUSED.*localhost:9/);
    expect(error).not.toMatch(/127\.0\.0\.1|::1/);
  });

  it('signature failures count toward the authentication-failure limit of the access key', async () => {
    const s = await register2(`${base}/ok`);
    const creds = { accessKeyId: s.access_key_id, secretAccessKey: s.secret_access_key };
    const url = `${gw2.httpUrl}${PATH}/${s.id}`;
    for (let i = 0; i < 3; i++) expect((await signedFetch(url, { ...creds, secretAccessKey: 'guess' })).status).toBe(401);
    const blocked = await signedFetch(url, creds);
    expect(blocked.status).toBe(429);
    expect(blocked.headers.get('retry-after')).toMatch(/^\d+$/);
  });
});
