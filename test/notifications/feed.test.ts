import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { expectProblem, startTestGateway, type TestGateway } from '../helpers/gateway.js';
import { createAccount, type TestAccount } from '../helpers/accounts.js';
import { publisherToken, userToken } from './helpers.js';

describe('feed', () => {
  let gw: TestGateway;
  let A: TestAccount;
  let B: TestAccount;
  let publisher: string;
  // two users of account A (u1, u2), one of account B (u3)
  let u1: string;
  let u2: string;
  let u3: string;
  const ids: Record<string, string> = {};

  const publish = async (body: Record<string, unknown>) => {
    const res = await gw.http.post('/api/notifications/publish', { channel: ['in_app'], template: 'general/message', ...body }, { token: publisher });
    if (res.status !== 201) throw new Error(`publish: ${res.status} ${res.text}`);
    return res.body.id as string;
  };
  const as = (token: string, account?: string): { token: string; headers: Record<string, string> } => ({ token, headers: account ? { 'x-account-id': account } : {} });

  beforeAll(async () => {
    gw = await startTestGateway();
    A = await createAccount(gw);
    B = await createAccount(gw);
    publisher = await publisherToken(gw);
    u1 = await userToken(gw, A.id, 'u1');
    u2 = await userToken(gw, A.id, 'u2');
    u3 = await userToken(gw, B.id, 'u3');
    ids.u1info = await publish({ to: { subscriberId: 'u1' }, data: { subject: 'u1 info', message: '-' } });
    ids.u1err = await publish({ to: { subscriberId: 'u1' }, severity: 'error', data: { subject: 'u1 error', message: '-' } });
    ids.u2warn = await publish({ to: { subscriberId: 'u2' }, severity: 'warning', data: { subject: 'u2 warning', message: '-' } });
    ids.tenantA = await publish({ scope: 'tenant', to: { subscriberId: A.id }, severity: 'critical', data: { subject: 'A critical', message: '-' }, actionUrl: '/status' });
    ids.tenantB = await publish({ scope: 'tenant', to: { subscriberId: B.id }, data: { subject: 'B info', message: '-' } });
    ids.u3 = await publish({ to: { subscriberId: 'u3' }, data: { subject: 'u3 info', message: '-' } });
  });
  afterAll(async () => {
    await gw?.close();
  });

  const titles = (res: { body: { items: { title: string }[] } }) => res.body.items.map((i) => i.title);

  it('visibility: own user-scope plus tenant-scope of X-Account-Id, newest first, under both prefixes', async () => {
    for (const prefix of ['/api/notifications', '/console/notifications']) {
      const r1 = await gw.http.get(`${prefix}/feed`, as(u1, A.id));
      expect(r1.status).toBe(200);
      expect(titles(r1)).toEqual(['A critical', 'u1 error', 'u1 info']);
      expect(r1.body).toMatchObject({ limit: 20, offset: 0, hasMore: false });
      expect(r1.body.items[0]).toMatchObject({ scope: 'tenant', accountId: A.id, severity: 'critical', actionUrl: '/status', categoryId: 'general', template: 'general/message', read: false, dismissed: false });
      expect(titles(await gw.http.get(`${prefix}/feed`, as(u2, A.id)))).toEqual(['A critical', 'u2 warning']);
      expect(titles(await gw.http.get(`${prefix}/feed`, as(u3, B.id)))).toEqual(['u3 info', 'B info']);
    }
    // without X-Account-Id: user-scope only
    expect(titles(await gw.http.get('/api/notifications/feed', as(u1)))).toEqual(['u1 error', 'u1 info']);
    // X-Account-Id of an account the caller does not belong to: its tenant notifications stay hidden
    expect(titles(await gw.http.get('/api/notifications/feed', as(u1, B.id)))).toEqual(['u1 error', 'u1 info']);
    expect(titles(await gw.http.get('/api/notifications/feed', as(u3, A.id)))).toEqual(['u3 info']);
    expectProblem(await gw.http.get('/api/notifications/feed', as(u1, 'not-a-uuid')), 400);
  });

  it('identity-center users: tenant notifications of the account they are assigned to and name in X-Account-Id', async () => {
    const root = await gw.token({ realm: 'platform', sub: 'root', roles: ['platform-admin'] });
    const assign = await gw.http.put(`/platform/v1/accounts/${A.id}/assignments/idc-corp/ivy`, { roles: ['viewer'] }, { token: root });
    expect([200, 201]).toContain(assign.status);
    const ivy = await gw.token({ realm: 'idc-corp', sub: 'ivy', roles: [] });
    await publish({ to: { subscriberId: 'ivy' }, data: { subject: 'ivy personal', message: '-' } });
    expect(titles(await gw.http.get('/api/notifications/feed', as(ivy, A.id)))).toEqual(['ivy personal', 'A critical']);
    // not assigned to B: the identity-center resolver gives no roles there (403), and B's items never show
    const other = await gw.http.get('/api/notifications/feed', as(ivy, B.id));
    expect(other.status).toBe(403);
    expectProblem(await gw.http.patch(`/api/notifications/${ids.tenantB}/read`, undefined, as(ivy, A.id)), 404);
  });

  it('401 without a token; 403 for a token with no reader role', async () => {
    expectProblem(await gw.http.get('/api/notifications/feed'), 401);
    expectProblem(await gw.http.get('/console/notifications/unseen/count'), 401);
    expectProblem(await gw.http.get('/api/notifications/feed', { token: publisher }), 403);
  });

  it('query: limit, offset, read, severity filter; 400 for an unknown severity or bad limit', async () => {
    let r = await gw.http.get('/api/notifications/feed?limit=1&offset=1', as(u1, A.id));
    expect(titles(r)).toEqual(['u1 error']);
    expect(r.body.hasMore).toBe(true);
    r = await gw.http.get('/api/notifications/feed?severity=error,critical', as(u1, A.id));
    expect(titles(r)).toEqual(['A critical', 'u1 error']);
    r = await gw.http.get('/api/notifications/feed?severity=info', as(u1, A.id));
    expect(titles(r)).toEqual(['u1 info']);
    expect(expectProblem(await gw.http.get('/api/notifications/feed?severity=info,fatal', as(u1, A.id)), 400).detail).toMatch(/unknown severity "fatal"/);
    expect(titles(await gw.http.get('/api/notifications/feed?severity=all', as(u1, A.id)))).toEqual(['A critical', 'u1 error', 'u1 info']);
    for (const q of ['limit=0', 'limit=101', 'limit=abc', 'offset=-1', 'read=maybe']) {
      expectProblem(await gw.http.get(`/api/notifications/feed?${q}`, as(u1, A.id)), 400);
    }
  });

  it('read and dismiss: per user for tenant-scope ones; unseen count; 404 for someone else\'s notification', async () => {
    const count = async (t: string, acc: string) => (await gw.http.get('/console/notifications/unseen/count', as(t, acc))).body.count;
    expect(await count(u1, A.id)).toBe(3);
    expect(await count(u2, A.id)).toBe(2);

    expect((await gw.http.patch(`/console/notifications/${ids.tenantA}/read`, undefined, as(u1, A.id))).status).toBe(204);
    expect(await count(u1, A.id)).toBe(2);
    expect(await count(u2, A.id)).toBe(2); // u2's copy of the tenant notification is still unread
    let r = await gw.http.get('/api/notifications/feed?read=true', as(u1, A.id));
    expect(titles(r)).toEqual(['A critical']);
    expect(r.body.items[0].read).toBe(true);
    r = await gw.http.get('/api/notifications/feed?read=false', as(u1, A.id));
    expect(titles(r)).toEqual(['u1 error', 'u1 info']);
    // read twice is fine
    expect((await gw.http.patch(`/console/notifications/${ids.tenantA}/read`, undefined, as(u1, A.id))).status).toBe(204);

    // someone else's: 404, never 403
    for (const [tok, acc, id] of [
      [u2, A.id, ids.u1info], // another user's user-scope
      [u3, B.id, ids.tenantA], // another account's tenant-scope
      [u1, B.id, ids.tenantB], // X-Account-Id of an account u1 does not belong to
      [u1, undefined, ids.tenantA], // tenant-scope without X-Account-Id
      [u1, A.id, '00000000-0000-4000-8000-000000000000'],
    ] as [string, string | undefined, string][]) {
      expectProblem(await gw.http.patch(`/console/notifications/${id}/read`, undefined, as(tok, acc)), 404);
      expectProblem(await gw.http.patch(`/console/notifications/${id}/dismiss`, undefined, as(tok, acc)), 404);
    }
    expectProblem(await gw.http.patch('/console/notifications/not-a-uuid/read', undefined, as(u1, A.id)), 400);

    expect((await gw.http.patch(`/api/notifications/${ids.tenantA}/dismiss`, undefined, as(u2, A.id))).status).toBe(204);
    expect(titles(await gw.http.get('/api/notifications/feed', as(u2, A.id)))).toEqual(['u2 warning']);
    expect(titles(await gw.http.get('/api/notifications/feed', as(u1, A.id)))).toEqual(['A critical', 'u1 error', 'u1 info']);
    r = await gw.http.get('/api/notifications/feed?dismissed=true', as(u2, A.id));
    expect(r.body.items.map((i: any) => [i.title, i.dismissed])).toEqual([['A critical', true], ['u2 warning', false]]);
    expect(await count(u2, A.id)).toBe(1);
  });

  it('read-all and dismiss-all affect only the caller\'s feed', async () => {
    const count = async (t: string, acc: string) => (await gw.http.get('/api/notifications/unseen/count', as(t, acc))).body.count;
    expect((await gw.http.patch('/api/notifications/read-all', undefined, as(u1, A.id))).status).toBe(204);
    expect(await count(u1, A.id)).toBe(0);
    expect(await count(u2, A.id)).toBe(1);
    expect(await count(u3, B.id)).toBe(2);
    // a notification after read-all is unread
    await publish({ to: { subscriberId: 'u1' }, data: { subject: 'later', message: '-' } });
    expect(await count(u1, A.id)).toBe(1);
    expect((await gw.http.patch('/console/notifications/dismiss-all', undefined, as(u1, A.id))).status).toBe(204);
    expect(titles(await gw.http.get('/api/notifications/feed', as(u1, A.id)))).toEqual([]);
    expect(titles(await gw.http.get('/api/notifications/feed', as(u2, A.id)))).toEqual(['u2 warning']);
    expect(titles(await gw.http.get('/api/notifications/feed', as(u3, B.id)))).toEqual(['u3 info', 'B info']);
    expect(await count(u1, A.id)).toBe(0);
  });

  it('read-all and dismiss-all stay single statements with 100,000 notifications', async () => {
    const C = await createAccount(gw);
    const reader = await userToken(gw, C.id, 'bulk');
    await gw.db.sql`
      insert into notifications (scope, subscriber_id, template_id, category_id, severity, title, body, channels)
      select case when g % 2 = 0 then 'tenant' else 'user' end, case when g % 2 = 0 then ${C.id} else 'bulk' end,
        'general/message', 'general', 'info', 'bulk ' || g, '', '{in_app}' from generate_series(1, 100000) g`;
    await gw.db.sql`analyze notifications`;
    const count = async () => (await gw.http.get('/api/notifications/unseen/count', as(reader, C.id))).body.count;
    let t = Date.now();
    expect(await count()).toBe(100000);
    console.log(`unseen count over 100,000 unread: ${Date.now() - t} ms`);
    t = Date.now();
    expect((await gw.http.get('/api/notifications/feed?limit=100&offset=500', as(reader, C.id))).body.items.length).toBe(100);
    console.log(`feed page (limit 100, offset 500) over 100,000: ${Date.now() - t} ms`);
    t = Date.now();
    expect((await gw.http.patch('/api/notifications/read-all', undefined, as(reader, C.id))).status).toBe(204);
    console.log(`read-all over 100,000 notifications: ${Date.now() - t} ms`);
    t = Date.now();
    expect(await count()).toBe(0);
    console.log(`unseen count after read-all: ${Date.now() - t} ms`);
    t = Date.now();
    expect((await gw.http.patch('/api/notifications/dismiss-all', undefined, as(reader, C.id))).status).toBe(204);
    console.log(`dismiss-all over 100,000 notifications: ${Date.now() - t} ms`);
    expect((await gw.http.get('/api/notifications/feed', as(reader, C.id))).body.items).toEqual([]);
  });

  it('categories: localized by Accept-Language; platform admins add categories and templates', async () => {
    let r = await gw.http.get('/console/notifications/categories', { ...as(u1, A.id), headers: { 'accept-language': 'de-DE,de;q=0.9,en;q=0.8' } });
    expect(r.status).toBe(200);
    expect(r.body.items.find((c: any) => c.id === 'devices')).toMatchObject({ name: 'Geräte', names: { en: 'Devices' } });
    r = await gw.http.get('/console/notifications/categories', { token: u1, headers: { 'accept-language': 'ja, fr;q=0.5' } });
    expect(r.body.items.find((c: any) => c.id === 'devices').name).toBe('Appareils');
    r = await gw.http.get('/console/notifications/categories', { token: u1 });
    expect(r.body.items.map((c: any) => c.id)).toEqual(expect.arrayContaining(['devices', 'claim-groups', 'quotas', 'organizations']));

    const root = await gw.token({ realm: 'platform', sub: 'root', roles: ['platform-admin'] });
    expect((await gw.http.put('/api/notifications/categories/billing', { names: { en: 'Billing', de: 'Abrechnung' } }, { token: root })).status).toBe(201);
    expectProblem(await gw.http.put('/api/notifications/categories/billing', { names: { de: 'x' } }, { token: root }), 400);
    expectProblem(await gw.http.put('/api/notifications/categories/billing', { names: { en: 'x' } }, { token: publisher }), 403);
    const tpl = { categoryId: 'billing', subject: 'Invoice {{number}}', title: 'Invoice {{number}} is ready', bodyText: 'Invoice {{number}}', bodyHtml: '<p>Invoice {{number}}</p>' };
    expect((await gw.http.put('/api/notifications/templates/billing/invoice-ready', tpl, { token: root })).status).toBe(201);
    expect((await gw.http.put('/api/notifications/templates/billing/invoice-ready', tpl, { token: root })).status).toBe(200);
    expectProblem(await gw.http.put('/api/notifications/templates/billing/x', { ...tpl, categoryId: 'nope' }, { token: root }), 400);
    expectProblem(await gw.http.put('/api/notifications/templates/Billing/x', tpl, { token: root }), 400);
    const list = await gw.http.get('/api/notifications/templates', { token: publisher });
    expect(list.body.items.map((t: any) => t.id)).toEqual(expect.arrayContaining(['billing/invoice-ready', 'device/revoked', 'claim-group/capped', 'quota/request-decided', 'organization/leave-blocked']));
    const id = await publish({ to: { subscriberId: 'u2' }, template: 'billing/invoice-ready', data: { number: 42 } });
    const feed = await gw.http.get('/api/notifications/feed', as(u2, A.id));
    expect(feed.body.items[0]).toMatchObject({ id, title: 'Invoice 42 is ready', categoryId: 'billing' });
    r = await gw.http.get('/console/notifications/categories', { token: u1, headers: { 'accept-language': 'de' } });
    expect(r.body.items.find((c: any) => c.id === 'billing').name).toBe('Abrechnung');
  });

  it('OpenAPI document lists the notification routes under both prefixes', async () => {
    const docs = await gw.http.get('/docs/json');
    expect(docs.status).toBe(200);
    const paths = Object.keys(docs.body.paths);
    for (const p of ['/api/notifications/publish', '/api/notifications/feed', '/console/notifications/feed', '/console/notifications/stream', '/console/notifications/stream/auth', '/api/notifications/preferences', '/console/notifications/unseen/count']) {
      expect(paths).toContain(p);
    }
  });

  it('preferences: read defaults, replace, validation', async () => {
    const t = await userToken(gw, A.id, 'prefs-user');
    let r = await gw.http.get('/console/notifications/preferences', { token: t });
    expect(r.body).toEqual({ globalMute: false, disabledCategories: [], quietHours: null, updatedAt: null });
    r = await gw.http.put('/console/notifications/preferences', { globalMute: false, disabledCategories: ['quotas', 'quotas'], quietHours: { start: '22:00', end: '07:00', timeZone: 'Europe/Berlin' } }, { token: t });
    expect(r.status).toBe(200);
    expect(r.body).toMatchObject({ disabledCategories: ['quotas'], quietHours: { start: '22:00', end: '07:00', timeZone: 'Europe/Berlin' } });
    expect((await gw.http.get('/api/notifications/preferences', { token: t })).body.disabledCategories).toEqual(['quotas']);
    const bad = [
      { globalMute: false, disabledCategories: [], quietHours: { start: '22:00', end: '07:00', timeZone: 'Mars/Olympus' } },
      { globalMute: false, disabledCategories: [], quietHours: { start: '25:00', end: '07:00', timeZone: 'UTC' } },
      { globalMute: false, disabledCategories: [], quietHours: { start: '07:00', end: '07:00', timeZone: 'UTC' } },
      { globalMute: 'yes', disabledCategories: [], quietHours: null },
      { globalMute: false, disabledCategories: [], quietHours: null, extra: 1 },
    ];
    for (const b of bad) expectProblem(await gw.http.put('/api/notifications/preferences', b, { token: t }), 400);
  });
});
