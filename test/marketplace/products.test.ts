import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createAccount, type TestAccount } from '../helpers/accounts.js';
import { expectProblem, startTestGateway, type TestGateway } from '../helpers/gateway.js';
import { createModel, createProduct, PRODUCTS, publish, software, unpublish } from './helpers.js';

const CAP = 'publish_marketplace';
let gw: TestGateway;
/** holds publish_marketplace */
let seller: TestAccount;
/** another publisher */
let rival: TestAccount;
/** no capability: reads only */
let buyer: TestAccount;
let platform: string;

beforeAll(async () => {
  gw = await startTestGateway({ MARKETPLACE_MAX_PRODUCTS: '6' });
  seller = await createAccount(gw, { capabilities: [CAP] });
  rival = await createAccount(gw, { capabilities: [CAP] });
  buyer = await createAccount(gw);
  platform = await gw.token({ realm: 'platform', sub: 'platform-root', roles: ['platform-admin'] });
});
afterAll(async () => gw?.close());

/** The actor and its row agree: the row's lifecycle and content columns are the projection of the snapshot. */
async function actorAndRow(id: string) {
  const [actor] = await gw.db.sql<{ state: string; snapshot: any; version: number }[]>`select state, snapshot, version from actors where type = 'marketplaceProduct' and id = ${id}`;
  const [row] = await gw.db.sql<any[]>`select * from marketplace_products where id = ${id}`;
  const c = actor.snapshot.context;
  expect(row).toMatchObject({
    state: actor.state, name: c.name, description: c.description, version: c.version, bundles: c.bundles, published_version: c.publishedVersion,
    published_at: c.publishedAt ? new Date(c.publishedAt) : null, unpublished_at: c.unpublishedAt ? new Date(c.unpublishedAt) : null,
  });
  return { actor, row };
}

const events = (id: string) => gw.db.sql<{ type: string; payload: any }[]>`select type, payload from domain_events where actor_id = ${id} order by seq`;

describe('product lifecycle over HTTP', () => {
  it('create (DRAFT) -> publish -> live update -> unpublish -> republish, seen by others only while PUBLISHED', async () => {
    const model = await createModel(gw, seller);
    const created = await createProduct(gw, seller, model.id, { description: 'Keeps rooms warm', version: '1.2.0' });
    expect(created).toMatchObject({
      account_id: seller.id, model_id: model.id, descriptor: model.descriptor, name: 'Smart thermostat', description: 'Keeps rooms warm',
      version: '1.2.0', state: 'DRAFT', published_version: null, published_at: null,
      bundles: [software('firmware', '2.0.0')],
    });
    await actorAndRow(created.id);
    const url = `${PRODUCTS}/${created.id}`;

    // a draft: the owner (even a viewer) reads it, other accounts get 404, the catalogue lacks it
    expect((await gw.http.get(url, { token: seller.viewer })).body.state).toBe('DRAFT');
    expectProblem(await gw.http.get(url, { token: buyer.viewer }), 404);
    expect((await gw.http.get(`${PRODUCTS}?model_id=${model.id}`, { token: buyer.viewer })).body.items).toEqual([]);

    const published = await publish(gw, seller.admin, created.id);
    expect(published.status, published.text).toBe(200);
    expect(published.body).toMatchObject({ state: 'PUBLISHED', version: '1.2.0', published_version: '1.2.0', published_at: expect.any(String) });
    for (const token of [buyer.viewer, rival.operator, platform]) {
      expect((await gw.http.get(url, { token })).body).toEqual(published.body);
    }
    expect((await gw.http.get(`${PRODUCTS}?model_id=${model.id}`, { token: buyer.viewer })).body.items).toEqual([published.body]);

    // a live change is a release: the next patch by default
    const live = await gw.http.patch(url, { description: 'Keeps rooms warmer' }, { token: seller.operator });
    expect(live.status, live.text).toBe(200);
    expect(live.body).toMatchObject({ state: 'PUBLISHED', description: 'Keeps rooms warmer', version: '1.2.1', published_version: '1.2.1' });
    expect((await gw.http.get(url, { token: buyer.viewer })).body.version).toBe('1.2.1');
    // not a greater version: 409, nothing changed
    const stale = expectProblem(await gw.http.patch(url, { name: 'Renamed', version: '1.2.1' }, { token: seller.operator }), 409);
    expect(stale.detail).toMatch(/only increases: 1\.2\.1 is not greater than 1\.2\.1/);
    expect((await gw.http.get(url, { token: seller.viewer })).body.name).toBe('Smart thermostat');

    const hidden = await unpublish(gw, seller.operator, created.id);
    expect(hidden.body).toMatchObject({ state: 'UNPUBLISHED', published_version: '1.2.1', unpublished_at: expect.any(String) });
    expectProblem(await gw.http.get(url, { token: buyer.viewer }), 404);
    expectProblem(await unpublish(gw, seller.operator, created.id), 409);

    // changed while unpublished: republishing needs a greater version
    expect((await gw.http.patch(url, { bundles: [{ name: 'firmware', version: '2.0.0' }, { name: 'driver', version: '1.1.0' }] }, { token: seller.operator })).status).toBe(200);
    const refused = expectProblem(await publish(gw, seller.operator, created.id), 409);
    expect(refused.detail).toMatch(/changed since version 1\.2\.1 was published: set a greater version/);
    expect(refused.state).toBe('UNPUBLISHED');
    expect((await gw.http.patch(url, { version: '1.3.0' }, { token: seller.operator })).body.state).toBe('UNPUBLISHED');
    const again = await publish(gw, seller.operator, created.id);
    expect(again.body).toMatchObject({ state: 'PUBLISHED', version: '1.3.0', published_version: '1.3.0' });
    expect(again.body.bundles.map((b: any) => `${b.kind}:${b.name}`)).toEqual(['software:firmware', 'driver:driver']);
    expect((await gw.http.get(url, { token: buyer.viewer })).body.version).toBe('1.3.0');

    const { actor } = await actorAndRow(created.id);
    expect(actor.state).toBe('PUBLISHED');
    expect((await events(created.id)).map((e) => `${e.type}@${e.payload.version}`)).toEqual([
      'marketplaceProduct.published@1.2.0', 'marketplaceProduct.revised@1.2.1', 'marketplaceProduct.unpublished@1.2.1', 'marketplaceProduct.published@1.3.0',
    ]);
  });

  it('the own list shows every state; a state filter narrows it', async () => {
    const a = await createAccount(gw, { capabilities: [CAP] });
    const model = await createModel(gw, a);
    const draft = await createProduct(gw, a, model.id, { name: 'draft one' });
    const live = await createProduct(gw, a, model.id, { name: 'live one' });
    await publish(gw, a.operator, live.id);
    const mine = await gw.http.get(`${PRODUCTS}/mine`, { token: a.viewer });
    expect(mine.status).toBe(200);
    expect(mine.body.items.map((p: any) => [p.name, p.state])).toEqual([['live one', 'PUBLISHED'], ['draft one', 'DRAFT']]);
    expect((await gw.http.get(`${PRODUCTS}/mine?state=DRAFT`, { token: a.viewer })).body.items.map((p: any) => p.id)).toEqual([draft.id]);
    // another account's own list does not show them
    expect((await gw.http.get(`${PRODUCTS}/mine`, { token: buyer.viewer })).body.items).toEqual([]);
    // a platform token is bound to no account: the own list is refused, the catalogue is not
    expectProblem(await gw.http.get(`${PRODUCTS}/mine`, { token: platform }), 403);
    expect((await gw.http.get(`${PRODUCTS}?account_id=${a.id}`, { token: platform })).body.items.map((p: any) => p.id)).toEqual([live.id]);
  });

  it('deletes a never-published draft (204, then 404); a product published once is unpublished, not deleted (409)', async () => {
    const model = await createModel(gw, seller);
    const draft = await createProduct(gw, seller, model.id);
    expectProblem(await gw.http.delete(`${PRODUCTS}/${draft.id}`, { token: rival.admin }), 404);
    const deleted = await gw.http.delete(`${PRODUCTS}/${draft.id}`, { token: seller.operator });
    expect(deleted.status).toBe(204);
    expectProblem(await gw.http.get(`${PRODUCTS}/${draft.id}`, { token: seller.viewer }), 404);
    expectProblem(await gw.http.delete(`${PRODUCTS}/${draft.id}`, { token: seller.operator }), 404);
    expectProblem(await publish(gw, seller.operator, draft.id), 404);
    expect(await gw.db.sql`select 1 from marketplace_products where id = ${draft.id}`).toHaveLength(0);
    expect((await gw.db.sql`select state from actors where type = 'marketplaceProduct' and id = ${draft.id}`)[0].state).toBe('DELETED');

    const p = await createProduct(gw, seller, model.id);
    await publish(gw, seller.operator, p.id);
    expect(expectProblem(await gw.http.delete(`${PRODUCTS}/${p.id}`, { token: seller.operator }), 409).detail).toMatch(/never-published draft.*unpublish it instead/);
    await unpublish(gw, seller.operator, p.id);
    expectProblem(await gw.http.delete(`${PRODUCTS}/${p.id}`, { token: seller.operator }), 409);
    expect((await gw.http.get(`${PRODUCTS}/${p.id}`, { token: seller.viewer })).body.state).toBe('UNPUBLISHED');
  });

  it('refuses to publish a product without bundles (409 naming why)', async () => {
    const model = await createModel(gw, seller);
    const empty = await createProduct(gw, seller, model.id, { bundles: [] });
    expect(empty.bundles).toEqual([]);
    expect(expectProblem(await publish(gw, seller.operator, empty.id), 409).detail).toMatch(/at least one software bundle/);
  });

  it('keeps its copy of the bundles when the model replaces its own', async () => {
    const model = await createModel(gw, seller);
    const p = await createProduct(gw, seller, model.id);
    expect((await gw.http.patch(`/api/v1/models/${model.id}`, { bundles: [software('firmware', '3.0.0')] }, { token: seller.operator })).status).toBe(200);
    expect((await publish(gw, seller.operator, p.id)).body.bundles).toEqual([software('firmware', '2.0.0')]);
    // a new selection is checked against the model's bundles of now
    expectProblem(await gw.http.patch(`${PRODUCTS}/${p.id}`, { bundles: [{ name: 'firmware', version: '2.0.0' }] }, { token: seller.operator }), 400);
    expect((await gw.http.patch(`${PRODUCTS}/${p.id}`, { bundles: [{ name: 'firmware', version: '3.0.0' }], version: '2.0.0' }, { token: seller.operator })).body)
      .toMatchObject({ version: '2.0.0', bundles: [software('firmware', '3.0.0')] });
    // the model may even go: the product keeps what it offers; a new bundle selection has nothing to choose from
    expect((await gw.http.delete(`/api/v1/models/${model.id}`, { token: seller.admin })).status).toBe(204);
    expect((await gw.http.get(`${PRODUCTS}/${p.id}`, { token: buyer.viewer })).body).toMatchObject({ state: 'PUBLISHED', descriptor: model.descriptor, bundles: [software('firmware', '3.0.0')] });
    expect((await gw.http.patch(`${PRODUCTS}/${p.id}`, { description: 'still here' }, { token: seller.operator })).body.version).toBe('2.0.1');
    expectProblem(await gw.http.patch(`${PRODUCTS}/${p.id}`, { bundles: [] }, { token: seller.operator }), 404);
  });
});

describe('capability and roles', () => {
  it('without publish_marketplace every write is the capability 403; reads work', async () => {
    const model = await createModel(gw, buyer);
    const other = await createProduct(gw, seller, (await createModel(gw, seller)).id);
    await publish(gw, seller.operator, other.id);
    const writes = [
      () => gw.http.post(PRODUCTS, { model_id: model.id, name: 'x' }, { token: buyer.admin }),
      () => gw.http.patch(`${PRODUCTS}/${other.id}`, { name: 'x' }, { token: buyer.admin }),
      () => publish(gw, buyer.admin, other.id),
      () => unpublish(gw, buyer.admin, other.id),
      () => gw.http.delete(`${PRODUCTS}/${other.id}`, { token: buyer.admin }),
    ];
    for (const write of writes) {
      const p = expectProblem(await write(), 403);
      expect(p.detail).toMatch(/^account not qualified: marketplace:Product:\w+ requires capability publish_marketplace/);
      expect(p.capability).toBe(CAP);
    }
    expect(await gw.db.sql`select 1 from marketplace_products where account_id = ${buyer.id}`).toHaveLength(0);
    expect((await gw.http.get(`${PRODUCTS}/${other.id}`, { token: buyer.admin })).body.state).toBe('PUBLISHED');
    expect((await gw.http.get(PRODUCTS, { token: buyer.viewer })).status).toBe(200);
    expect((await gw.http.get(`${PRODUCTS}/mine`, { token: buyer.viewer })).status).toBe(200);
  });

  it('a revoked capability stops further writes; what the account published stays listed', async () => {
    const a = await createAccount(gw, { capabilities: [CAP] });
    const p = await createProduct(gw, a, (await createModel(gw, a)).id);
    await publish(gw, a.operator, p.id);
    expect((await gw.http.delete(`/platform/v1/accounts/${a.id}/capabilities/${CAP}`, { token: platform })).status).toBe(204);
    expect(expectProblem(await unpublish(gw, a.operator, p.id), 403).detail).toMatch(/not qualified/);
    expect((await gw.http.get(`${PRODUCTS}/${p.id}`, { token: buyer.viewer })).body.state).toBe('PUBLISHED');
    expect((await gw.http.get(`${PRODUCTS}/mine`, { token: a.viewer })).body.items.map((x: any) => x.id)).toEqual([p.id]);
  });

  it('a viewer of a qualified account gets the role 403; reads need a token', async () => {
    const model = await createModel(gw, seller);
    const p = expectProblem(await gw.http.post(PRODUCTS, { model_id: model.id, name: 'x' }, { token: seller.viewer }), 403);
    expect(p.detail).toMatch(/^insufficient role/);
    expectProblem(await gw.http.get(PRODUCTS), 401);
    expectProblem(await gw.http.get(`${PRODUCTS}/mine`), 401);
  });
});

describe('cross-account', () => {
  it("another account's product is 404 to every write, published or not", async () => {
    const p = await createProduct(gw, seller, (await createModel(gw, seller)).id);
    const url = `${PRODUCTS}/${p.id}`;
    for (const state of ['DRAFT', 'PUBLISHED']) {
      if (state === 'PUBLISHED') await publish(gw, seller.operator, p.id);
      expect(expectProblem(await gw.http.patch(url, { name: 'mine now' }, { token: rival.admin }), 404).detail).toMatch(/not found in your account/);
      expectProblem(await publish(gw, rival.admin, p.id), 404);
      expectProblem(await unpublish(gw, rival.admin, p.id), 404);
      expectProblem(await gw.http.delete(url, { token: rival.admin }), 404);
    }
    expect((await gw.http.get(url, { token: seller.viewer })).body).toMatchObject({ name: 'Smart thermostat', state: 'PUBLISHED' });
  });

  it("a model of another account, an imported one or an unknown one is 404; nothing is written", async () => {
    const theirs = await createModel(gw, rival);
    const before = (await gw.db.sql`select count(*)::int as n from marketplace_products`)[0].n;
    expect(expectProblem(await gw.http.post(PRODUCTS, { model_id: theirs.id, name: 'x' }, { token: seller.operator }), 404).detail)
      .toMatch(/not one of your account's models/);
    expectProblem(await gw.http.post(PRODUCTS, { model_id: '00000000-0000-4000-8000-000000000000', name: 'x' }, { token: seller.operator }), 404);
    const share = await gw.http.post(`/api/v1/models/${theirs.id}/share`, {}, { token: rival.operator });
    expect(share.status, share.text).toBe(201);
    expect((await gw.http.post('/api/v1/models/import', { token: share.body.token }, { token: seller.operator })).status).toBe(201);
    expect((await gw.http.get(`/api/v1/models/${theirs.id}`, { token: seller.viewer })).body.imported).toBe(true);
    expectProblem(await gw.http.post(PRODUCTS, { model_id: theirs.id, name: 'x' }, { token: seller.operator }), 404);
    expect((await gw.db.sql`select count(*)::int as n from marketplace_products`)[0].n).toBe(before);
  });
});

describe('bad input: 400 problem+json, nothing written', () => {
  it('refuses malformed bodies, versions, bundles and queries', async () => {
    const seller = await createAccount(gw, { capabilities: [CAP] });
    const model = await createModel(gw, seller, [software('fw', '1.0.0'), software('fw', '1.0.0', 'driver'), software('tool', '0.1.0')]);
    const before = (await gw.db.sql`select count(*)::int as n from marketplace_products`)[0].n;
    const post = (body: unknown) => gw.http.post(PRODUCTS, body, { token: seller.operator });
    const cases: [unknown, RegExp][] = [
      [{ model_id: model.id }, /name/],
      [{ model_id: 'nope', name: 'x' }, /model_id/],
      [{ model_id: model.id, name: 'x', version: '1.0' }, /semantic version/],
      [{ model_id: model.id, name: 'x', version: 'v1.0.0' }, /semantic version/],
      [{ model_id: model.id, name: 'x', extra: 1 }, /extra/],
      [{ model_id: model.id, name: 'a\u0007b' }, /control/],
      [{ model_id: model.id, name: 'x', bundles: [{ name: 'missing', version: '1.0.0' }] }, /missing@1\.0\.0 is not a bundle of the model.*software fw@1\.0\.0/],
      [{ model_id: model.id, name: 'x', bundles: [{ name: 'fw', version: '1.0.0' }] }, /send kind/],
      [{ model_id: model.id, name: 'x', bundles: [{ name: 'tool', version: '0.1.0' }, { name: 'tool', version: '0.1.0' }] }, /listed twice/],
      [{ model_id: model.id, name: 'x', bundles: [{ name: 'tool' }] }, /version/],
      [{ model_id: model.id, name: 'x', bundles: 'tool' }, /bundles/],
    ];
    for (const [body, detail] of cases) expect(expectProblem(await post(body), 400).detail, JSON.stringify(body)).toMatch(detail);
    expect((await gw.db.sql`select count(*)::int as n from marketplace_products`)[0].n).toBe(before);
    // kind disambiguates
    expect((await post({ model_id: model.id, name: 'x', bundles: [{ name: 'fw', version: '1.0.0', kind: 'driver' }] })).body.bundles[0].kind).toBe('driver');

    const p = await createProduct(gw, seller, model.id, { bundles: [] });
    const url = `${PRODUCTS}/${p.id}`;
    expectProblem(await gw.http.patch(url, {}, { token: seller.operator }), 400);
    expectProblem(await gw.http.patch(url, { version: '1.0.0.0' }, { token: seller.operator }), 400);
    expectProblem(await gw.http.patch(url, { state: 'PUBLISHED' }, { token: seller.operator }), 400);
    expectProblem(await gw.http.patch(url, { bundles: [{ name: 'nope', version: '1' }] }, { token: seller.operator }), 400);
    expectProblem(await gw.http.patch(`${PRODUCTS}/not-a-uuid`, { name: 'x' }, { token: seller.operator }), 400);
    expectProblem(await publish(gw, seller.operator, 'not-a-uuid'), 400);
    expect((await gw.http.get(url, { token: seller.viewer })).body).toMatchObject({ version: '1.0.0', bundles: [], name: 'Smart thermostat' });

    for (const q of ['limit=0', 'limit=1000', 'cursor=%%%', 'cursor=abc', 'vid=XYZ', 'state=DRAFT', 'model_id=1', 'q=']) {
      expectProblem(await gw.http.get(`${PRODUCTS}?${q}`, { token: buyer.viewer }), 400);
    }
    expectProblem(await gw.http.get(`${PRODUCTS}/mine?state=DELETED`, { token: seller.viewer }), 400);
    const cursor = (v: unknown) => Buffer.from(JSON.stringify(v)).toString('base64url');
    for (const c of [['x', 'y'], ['-271821-04-20T00:00:00.000Z', p.id], ['2026-13-45T00:00:00.000Z', p.id], [1, 2], 'x']) {
      expectProblem(await gw.http.get(`${PRODUCTS}/mine?cursor=${cursor(c)}`, { token: seller.viewer }), 400);
    }
  });

  it('caps the products of one account (409), counting every state', async () => {
    const a = await createAccount(gw, { capabilities: [CAP] });
    const model = await createModel(gw, a);
    // six at once against a cap of six, then a seventh: exactly six exist
    const results = await Promise.all(Array.from({ length: 7 }, (_, i) => gw.http.post(PRODUCTS, { model_id: model.id, name: `p${i}` }, { token: a.operator })));
    expect(results.map((r) => r.status).sort()).toEqual([201, 201, 201, 201, 201, 201, 409]);
    expect(expectProblem(results.find((r) => r.status === 409)!, 409).detail).toMatch(/at most 6/);
    expect((await gw.db.sql`select count(*)::int as n from marketplace_products where account_id = ${a.id}`)[0].n).toBe(6);
    // deleting a draft makes room
    await gw.http.delete(`${PRODUCTS}/${results.find((r) => r.status === 201)!.body.id}`, { token: a.operator });
    expect((await gw.http.post(PRODUCTS, { model_id: model.id, name: 'again' }, { token: a.operator })).status).toBe(201);
  });
});

describe('catalogue: keyset pages and filters', () => {
  it('pages through every published product once, newest first, with filters', async () => {
    const a = await createAccount(gw, { capabilities: [CAP] });
    const m1 = await createModel(gw, a);
    const m2 = await createModel(gw, a);
    const ids: string[] = [];
    for (let i = 0; i < 5; i++) {
      const p = await createProduct(gw, a, i % 2 ? m2.id : m1.id, { name: `Gadget ${i}`, description: i === 3 ? 'With 100% CAFFEINE_free' : 'plain' });
      await publish(gw, a.operator, p.id);
      ids.push(p.id);
    }
    await createProduct(gw, a, m1.id, { name: 'Gadget draft' }); // not in the catalogue

    const seen: string[] = [];
    let cursor: string | null = null;
    do {
      const res: any = await gw.http.get(`${PRODUCTS}?account_id=${a.id}&limit=2${cursor ? `&cursor=${cursor}` : ''}`, { token: buyer.viewer });
      expect(res.status, res.text).toBe(200);
      expect(res.body.items.length).toBeLessThanOrEqual(2);
      seen.push(...res.body.items.map((p: any) => p.id));
      cursor = res.body.next_cursor;
    } while (cursor);
    expect(seen).toEqual([...ids].reverse());

    const list = async (query: string) => (await gw.http.get(`${PRODUCTS}?account_id=${a.id}&${query}`, { token: buyer.viewer })).body.items.map((p: any) => p.name);
    expect(await list(`model_id=${m2.id}`)).toEqual(['Gadget 3', 'Gadget 1']);
    expect(await list(`vid=fff2&pid=${m1.pid.toLowerCase()}`)).toEqual(['Gadget 4', 'Gadget 2', 'Gadget 0']);
    expect(await list('q=caffeine_')).toEqual(['Gadget 3']); // text, not a LIKE pattern
    expect(await list('q=100%25')).toEqual(['Gadget 3']);
    expect(await list('q=gadget 2')).toEqual(['Gadget 2']);
    expect(await list('q=_')).toEqual(['Gadget 3']);
    const own = await gw.http.get(`${PRODUCTS}/mine?q=draft`, { token: a.viewer });
    expect(own.body.items.map((p: any) => p.name)).toEqual(['Gadget draft']);
  });
});

describe('races', () => {
  it('two (and more) concurrent publishes of one product: one transition, the rest 409', async () => {
    const seller = await createAccount(gw, { capabilities: [CAP] });
    const p = await createProduct(gw, seller, (await createModel(gw, seller)).id);
    const results = await Promise.all(Array.from({ length: 6 }, () => publish(gw, seller.operator, p.id)));
    expect(results.map((r) => r.status).sort()).toEqual([200, 409, 409, 409, 409, 409]);
    for (const r of results.filter((x) => x.status === 409)) expect(expectProblem(r, 409).detail).toMatch(/is PUBLISHED: PUBLISH is not accepted/);
    expect((await events(p.id)).map((e) => e.type)).toEqual(['marketplaceProduct.published']);
    const { actor } = await actorAndRow(p.id);
    expect(actor.version).toBe(2);
  });

  it('concurrent live updates are serialized: each a release of its own patch', async () => {
    const seller = await createAccount(gw, { capabilities: [CAP] });
    const p = await createProduct(gw, seller, (await createModel(gw, seller)).id);
    await publish(gw, seller.operator, p.id);
    const results = await Promise.all(Array.from({ length: 5 }, (_, i) => gw.http.patch(`${PRODUCTS}/${p.id}`, { description: `edit ${i}` }, { token: seller.operator })));
    expect(results.every((r) => r.status === 200)).toBe(true);
    expect(results.map((r) => r.body.version).sort()).toEqual(['1.0.1', '1.0.2', '1.0.3', '1.0.4', '1.0.5']);
    expect((await actorAndRow(p.id)).row.version).toBe('1.0.5');
  });

  it('a delete racing a publish: one wins, the other sees its outcome', async () => {
    const seller = await createAccount(gw, { capabilities: [CAP] });
    const model = await createModel(gw, seller);
    const p = await createProduct(gw, seller, model.id);
    const [del, pub] = await Promise.all([gw.http.delete(`${PRODUCTS}/${p.id}`, { token: seller.operator }), publish(gw, seller.operator, p.id)]);
    // whichever came first won; the other saw its outcome
    if (del.status === 204) {
      expect(pub.status).toBe(404);
      expect(await gw.db.sql`select 1 from marketplace_products where id = ${p.id}`).toHaveLength(0);
    } else {
      expect([del.status, pub.status]).toEqual([409, 200]);
      expect((await actorAndRow(p.id)).row.state).toBe('PUBLISHED');
    }
  });
});

describe('OpenAPI', () => {
  it('documents every marketplace route with its capability-gated writes', async () => {
    const doc = (await gw.http.get('/docs/json')).body;
    expect(Object.keys(doc.paths[PRODUCTS]).sort()).toEqual(['get', 'post']);
    expect(Object.keys(doc.paths[`${PRODUCTS}/{id}`]).sort()).toEqual(['delete', 'get', 'patch']);
    expect(doc.paths[`${PRODUCTS}/{id}/publish`].post.responses['409']).toBeDefined();
    expect(doc.paths[`${PRODUCTS}/{id}/unpublish`].post).toBeDefined();
    expect(doc.paths[`${PRODUCTS}/mine`].get).toBeDefined();
  });
});
