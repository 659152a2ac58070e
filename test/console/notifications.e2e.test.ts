import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestGateway, type TestGateway } from '../helpers/gateway.js';
import { createAccount, type TestAccount } from '../helpers/accounts.js';
import { enrollDevice, revokeDevice } from '../helpers/devices.js';
import { publisherToken } from '../notifications/helpers.js';
import { hasChromium, launchChromium, openPage, screenshot, signIn, textIs } from './browser.js';

describe.skipIf(!hasChromium)('console notifications page in headless Chromium', () => {
  let gw: TestGateway;
  let account: TestAccount;
  let browser: import('playwright-core').Browser;

  beforeAll(async () => {
    gw = await startTestGateway();
    account = await createAccount(gw);
    browser = await launchChromium();
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

    const { page, errors } = await openPage(browser);
    await page.goto(`${gw.httpUrl}/console/`);
    await page.waitForSelector('#signin:not(.hidden)');
    await screenshot(page, 'signin');
    await signIn(page, `acc-${account.id}`, 'eve');
    await page.waitForSelector('li.item');
    expect(await page.textContent('#feed')).toContain('before sign-in');
    await textIs(page, '#badge', '1');
    await textIs(page, '#status', 'live');

    // published while the page is open: it appears without a reload, and the badge follows
    const id = await publish('arrived live');
    await page.waitForSelector(`li.item[data-id="${id}"]`);
    expect(await page.textContent(`li.item[data-id="${id}"] .title`)).toBe('arrived live');
    expect(await page.textContent(`li.item[data-id="${id}"] .body`)).toBe('<b>not bold</b>');
    await textIs(page, '#badge', '2');
    const tenantId = await publish('for the whole account', 'tenant');
    await page.waitForSelector(`li.item[data-id="${tenantId}"]`);
    await textIs(page, '#badge', '3');

    await page.click(`li.item[data-id="${id}"] button.mark-read`);
    await textIs(page, '#badge', '2');
    await page.click(`li.item[data-id="${id}"] button.dismiss`);
    await page.waitForSelector(`li.item[data-id="${id}"]`, { state: 'detached' });
    const feed = await gw.http.get('/api/notifications/feed?dismissed=true', { token: await gw.token({ realm: `acc-${account.id}`, sub: 'eve', roles: ['viewer'] }), headers: { 'x-account-id': account.id } });
    expect(feed.body.items.find((i: any) => i.id === id)).toMatchObject({ read: true, dismissed: true });
    expect(errors).toEqual([]);
    await page.close();
  });

  it('a notification about a thing links to its device page, which resolves; other notifications have no device link', async () => {
    const device = await enrollDevice(gw, account, { serial: 'SN-LINK-1' });
    await revokeDevice(gw, account, device.thingId); // thing.revoked -> tenant notification with actionUrl /things/{id}
    const publisher = await publisherToken(gw);
    const other = await gw.http.post('/api/notifications/publish', {
      channel: ['in_app'], scope: 'tenant', to: { subscriberId: account.id }, template: 'general/message', data: { subject: 'no thing here', message: 'x', thingId: 'not-a-uuid' },
    }, { token: publisher });
    expect(other.status).toBe(201);

    const { page, errors } = await openPage(browser);
    await page.goto(`${gw.httpUrl}/console/`);
    await signIn(page, `acc-${account.id}`, 'frank', 'admin');
    const link = page.locator('li.item a.device-link', { hasText: 'Open device' });
    await link.first().waitFor();
    expect(await link.count()).toBe(1);
    expect(await page.locator(`li.item[data-id="${other.body.id}"] a`).count()).toBe(0);
    expect(await link.getAttribute('href')).toBe(`/console/things/${device.thingId}`);
    await screenshot(page, 'notifications');

    await link.click();
    await page.waitForURL(`**/console/things/${device.thingId}`);
    await page.waitForSelector('#device:not(.hidden)');
    await textIs(page, '#identity .serial', 'SN-LINK-1');
    expect(await page.textContent('#identity .revoked-flag')).toContain('yes');
    expect(errors).toEqual([]);
    await page.close();
  });
});
