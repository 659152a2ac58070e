import crypto from 'node:crypto';
import type { Browser, Page } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestGateway, type TestGateway } from '../helpers/gateway.js';
import { createAccount, type TestAccount } from '../helpers/accounts.js';
import { enrollDevice, type EnrolledDevice } from '../helpers/devices.js';
import { connectDevice } from '../broker/fixtures.js';
import { hasChromium, launchChromium, openPage, screenshot, signIn, textHas, textIs } from './browser.js';

/**
 * The fleet page (/console/things) in headless Chromium against a real gateway: the registry list,
 * filters, keyset paging, and connected/disconnected changes of a real MQTT device (mTLS) shown live.
 */
describe.skipIf(!hasChromium)('console fleet page in headless Chromium', () => {
  let gw: TestGateway;
  let account: TestAccount;
  let browser: Browser;
  let devices: EnrolledDevice[];
  let allIds: string[];

  beforeAll(async () => {
    gw = await startTestGateway();
    account = await createAccount(gw);
    browser = await launchChromium();
    devices = [];
    for (const serial of ['SN-FLEET-1', 'SN-FLEET-2', 'SN-FLEET-3']) devices.push(await enrollDevice(gw, account, { serial, model: 'thermo-1' }));
    const tagged = await gw.http.put(`/api/v1/things/${devices[1].thingId}/tags/pump`, undefined, { token: account.operator });
    expect(tagged.status, tagged.text).toBe(200);
    // older things of the account (fixture rows: the page only reads them), so the list has pages
    await gw.db.sql`
      insert into things (id, account_id, manufacturer, model, serial, lifecycle_state, created_at)
      select gen_random_uuid(), ${account.id}, 'Bulk', 'bulk-model', 'BULK-' || lpad(i::text, 3, '0'), 'ACTIVATED', timestamptz '2026-01-01T00:00:00Z' + i * interval '1 minute'
      from generate_series(1, 25) i`;
    allIds = (await gw.db.sql<{ id: string }[]>`select id from things where account_id = ${account.id}`).map((r) => r.id);
    expect(allIds).toHaveLength(28);
  });
  afterAll(async () => {
    await browser?.close();
    await gw?.close();
  });

  const rowIds = (page: Page) => page.$$eval('#rows tr', (trs) => trs.map((tr) => (tr as any).dataset.thingId as string));
  /** applies the filter form and waits for the list to answer */
  async function apply(page: Page) {
    const answered = page.waitForResponse((r) => r.url().includes('/api/v1/things?'));
    await page.click('#apply');
    await answered;
    await page.waitForFunction(() => (globalThis as any).document.getElementById('status').textContent === '');
  }
  async function turn(page: Page, button: '#next' | '#prev' | '#first', pageNo: number) {
    await page.click(button);
    await page.waitForSelector(`#page-info[data-page="${pageNo}"]`);
  }

  it('lists the things, pages through all of them with no gap or repeat, and filters', async () => {
    const { page, errors } = await openPage(browser);
    await page.goto(`${gw.httpUrl}/console/things`);
    await signIn(page, `acc-${account.id}`, 'fay', 'admin');
    await page.waitForSelector('#rows tr');
    // newest first by default: the three enrolled devices lead
    expect((await page.$$eval('#rows tr a.thing-link', (as) => as.map((a) => a.textContent))).slice(0, 3).sort()).toEqual(['SN-FLEET-1', 'SN-FLEET-2', 'SN-FLEET-3']);
    expect(await page.textContent(`tr[data-thing-id="${devices[1].thingId}"] .tag`)).toBe('pump');

    await page.selectOption('#f-limit', '10');
    await apply(page);
    const pages: string[][] = [await rowIds(page)];
    expect(await page.isDisabled('#prev')).toBe(true);
    await turn(page, '#next', 2);
    pages.push(await rowIds(page));
    await turn(page, '#next', 3);
    pages.push(await rowIds(page));
    expect(pages.map((p) => p.length)).toEqual([10, 10, 8]);
    expect(await page.isDisabled('#next')).toBe(true);
    const seen = pages.flat();
    expect(new Set(seen).size).toBe(28);
    expect([...seen].sort()).toEqual([...allIds].sort());
    await turn(page, '#prev', 2);
    expect(await rowIds(page)).toEqual(pages[1]);
    await turn(page, '#first', 1);
    expect(await rowIds(page)).toEqual(pages[0]);

    // a filter: things tagged pump (kept in the URL, so a reload keeps it)
    await page.fill('#f-tags', 'pump');
    await apply(page);
    expect(await rowIds(page)).toEqual([devices[1].thingId]);
    expect(new URL(page.url()).searchParams.get('tags')).toBe('pump');
    await page.reload();
    await page.waitForSelector(`#rows tr[data-thing-id="${devices[1].thingId}"]`);
    expect(await page.inputValue('#f-tags')).toBe('pump');
    expect(await rowIds(page)).toEqual([devices[1].thingId]);

    // a filter nothing matches
    await page.fill('#f-tags', '');
    await page.selectOption('#f-state', 'ANNIHILATED');
    await apply(page);
    expect(await rowIds(page)).toEqual([]);
    expect(await page.isVisible('#empty')).toBe(true);
    expect(await page.textContent('#empty')).toBe('No things match these filters.');
    expect(errors).toEqual([]);
    await page.close();
  });

  it('searches by serial or thing-id prefix, shows the counts, and Reset clears every filter', async () => {
    const { page, errors } = await openPage(browser);
    await page.goto(`${gw.httpUrl}/console/things`);
    await signIn(page, `acc-${account.id}`, 'fay', 'viewer');
    await page.waitForSelector('#rows tr');
    await textIs(page, '#total', '28 things');
    expect(await page.textContent('#page-info')).toBe('Page 1 · things 1–25 of 28');

    await page.fill('#f-q', 'sn-fleet');
    await apply(page);
    expect((await rowIds(page)).sort()).toEqual(devices.map((d) => d.thingId).sort());
    await textIs(page, '#total', '3 things match');
    expect(await page.textContent('#page-info')).toBe('Page 1 · things 1–3 of 3');
    expect(new URL(page.url()).searchParams.get('q')).toBe('sn-fleet');

    await page.fill('#f-q', devices[2].thingId.slice(0, 8));
    await page.press('#f-q', 'Enter');
    await page.waitForFunction((id) => (globalThis as any).document.querySelectorAll('#rows tr').length === 1 && (globalThis as any).document.querySelector(`#rows tr[data-thing-id="${id}"]`), devices[2].thingId);
    await textIs(page, '#total', '1 thing match');

    await page.selectOption('#f-state', 'ANNIHILATED');
    await apply(page);
    expect(await rowIds(page)).toEqual([]);
    await textIs(page, '#total', '0 things match');

    const answered = page.waitForResponse((r) => r.url().includes('/api/v1/things?'));
    await page.click('#reset-filters');
    await answered;
    await textIs(page, '#total', '28 things');
    expect(await page.inputValue('#f-q')).toBe('');
    expect(await page.inputValue('#f-state')).toBe('');
    expect(await page.inputValue('#f-limit')).toBe('25');
    expect(new URL(page.url()).search).toBe('');
    expect(await rowIds(page)).toHaveLength(25);
    expect(errors).toEqual([]);
    await page.close();
  });

  it('shows a real device connecting and disconnecting over mTLS live, without a reload', async () => {
    const { page, errors } = await openPage(browser);
    await page.goto(`${gw.httpUrl}/console/things`);
    await signIn(page, `acc-${account.id}`, 'fay', 'viewer');
    await textIs(page, '#live', 'live updates on');
    const cell = `tr[data-thing-id="${devices[0].thingId}"] td.conn`;
    await textIs(page, cell, 'offline');
    // a marker on the window: it survives only if the page is never reloaded
    await page.evaluate(() => { (globalThis as any).notReloaded = true; });

    const client = await connectDevice(gw.mqttPort!, devices[0]);
    await page.waitForSelector(`${cell}.connected`);
    expect(await page.textContent(cell)).toBe('connected');
    expect(await page.textContent(`tr[data-thing-id="${devices[0].thingId}"] td.last-seen`)).not.toBe('never');
    await screenshot(page, 'fleet');

    // the connected filter agrees with what the stream showed
    await page.selectOption('#f-connected', 'true');
    await apply(page);
    expect(await rowIds(page)).toEqual([devices[0].thingId]);

    await client.endAsync();
    await page.waitForSelector(`${cell}:not(.connected)`);
    expect(await page.textContent(cell)).toBe('offline');
    expect(await page.evaluate(() => (globalThis as any).notReloaded)).toBe(true);
    expect(errors).toEqual([]);
    await page.close();
  });

  it('an account with no things: an empty list with a hint, no error', async () => {
    const empty = await createAccount(gw);
    const { page, errors } = await openPage(browser);
    await page.goto(`${gw.httpUrl}/console/things`);
    await signIn(page, `acc-${empty.id}`, 'gus');
    await textHas(page, '#empty', 'This account has no things yet');
    expect(await page.isVisible('#things')).toBe(false);
    expect(await page.isVisible('#pager')).toBe(false);
    await textIs(page, '#live', 'live updates on');
    await screenshot(page, 'fleet-empty');
    // a device page of a thing this account does not have
    await page.goto(`${gw.httpUrl}/console/things/${crypto.randomUUID()}`);
    await page.waitForSelector('#not-found:not(.hidden)');
    expect(await page.textContent('#not-found')).toContain('was not found in this account');
    expect(errors).toEqual([]);
    await page.close();
  });
});
