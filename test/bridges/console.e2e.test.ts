import type { Browser, Page } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestGateway, type TestGateway } from '../helpers/gateway.js';
import { createAccount, type TestAccount } from '../helpers/accounts.js';
import { enrollDevice } from '../helpers/devices.js';
import { waitFor } from '../helpers/wait.js';
import { connectDevice } from '../broker/fixtures.js';
import { hasChromium, launchChromium, openPage, screenshot, signIn, textIs } from '../console/browser.js';
import { createBridge, createRule, natsSink, rule, TestStream } from './helpers.js';

/** The console's Bridges page in headless Chromium: bridges, rules with status, counts, lag and last error; disable/enable. */
const nats = hasChromium ? await natsSink() : undefined;
describe.skipIf(!hasChromium || !nats)('console Bridges page', () => {
  let gw: TestGateway;
  let account: TestAccount;
  let browser: Browser;
  let stream: TestStream;

  beforeAll(async () => {
    gw = await startTestGateway({ BRIDGE_FAILING_AFTER_SECONDS: '1', BRIDGE_RETRY_MAX_MS: '1000' });
    account = await createAccount(gw);
    browser = await launchChromium();
    stream = await TestStream.create(nats!.url);
  });
  afterAll(async () => {
    await browser?.close();
    await stream?.close();
    await gw?.close();
    await nats?.close();
  });

  async function open(roles: string): Promise<{ page: Page; errors: string[] }> {
    const opened = await openPage(browser);
    await opened.page.goto(`${gw.httpUrl}/console/bridges`);
    await signIn(opened.page, `acc-${account.id}`, 'bea', roles);
    return opened;
  }

  it('lists bridges and rules with their status, counts, lag and last error; an operator disables and enables a rule, a viewer cannot', async () => {
    const good = await createRule(gw, account, { name: 'to jetstream', from: 'devices/+/telemetry', bridge_id: await createBridge(gw, account, { name: 'js', type: 'nats', url: nats!.url, subject_prefix: stream.prefix }) });
    const bad = await createRule(gw, account, { name: 'to nowhere', from: 'devices/+/telemetry', bridge_id: await createBridge(gw, account, { name: 'nowhere', type: 'nats', url: nats!.url, subject_prefix: 'nostream' }) });
    const device = await enrollDevice(gw, account);
    const client = await connectDevice(gw.mqttPort!, device);
    for (let i = 0; i < 3; i++) await client.publishAsync(`devices/${device.thingId}/telemetry`, `{"i":${i}}`, { qos: 1 });
    await client.endAsync();
    await waitFor(async () => (await rule(gw, account, bad)).status === 'FAILING' && (await rule(gw, account, good)).delivered === 3, 15_000, 'one failing, one delivered');

    const { page, errors } = await open('operator');
    await page.waitForSelector(`tr[data-rule-id="${bad}"][data-status="FAILING"]`);
    await textIs(page, `tr[data-rule-id="${good}"] .delivered`, '3');
    await textIs(page, `tr[data-rule-id="${bad}"] .lag-messages`, '3');
    expect(await page.textContent(`tr[data-rule-id="${bad}"] .last-error`)).toMatch(/refused/i);
    expect(await page.$$eval('#bridge-rows tr', (rows) => rows.length)).toBe(2);
    await page.click(`tr[data-rule-id="${good}"] button.toggle`);
    await page.waitForSelector(`tr[data-rule-id="${good}"][data-status="DISABLED"]`);
    expect((await rule(gw, account, good)).status).toBe('DISABLED');
    await page.click(`tr[data-rule-id="${good}"] button.toggle`);
    await page.waitForSelector(`tr[data-rule-id="${good}"][data-status="ENABLED"]`);
    await screenshot(page, 'bridges');
    expect(errors).toEqual([]);
    await page.close();

    const viewer = await open('viewer');
    await viewer.page.waitForSelector(`tr[data-rule-id="${good}"]`);
    expect(await viewer.page.$$('button.toggle')).toHaveLength(0);
    await viewer.page.close();
  });
});
