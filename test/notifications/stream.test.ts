import crypto from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { expectProblem, startTestGateway, type TestGateway } from '../helpers/gateway.js';
import { createAccount, type TestAccount } from '../helpers/accounts.js';
import { waitFor } from '../helpers/wait.js';
import { publisherToken, SseClient, streamCookie, userToken, WsClient } from './helpers.js';

describe('live stream (SSE and WebSocket) across two nodes', () => {
  let n1: TestGateway;
  let n2: TestGateway;
  let A: TestAccount;
  let B: TestAccount;
  let publisher: string;
  let alice: string;
  const open: { close(): void }[] = [];

  beforeAll(async () => {
    // two nodes behind one public address (one token issuer), sharing the database
    const env = { SSE_HEARTBEAT_SECONDS: '1', PUBLIC_BASE_URL: 'http://gateway.test' };
    n1 = await startTestGateway({ ...env, NODE_ID: 'node-1' });
    n2 = await startTestGateway({ ...env, NODE_ID: 'node-2' }, { db: n1.db });
    A = await createAccount(n1);
    B = await createAccount(n1);
    publisher = await publisherToken(n1);
    alice = await userToken(n1, A.id, 'alice');
  });
  afterAll(async () => {
    for (const c of open) c.close();
    await n2?.close();
    await n1?.close();
  });

  const publish = async (gw: TestGateway, body: Record<string, unknown>) => {
    const res = await gw.http.post('/api/notifications/publish', { channel: ['in_app'], template: 'general/message', ...body }, { token: publisher });
    if (res.status !== 201) throw new Error(`publish: ${res.status} ${res.text}`);
    return res.body.id as string;
  };
  const sse = async (gw: TestGateway, cookie: string, extra: Record<string, string> = {}, prefix = '/console/notifications') => {
    const c = await SseClient.open(`${gw.httpUrl}${prefix}/stream`, { cookie, ...extra });
    open.push(c);
    return c;
  };

  it('stream/auth: 204 with an HttpOnly, Secure, SameSite=Strict cookie scoped to the stream path for one hour; only its hash is stored', async () => {
    const { setCookie, cookie } = await streamCookie(n1, alice, A.id);
    expect(setCookie).toMatch(/^gw_notify_stream=[A-Za-z0-9_-]{43}; /);
    expect(setCookie).toMatch(/; HttpOnly/);
    expect(setCookie).toMatch(/; Secure/);
    expect(setCookie).toMatch(/; SameSite=Strict/);
    expect(setCookie).toMatch(/; Path=\/console\/notifications\/stream(;|$)/);
    expect(setCookie).toMatch(/; Max-Age=3600/);
    const api = await streamCookie(n1, alice, A.id, '/api/notifications');
    expect(api.setCookie).toMatch(/; Path=\/api\/notifications\/stream(;|$)/);
    const token = cookie.split('=')[1];
    const rows = await n1.db.sql`select token_hash from notification_stream_sessions`;
    expect(rows.some((r) => Buffer.from(r.token_hash).equals(crypto.createHash('sha256').update(token).digest()))).toBe(true);
    expect(JSON.stringify(rows)).not.toContain(token);
    expectProblem(await n1.http.post('/console/notifications/stream/auth'), 401);
  });

  it('GET stream without, with a forged or with an expired cookie: 401; a bearer token alone does not open it', async () => {
    let c = await SseClient.open(`${n1.httpUrl}/console/notifications/stream`, {});
    expect(c.status).toBe(401);
    expect(c.headers['content-type']).toMatch(/problem\+json/);
    c = await SseClient.open(`${n1.httpUrl}/console/notifications/stream`, { cookie: 'gw_notify_stream=forged' });
    expect(c.status).toBe(401);
    c = await SseClient.open(`${n1.httpUrl}/console/notifications/stream`, { authorization: `Bearer ${alice}` });
    expect(c.status).toBe(401);
    const { cookie } = await streamCookie(n1, alice, A.id);
    await n1.db.sql`update notification_stream_sessions set expires_at = now() - interval '1 second' where token_hash = ${crypto.createHash('sha256').update(cookie.split('=')[1]).digest()}`;
    c = await SseClient.open(`${n1.httpUrl}/console/notifications/stream`, { cookie });
    expect(c.status).toBe(401);
  });

  it('SSE: heartbeat comments, notification frames on create (user and tenant scope) and dismiss, delivered from the other node', async () => {
    const { cookie } = await streamCookie(n1, alice, A.id);
    const s = await sse(n1, cookie);
    expect(s.status).toBe(200);
    expect(s.headers['content-type']).toMatch(/^text\/event-stream/);
    await s.until(() => s.comments.includes('heartbeat'), 'a heartbeat comment');

    // published on node 2, streamed from node 1
    const id1 = await publish(n2, { to: { subscriberId: 'alice' }, data: { subject: 'hello alice', message: 'm' } });
    const id2 = await publish(n2, { scope: 'tenant', to: { subscriberId: A.id }, severity: 'error', data: { subject: 'for account A', message: 'm' } });
    await publish(n2, { scope: 'tenant', to: { subscriberId: B.id }, data: { subject: 'for account B', message: 'm' } });
    await publish(n2, { to: { subscriberId: 'bob' }, data: { subject: 'for bob', message: 'm' } });
    await s.until(() => s.notifications().length >= 2, 'two notification frames');
    const frames = s.notifications();
    expect(frames[0]).toMatchObject({ type: 'created', notification: { id: id1, title: 'hello alice', scope: 'user', read: false } });
    expect(frames[1]).toMatchObject({ type: 'created', notification: { id: id2, title: 'for account A', scope: 'tenant', severity: 'error' } });
    expect(Number(frames[1].eventId)).toBeGreaterThan(Number(frames[0].eventId));

    // dismiss through node 2 -> frame on node 1
    expect((await n2.http.patch(`/console/notifications/${id1}/dismiss`, undefined, { token: alice, headers: { 'x-account-id': A.id } })).status).toBe(204);
    await s.until(() => s.notifications().find((f) => f.type === 'dismissed'), 'a dismissed frame');
    expect(s.notifications().find((f) => f.type === 'dismissed')).toMatchObject({ eventId: expect.stringMatching(/^\d+$/), type: 'dismissed', id: id1 });
    // nothing for B or bob arrived
    await publish(n1, { to: { subscriberId: 'alice' }, data: { subject: 'marker', message: 'm' } });
    await s.until(() => s.notifications().find((f) => f.notification?.title === 'marker'), 'the marker');
    expect(s.notifications().map((f) => f.notification?.title).filter(Boolean)).toEqual(['hello alice', 'for account A', 'marker']);
    s.close();
  });

  it('SSE: Last-Event-ID replays what a reconnecting client missed, on any node', async () => {
    const bobTok = await userToken(n1, A.id, 'bob2');
    const { cookie } = await streamCookie(n1, bobTok, A.id);
    const s1 = await sse(n1, cookie);
    await publish(n1, { to: { subscriberId: 'bob2' }, data: { subject: 'one', message: 'm' } });
    await s1.until(() => s1.notifications().length === 1, 'first frame');
    const lastId = s1.notifications()[0].eventId!;
    s1.close();
    await publish(n1, { to: { subscriberId: 'bob2' }, data: { subject: 'two', message: 'm' } });
    await publish(n2, { scope: 'tenant', to: { subscriberId: A.id }, data: { subject: 'three', message: 'm' } });
    const s2 = await sse(n2, cookie, { 'last-event-id': lastId });
    await s2.until(() => s2.notifications().length >= 2, 'the two missed frames');
    expect(s2.notifications().map((f) => f.notification.title)).toEqual(['two', 'three']);
    await publish(n1, { to: { subscriberId: 'bob2' }, data: { subject: 'four', message: 'm' } });
    await s2.until(() => s2.notifications().length >= 3, 'the live frame after replay');
    expect(s2.notifications().map((f) => f.notification.title)).toEqual(['two', 'three', 'four']);
    const bad = await SseClient.open(`${n1.httpUrl}/console/notifications/stream`, { cookie, 'last-event-id': 'abc' });
    expect(bad.status).toBe(400);
    s2.close();
  });

  it('WebSocket: same events, cookie-authenticated, resumable with ?lastEventId', async () => {
    const carol = await userToken(n1, A.id, 'carol');
    const { cookie } = await streamCookie(n1, carol, A.id, '/api/notifications');
    const denied = await WsClient.open(`${n2.httpUrl.replace('http', 'ws')}/api/notifications/stream/ws`, {});
    expect(denied).toEqual({ status: 401 });
    const ws = (await WsClient.open(`${n2.httpUrl.replace('http', 'ws')}/api/notifications/stream/ws`, { cookie })) as WsClient;
    open.push(ws);
    const id = await publish(n1, { to: { subscriberId: 'carol' }, data: { subject: 'ws hello', message: 'm' } });
    await ws.until(() => ws.messages.length >= 1, 'a websocket message');
    expect(ws.messages[0]).toMatchObject({ event: 'notification', id: expect.any(Number), data: { type: 'created', notification: { id, title: 'ws hello' } } });
    await n1.http.patch(`/api/notifications/${id}/dismiss`, undefined, { token: carol, headers: { 'x-account-id': A.id } });
    await ws.until(() => ws.messages.find((m) => m.data.type === 'dismissed'), 'a dismissed message');
    expect(ws.messages[1].data).toEqual({ type: 'dismissed', id });
    const first = ws.messages[0].id;
    ws.close();
    const again = (await WsClient.open(`${n1.httpUrl.replace('http', 'ws')}/api/notifications/stream/ws?lastEventId=${first}`, { cookie })) as WsClient;
    open.push(again);
    await again.until(() => again.messages.length >= 1, 'replayed dismissed message');
    expect(again.messages[0].data).toEqual({ type: 'dismissed', id });
    again.close();
  });

  it('domain events become exactly one tenant notification cluster-wide (gw.bus fires on every node)', async () => {
    const t = await userToken(n1, B.id, 'dora');
    const { cookie } = await streamCookie(n2, t, B.id);
    const s = await sse(n2, cookie);
    const thingId = crypto.randomUUID();
    await n1.gw.actors.run((uow) => uow.emit('thing', thingId, { type: 'thing.revoked', thingId, serial: 'SN-<42>', by: 'admin-x' }, B.id));
    await n2.gw.actors.run((uow) => uow.emit('claimGroup', 'cg-1', { type: 'claimGroup.capped', claimGroupId: 'cg-1', name: 'line 3', maxDevices: 10 }, B.id));
    await n1.gw.actors.run((uow) => uow.emit('quotaRequest', 'qr-1', { type: 'quotaRequest.decided', requestId: 'qr-1', decision: 'denied', serviceCode: 'things', quotaCode: 'max-things', desiredValue: 500, reason: 'too many', accountId: B.id }, null));
    await n1.gw.actors.run((uow) => uow.emit('organization', 'org-1', { type: 'organization.leaveBlocked', organizationId: 'org-1', accountId: B.id, deniedRequestIds: ['qr-1'], reason: 'denied quota requests' }, B.id));
    await n1.gw.actors.run((uow) => uow.emit('thing', thingId, { type: 'thing.somethingElse' }, B.id));
    // an event without an account at all makes nothing
    await n1.gw.actors.run((uow) => uow.emit('thing', thingId, { type: 'thing.revoked', thingId, serial: 'orphan', by: 'x' }, null));
    const feed = await waitFor(async () => {
      const r = await n1.http.get('/api/notifications/feed', { token: t, headers: { 'x-account-id': B.id } });
      return r.body.items.filter((i: any) => i.template !== 'general/message').length >= 4 ? r.body.items : undefined;
    }, 10_000, 'four event notifications');
    // give the other node's handler the same chance, then count
    await s.until(() => s.notifications().length >= 4, 'four stream frames');
    const rows = await n1.db.sql`select template_id, count(*)::int as n from notifications where subscriber_id = ${B.id} and source_event_id is not null group by template_id order by template_id`;
    expect(rows.map((r) => [r.template_id, r.n])).toEqual([['claim-group/capped', 1], ['device/revoked', 1], ['organization/leave-blocked', 1], ['quota/request-decided', 1]]);
    const byTemplate = Object.fromEntries(feed.map((i: any) => [i.template, i]));
    expect(byTemplate['device/revoked']).toMatchObject({ scope: 'tenant', accountId: B.id, severity: 'warning', title: 'Device SN-<42> was revoked', categoryId: 'devices', actionUrl: `/things/${thingId}` });
    expect(byTemplate['claim-group/capped'].title).toBe('Claim group line 3 reached its limit of 10 devices');
    expect(byTemplate['quota/request-decided'].title).toBe('Your request for things/max-things = 500 was denied');
    expect(byTemplate['organization/leave-blocked']).toMatchObject({ title: 'Your account cannot leave organization org-1', severity: 'error' });
    expect(byTemplate['organization/leave-blocked'].body).toContain('(denied quota requests). Denied quota requests: qr-1.');
    expect(s.notifications().length).toBe(4);
  });

  it('SSE: dismiss-all sends one dismissed-all frame to the user\'s streams only', async () => {
    const gus = await userToken(n1, A.id, 'gus');
    const hal = await userToken(n1, A.id, 'hal');
    const sg = await sse(n1, (await streamCookie(n1, gus, A.id)).cookie);
    const sh = await sse(n2, (await streamCookie(n2, hal, A.id)).cookie);
    await publish(n1, { to: { subscriberId: 'gus' }, data: { subject: 'g', message: 'm' } });
    await sg.until(() => sg.notifications().length === 1, 'the created frame');
    expect((await n2.http.patch('/api/notifications/dismiss-all', undefined, { token: gus, headers: { 'x-account-id': A.id } })).status).toBe(204);
    const frame = await sg.until(() => sg.notifications().find((f) => f.type === 'dismissed-all'), 'a dismissed-all frame');
    expect(frame).toMatchObject({ type: 'dismissed-all', accountId: A.id, through: expect.any(Number) });
    await publish(n1, { to: { subscriberId: 'hal' }, data: { subject: 'h', message: 'm' } });
    await sh.until(() => sh.notifications().length === 1, 'hal\'s frame');
    expect(sh.notifications().map((f) => f.type)).toEqual(['created']);
    sg.close();
    sh.close();
  });

  it('catch-up makes the notification of an event no node handled, once', async () => {
    const thingId = crypto.randomUUID();
    const [ev] = await n1.db.sql`insert into domain_events (actor_type, actor_id, type, account_id, payload)
      values ('thing', ${thingId}, 'thing.revoked', ${A.id}, ${n1.db.sql.json({ thingId, serial: 'SN-missed', by: 'x' })}) returning id`;
    const [made1, made2] = await Promise.all([n1.testHooks.notifications.catchUp(), n2.testHooks.notifications.catchUp()]);
    expect(made1 + made2).toBe(1);
    const rows = await n1.db.sql`select title from notifications where source_event_id = ${ev.id}`;
    expect(rows.map((r) => r.title)).toEqual(['Device SN-missed was revoked']);
    expect(await n1.testHooks.notifications.catchUp()).toBe(0);
  });

  it('graceful shutdown ends open streams', async () => {
    const n3 = await startTestGateway({ PUBLIC_BASE_URL: 'http://gateway.test', NODE_ID: 'node-3' }, { db: n1.db });
    const { cookie } = await streamCookie(n3, alice, A.id);
    const s = await sse(n3, cookie);
    const ws = (await WsClient.open(`${n3.httpUrl.replace('http', 'ws')}/console/notifications/stream/ws`, { cookie })) as WsClient;
    expect(s.status).toBe(200);
    await n3.stop();
    await s.until(() => s.ended, 'the stream to end');
    ws.close();
  });
});
