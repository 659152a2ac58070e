import fs from 'node:fs';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestGateway, type TestGateway } from '../helpers/gateway.js';
import { createAccount, type TestAccount } from '../helpers/accounts.js';
import { publisherToken } from './helpers.js';

const CHROMIUM = process.env.CHROMIUM_PATH ?? '/usr/bin/chromium';
const hasChromium = fs.existsSync(CHROMIUM);
if (!hasChromium) console.log(`console end-to-end test skipped: no Chromium at ${CHROMIUM} (apt-get install -y chromium, or set CHROMIUM_PATH)`);

/** waits until the element's text equals `text` (evaluated in the page) */
const textIs = (page: import('playwright-core').Page, id: string, text: string) =>
  page.waitForFunction(([i, t]) => (globalThis as unknown as { document: { getElementById(x: string): { textContent: string } | null } }).document.getElementById(i)?.textContent === t, [id, text] as const);

describe.skipIf(!hasChromium)('console page in headless Chromium', () => {
  let gw: TestGateway;
  let account: TestAccount;
  let browser: import('playwright-core').Browser;

  beforeAll(async () => {
    gw = await startTestGateway();
    account = await createAccount(gw);
    const { chromium } = await import('playwright-core');
    browser = await chromium.launch({
      executablePath: CHROMIUM,
      args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run', '--disable-background-networking', '--disable-component-update', '--disable-sync'],
    });
  });
  afterAll(async () => {
    await browser?.close();
    await gw?.close();
  });

  it('signs in, shows the feed and badge, receives a published notification live, marks read and dismisses', async () => {
    const publisher = await publisherToken(gw);
    const publish = async (subject: string, scope: 'user' | 'tenant' = 'user') => {
      const res = await gw.http.post('/api/notifications/publish', {
        channel: ['in_app'], scope, to: { subscriberId: scope === 'user' ? 'eve' : account.id }, template: 'general/message', severity: 'warning', data: { subject, message: '<b>not bold</b>' },
      }, { token: publisher });
      expect(res.status).toBe(201);
      return res.body.id as string;
    };
    await publish('before sign-in');

    const page = await browser.newPage();
    const errors: string[] = [];
    page.on('pageerror', (e) => errors.push(e.message));
    await page.goto(`${gw.httpUrl}/console/`);
    await page.fill('#realm', `acc-${account.id}`);
    await page.fill('#sub', 'eve');
    await page.click('#signin-button');
    await page.waitForSelector('li.item');
    expect(await page.textContent('#feed')).toContain('before sign-in');
    await textIs(page, 'badge', '1');
    await textIs(page, 'status', 'live');

    // published while the page is open: it appears without a reload, and the badge follows
    const id = await publish('arrived live');
    await page.waitForSelector(`li.item[data-id="${id}"]`);
    expect(await page.textContent(`li.item[data-id="${id}"] .title`)).toBe('arrived live');
    expect(await page.textContent(`li.item[data-id="${id}"] .body`)).toBe('<b>not bold</b>');
    await textIs(page, 'badge', '2');
    const tenantId = await publish('for the whole account', 'tenant');
    await page.waitForSelector(`li.item[data-id="${tenantId}"]`);
    await textIs(page, 'badge', '3');

    await page.click(`li.item[data-id="${id}"] button.mark-read`);
    await textIs(page, 'badge', '2');
    await page.click(`li.item[data-id="${id}"] button.dismiss`);
    await page.waitForSelector(`li.item[data-id="${id}"]`, { state: 'detached' });
    const feed = await gw.http.get('/api/notifications/feed?dismissed=true', { token: await gw.token({ realm: `acc-${account.id}`, sub: 'eve', roles: ['viewer'] }), headers: { 'x-account-id': account.id } });
    expect(feed.body.items.find((i: any) => i.id === id)).toMatchObject({ read: true, dismissed: true });
    expect(errors).toEqual([]);
    await page.close();
  });
});
