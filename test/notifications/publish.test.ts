import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { SMTPServer } from 'smtp-server';
import { expectProblem, startTestGateway, type TestGateway } from '../helpers/gateway.js';
import { createAccount, type TestAccount } from '../helpers/accounts.js';
import { expiredDevToken } from '../helpers/tokens.js';
import { publisherToken, userToken } from './helpers.js';

interface Received { from: string; to: string[]; raw: string }

/** quoted-printable soft breaks and escapes, enough to read nodemailer's output */
const unQp = (s: string) => s.replace(/=\r?\n/g, '').replace(/=([0-9A-F]{2})/g, (_, h: string) => String.fromCharCode(parseInt(h, 16)));

describe('publish', () => {
  let gw: TestGateway;
  let smtp: SMTPServer;
  let authz: http.Server;
  let authzMode: 'allow' | 'deny' | 'hangup' | 'garbage' = 'allow';
  const authzRequests: any[] = [];
  const mails: Received[] = [];
  let account: TestAccount;
  let publisher: string;

  beforeAll(async () => {
    smtp = new SMTPServer({
      authOptional: true,
      disabledCommands: ['STARTTLS'],
      logger: false,
      onRcptTo(address, _session, cb) {
        if (address.address.startsWith('bounce@')) return cb(new Error('550 mailbox unavailable'));
        cb();
      },
      onData(stream, session, cb) {
        let raw = '';
        stream.setEncoding('utf8');
        stream.on('data', (c: string) => (raw += c));
        stream.on('end', () => {
          mails.push({ from: session.envelope.mailFrom ? (session.envelope.mailFrom as { address: string }).address : '', to: session.envelope.rcptTo.map((r) => r.address), raw });
          cb();
        });
      },
    });
    await new Promise<void>((r) => smtp.listen(0, '127.0.0.1', () => r()));
    const smtpPort = (smtp.server.address() as AddressInfo).port;

    authz = http.createServer((req, res) => {
      let body = '';
      req.on('data', (c) => (body += c));
      req.on('end', () => {
        authzRequests.push(JSON.parse(body));
        if (authzMode === 'hangup') return req.socket.destroy();
        if (authzMode === 'garbage') return res.writeHead(500).end('oops');
        res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify(authzMode === 'allow' ? { allow: true } : { allow: false, reason: 'tenant policy forbids this template' }));
      });
    });
    await new Promise<void>((r) => authz.listen(0, '127.0.0.1', () => r()));

    gw = await startTestGateway({
      SMTP_URL: `smtp://127.0.0.1:${smtpPort}`,
      NOTIFY_AUTHZ_URL: `http://127.0.0.1:${(authz.address() as AddressInfo).port}/authorize`,
      CONSOLE_BASE_URL: 'https://console.example.com',
      MAIL_FROM: 'Gateway <gw@example.com>',
    });
    account = await createAccount(gw);
    publisher = await publisherToken(gw);
  });

  afterAll(async () => {
    await gw?.close();
    await new Promise<void>((r) => smtp?.close(() => r()));
    authz?.close();
  });

  const publish = (body: unknown, token: string = publisher) => gw.http.post('/api/notifications/publish', body, { token });
  const base = () => ({ channel: ['in_app'], to: { subscriberId: 'alice' }, template: 'general/message', data: { subject: 'Hello', message: 'World' } });

  it('201 sent: in-app, with defaults scope user and severity info, after an allow from the authorization service', async () => {
    authzMode = 'allow';
    const res = await publish(base());
    expect(res.status).toBe(201);
    expect(res.body).toMatchObject({ status: 'sent', channel: ['in_app'] });
    expect(res.body.id).toMatch(/^[0-9a-f-]{36}$/);
    const last = authzRequests[authzRequests.length - 1];
    expect(last).toMatchObject({ action: 'notifications:Send', scope: 'user', severity: 'info', subscriberId: 'alice', template: 'general/message', categoryId: 'general' });
    expect(last.publisher).toMatchObject({ sub: 'publisher-svc', realm: 'platform' });
    const feed = await gw.http.get('/api/notifications/feed', { token: await userToken(gw, account.id, 'alice') });
    expect(feed.body.items[0]).toMatchObject({ id: res.body.id, title: 'Hello', body: 'World\n', severity: 'info', scope: 'user', read: false });
  });

  it('201 sent: email to a real SMTP server, variables HTML-escaped, actionUrl absolute against CONSOLE_BASE_URL', async () => {
    const before = mails.length;
    const res = await publish({
      channel: ['email', 'in_app'],
      to: { subscriberId: 'bob', email: 'bob@example.com' },
      severity: 'warning',
      template: 'device/revoked',
      data: { serial: 'SN-1<script>alert(1)</script>', model: 'FFF1:8001', thingId: 'thing-1', certificateSerial: '0a01', by: 'Mallory & "Co"' },
      actionUrl: '/things/thing-1',
    });
    expect(res.status).toBe(201);
    expect(mails.length).toBe(before + 1);
    const mail = mails[mails.length - 1];
    expect(mail.to).toEqual(['bob@example.com']);
    expect(mail.from).toBe('gw@example.com');
    const raw = unQp(mail.raw);
    expect(raw).toMatch(/Subject: Device SN-1<script>alert\(1\)<\/script> was revoked/);
    expect(raw).toContain('SN-1&#60;script&#62;alert(1)&#60;/script&#62;');
    expect(raw).toContain('Mallory &#38; &#34;Co&#34;');
    expect(raw).not.toContain('<b>SN-1<script>');
    expect(raw).toContain('href="https://console.example.com/things/thing-1"');
    expect(raw).toContain('Content-Type: text/plain');
  });

  it('201 sent: email only (no feed row, id null)', async () => {
    const res = await publish({ channel: ['email'], to: { subscriberId: 'carol', email: 'carol@example.com' }, template: 'general/message', data: { subject: 's', message: 'm' } });
    expect(res.status).toBe(201);
    expect(res.body).toEqual({ status: 'sent', id: null, channel: ['email'] });
  });

  it('201 sent: tenant scope to an account', async () => {
    const res = await publish({ channel: ['in_app'], scope: 'tenant', to: { subscriberId: account.id }, severity: 'critical', template: 'general/message', data: { subject: 'Maintenance', message: 'tonight' } });
    expect(res.status).toBe(201);
  });

  it('200 dropped: globalMute, category-disabled (with categoryId), quiet-hours; never for tenant scope', async () => {
    const dave = await userToken(gw, account.id, 'dave');
    const put = (prefs: unknown) => gw.http.put('/api/notifications/preferences', prefs, { token: dave });
    expect((await put({ globalMute: true, disabledCategories: [], quietHours: null })).status).toBe(200);
    let res = await publish({ ...base(), to: { subscriberId: 'dave' } });
    expect(res.status).toBe(200);
    expect(res.body).toEqual({ status: 'dropped', reason: 'globalMute' });

    expect((await put({ globalMute: false, disabledCategories: ['general'], quietHours: null })).status).toBe(200);
    res = await publish({ ...base(), to: { subscriberId: 'dave' } });
    expect(res.status).toBe(200);
    expect(res.body).toEqual({ status: 'dropped', reason: 'category-disabled', categoryId: 'general' });
    res = await publish({ channel: ['in_app'], to: { subscriberId: 'dave' }, template: 'device/revoked', data: { serial: 's', model: 'm', thingId: 't', certificateSerial: 'c', by: 'b' } });
    expect(res.status).toBe(201);

    // a window that contains now in the recipient's zone, across midnight in UTC+14
    const tz = 'Pacific/Kiritimati';
    const parts = new Intl.DateTimeFormat('en-GB', { timeZone: tz, hour: '2-digit', minute: '2-digit', hourCycle: 'h23' }).formatToParts(new Date());
    const h = Number(parts.find((p) => p.type === 'hour')!.value);
    const pad = (n: number) => String((n + 24) % 24).padStart(2, '0') + ':00';
    expect((await put({ globalMute: false, disabledCategories: [], quietHours: { start: pad(h - 1), end: pad(h + 2), timeZone: tz } })).status).toBe(200);
    res = await publish({ ...base(), to: { subscriberId: 'dave' } });
    expect(res.status).toBe(200);
    expect(res.body).toEqual({ status: 'dropped', reason: 'quiet-hours' });
    // outside the window
    expect((await put({ globalMute: false, disabledCategories: [], quietHours: { start: pad(h + 2), end: pad(h + 4), timeZone: tz } })).status).toBe(200);
    expect((await publish({ ...base(), to: { subscriberId: 'dave' } })).status).toBe(201);

    // tenant scope ignores preferences even when the subscriber id equals a muted user's
    await put({ globalMute: true, disabledCategories: ['general'], quietHours: null });
    res = await publish({ ...base(), scope: 'tenant', to: { subscriberId: account.id } });
    expect(res.status).toBe(201);
  });

  it('metrics count publish outcomes and open streams', async () => {
    const m = (await gw.http.get('/metrics')).text;
    expect(m).toMatch(/notifications_published_total\{status="sent",reason=""\} \d+/);
    expect(m).toMatch(/notifications_published_total\{status="dropped",reason="quiet-hours"\} 1/);
    expect(m).toMatch(/notification_streams_open 0/);
  });

  it('400: missing channel, to.subscriberId or template; invalid scope or severity; email without to.email; unknown fields', async () => {
    const cases: [unknown, RegExp][] = [
      [{ to: { subscriberId: 'a' }, template: 'general/message' }, /channel/],
      [{ channel: ['in_app'], to: {}, template: 'general/message' }, /subscriberId/],
      [{ channel: ['in_app'], template: 'general/message' }, /to/],
      [{ channel: ['in_app'], to: { subscriberId: 'a' } }, /template/],
      [{ ...base(), scope: 'everyone' }, /scope/],
      [{ ...base(), severity: 'fatal' }, /severity/],
      [{ ...base(), channel: ['email'] }, /to\.email/],
      [{ ...base(), channel: ['sms'] }, /channel/],
      [{ ...base(), channel: [] }, /channel/],
      [{ ...base(), priority: 1 }, /unknown field/],
      [{ ...base(), template: 'no-namespace' }, /template/],
      [{ ...base(), template: 'general/nope' }, /not in the catalogue/],
      [{ ...base(), data: { subject: 'only subject' } }, /needs data\.message/],
      [{ ...base(), scope: 'tenant', to: { subscriberId: 'not-a-uuid' } }, /account id/],
      [{ ...base(), actionUrl: 'https://evil.example.com/' }, /actionUrl/],
    ];
    const before = authzRequests.length;
    for (const [body, detail] of cases) {
      const p = expectProblem(await publish(body), 400);
      expect(p.detail).toMatch(detail);
    }
    expect(authzRequests.length).toBe(before);
    expectProblem(await gw.http.post('/api/notifications/publish', undefined, { token: publisher, raw: '{"channel":', headers: { 'content-type': 'application/json' } }), 400);
  });

  it('401: token missing, invalid or expired', async () => {
    expectProblem(await gw.http.post('/api/notifications/publish', base()), 401);
    expectProblem(await gw.http.post('/api/notifications/publish', base(), { headers: { authorization: 'Bearer not.a.jwt' } }), 401);
    const expired = await expiredDevToken(gw, { realm: 'platform', sub: 'p', roles: ['notification-publisher'] });
    expectProblem(await publish(base(), expired), 401);
  });

  it('403: caller without the notification-publisher role; authorization decision denied', async () => {
    const admin = await gw.token({ realm: 'platform', sub: 'root', roles: ['platform-admin'] });
    expect(expectProblem(await publish(base(), admin), 403).detail).toMatch(/notification-publisher/);
    expect(expectProblem(await publish(base(), account.admin), 403).detail).toMatch(/insufficient role/);
    authzMode = 'deny';
    try {
      const p = expectProblem(await publish(base()), 403);
      expect(p.detail).toMatch(/denied.*tenant policy forbids this template/);
    } finally {
      authzMode = 'allow';
    }
  });

  it('502: authorization service unreachable or without a decision (fail closed, nothing stored or sent)', async () => {
    const bob = await userToken(gw, account.id, 'erin');
    const mailsBefore = mails.length;
    for (const mode of ['hangup', 'garbage'] as const) {
      authzMode = mode;
      try {
        const p = expectProblem(await publish({ ...base(), channel: ['in_app', 'email'], to: { subscriberId: 'erin', email: 'erin@example.com' } }), 502);
        expect(p.detail).toMatch(/denied/);
      } finally {
        authzMode = 'allow';
      }
    }
    expect(mails.length).toBe(mailsBefore);
    expect((await gw.http.get('/api/notifications/feed', { token: bob })).body.items).toEqual([]);
  });

  it('500: the email cannot be dispatched; nothing is stored', async () => {
    const frank = await userToken(gw, account.id, 'frank');
    const p = expectProblem(await publish({ ...base(), channel: ['in_app', 'email'], to: { subscriberId: 'frank', email: 'bounce@example.com' } }), 500);
    expect(p.detail).toMatch(/could not be dispatched/);
    expect((await gw.http.get('/api/notifications/feed', { token: frank })).body.items).toEqual([]);
  });
});

describe('publish with the default authorization service and the development mailbox', () => {
  let gw: TestGateway;
  beforeAll(async () => {
    gw = await startTestGateway();
  });
  afterAll(async () => {
    await gw?.close();
  });

  it('allows platform publishers, denies an account publisher addressing another account (403), 502 when unreachable', async () => {
    const a = await createAccount(gw);
    const b = await createAccount(gw);
    const platform = await publisherToken(gw);
    const body = (acc: string) => ({ channel: ['in_app', 'email'], scope: 'tenant', to: { subscriberId: acc, email: 'ops@example.com' }, template: 'general/message', data: { subject: 's', message: 'm' } });
    expect((await gw.http.post('/api/notifications/publish', body(a.id), { token: platform })).status).toBe(201);
    const accPublisher = await gw.token({ realm: `acc-${a.id}`, sub: 'svc-a', roles: ['notification-publisher'] });
    expect((await gw.http.post('/api/notifications/publish', body(a.id), { token: accPublisher })).status).toBe(201);
    const p = expectProblem(await gw.http.post('/api/notifications/publish', body(b.id), { token: accPublisher }), 403);
    expect(p.detail).toMatch(/own account/);
    // the email went to the development mailbox
    const fs = await import('node:fs');
    const path = await import('node:path');
    const dir = path.join(gw.gw.config.DATA_DIR, 'mailbox');
    const files = fs.readdirSync(dir).filter((f) => f.endsWith('.eml'));
    expect(files.length).toBe(2);
    expect(fs.readFileSync(path.join(dir, files[0]), 'utf8')).toMatch(/To: ops@example.com/);
    // the internal authorization endpoint serves callers with the internal secret only (the gateway's own calls above had it)
    const authzBody = { action: 'notifications:Send', publisher: { sub: 'x', realm: 'platform', realmKind: 'platform', accountId: null, roles: [] }, scope: 'user', subscriberId: 'u', template: 't/t', categoryId: 'general', severity: 'info', channel: ['in_app'] };
    expect(expectProblem(await gw.http.post('/internal/notifications/authorize', authzBody), 401).detail).toMatch(/X-Internal-Secret/);
    const direct = await gw.http.post('/internal/notifications/authorize', authzBody, { headers: { 'x-internal-secret': gw.gw.auth.internalSecret } });
    expect(direct.body).toEqual({ allow: false, reason: 'publisher lacks the notification-publisher role' });
  });
});
