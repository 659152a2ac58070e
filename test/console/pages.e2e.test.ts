import crypto from 'node:crypto';
import type { Browser, Page } from 'playwright-core';
import type { MqttClient } from 'mqtt';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestGateway, type TestGateway } from '../helpers/gateway.js';
import { createAccount, type TestAccount } from '../helpers/accounts.js';
import { enrollDevice, type EnrolledDevice } from '../helpers/devices.js';
import { connectDevice } from '../broker/fixtures.js';
import { publisherToken } from '../notifications/helpers.js';
import { hasChromium, launchChromium, openPage, screenshot, signIn, textHas, textIs } from './browser.js';

/**
 * The OTA, provisioning, access and sessions pages, and what each role is offered, in headless
 * Chromium against a real gateway (one browser, one gateway for all of them).
 */
describe.skipIf(!hasChromium)('console OTA, provisioning, access and sessions pages', () => {
  let gw: TestGateway;
  let account: TestAccount;
  let browser: Browser;
  let devices: EnrolledDevice[];
  let client: MqttClient;

  beforeAll(async () => {
    gw = await startTestGateway();
    account = await createAccount(gw, { capabilities: ['manage_ota_rollouts', 'enroll_things'] });
    browser = await launchChromium();
    devices = [await enrollDevice(gw, account, { serial: 'SN-PAGE-1', model: 'FFF1:8001' }), await enrollDevice(gw, account, { serial: 'SN-PAGE-2', model: 'FFF1:8001' })];
    await enrollDevice(gw, account, { serial: 'SN-OTHER-1', model: 'other-model' });
    client = await connectDevice(gw.mqttPort!, devices[0]);
  });
  afterAll(async () => {
    await client?.endAsync();
    await browser?.close();
    await gw?.close();
  });

  async function open(path: string, sub: string, roles: string): Promise<{ page: Page; errors: string[] }> {
    const opened = await openPage(browser);
    opened.page.on('dialog', (d) => void d.accept());
    await opened.page.goto(`${gw.httpUrl}${path}`);
    await signIn(opened.page, `acc-${account.id}`, sub, roles);
    return opened;
  }
  const rowState = (page: Page, id: string, state: string) => page.waitForSelector(`tr[data-rollout-id="${id}"][data-state="${state}"]`);

  it('OTA: a filter with a live preview, a rollout from it, its groups, start, pause, resume, cancel; a viewer is offered none of it', async () => {
    const { page, errors } = await open('/console/ota', 'olga', 'operator');
    await page.fill('#tf-name', 'page sensors');
    await page.fill('#tf-model', 'FFF1:8001');
    await textIs(page, '#tf-count', '2 things');
    expect(await page.textContent('#tf-sample')).toContain('SN-PAGE-');
    await page.selectOption('#tf-connected', 'true');
    await textIs(page, '#tf-count', '1 thing');
    await page.selectOption('#tf-connected', '');
    await textIs(page, '#tf-count', '2 things');
    await page.click('#tf-save');
    await textHas(page, '#tf-result', 'saved page sensors');
    await page.waitForSelector('#filter-rows tr');

    await page.fill('#ro-name', 'firmware 2');
    await page.fill('#ro-version', '2.0.0');
    await page.fill('#ro-url', 'https://files.example.com/fw-2.0.0.bin');
    await page.fill('#ro-sha', 'ab'.repeat(32));
    await page.fill('#ro-size', '1024');
    await page.fill('#ro-groups', '2');
    await page.click('#ro-create');
    await textHas(page, '#ro-result', '2 targets in 2 groups');
    const rollout = await page.waitForSelector('tr[data-rollout-id][data-state="READY"]');
    const id = (await rollout.getAttribute('data-rollout-id'))!;
    expect(await page.$$eval(`tr[data-rollout-id="${id}"] .group`, (gs) => gs.length)).toBe(2);
    for (const [verb, state] of [['start', 'RUNNING'], ['pause', 'PAUSED'], ['resume', 'RUNNING'], ['cancel', 'CANCELLED']] as const) {
      await page.click(`tr[data-rollout-id="${id}"] button[data-verb="${verb}"]`);
      await rowState(page, id, state);
    }
    expect(await page.$$(`tr[data-rollout-id="${id}"] button`)).toHaveLength(0);
    await screenshot(page, 'ota');
    expect(errors).toEqual([]);
    await page.close();

    const viewer = await open('/console/ota', 'vic', 'viewer');
    await viewer.page.waitForSelector(`tr[data-rollout-id="${id}"]`);
    expect(await viewer.page.isVisible('#filter-form')).toBe(false);
    expect(await viewer.page.isVisible('#rollout-form')).toBe(false);
    expect(await viewer.page.$$('#rollout-rows button, #filter-rows button')).toHaveLength(0);
    expect(viewer.errors).toEqual([]);
    await viewer.page.close();
  });

  it('provisioning: a claim group and an enrollment token with their secrets shown once, a factory service rotated, runs listed; a viewer reads only', async () => {
    const model = await gw.http.post('/api/v1/models', { vid: 'FFF9', pid: '00A1', name: 'Page model', provisioning_method: 'none' }, { token: account.admin });
    expect(model.status, model.text).toBe(201);
    const service = await gw.http.post('/api/v1/factory-services', { role: 'provision', model_id: model.body.id, endpoint_url: 'https://factory.example.com/hooks' }, { token: account.admin });
    expect(service.status, service.text).toBe(201);

    const { page, errors } = await open('/console/provisioning', 'ada', 'admin');
    await page.fill('#cg-name', 'line 9');
    await page.fill('#cg-max', '7');
    await page.click('#cg-create');
    await page.waitForSelector('#secret-once:not(.hidden)');
    expect(await page.textContent('#secret-title')).toContain('line 9');
    expect((await page.textContent('#secret-value'))!.length).toBeGreaterThan(20);
    await page.waitForFunction(() => [...(globalThis as any).document.querySelectorAll('#group-rows tr')].some((tr: any) => tr.textContent.includes('line 9') && tr.textContent.includes('0 / 7')));
    await page.click('#secret-dismiss');
    expect(await page.textContent('#secret-value')).toBe('');

    await page.fill('#et-manufacturer', 'Acme');
    await page.fill('#et-model', 'FFF1:8001');
    await page.fill('#et-serial', 'SN-TOKEN-1');
    await page.click('#et-create');
    await page.waitForSelector('#secret-once:not(.hidden)');
    expect(await page.textContent('#secret-title')).toContain('SN-TOKEN-1');
    await page.click('#secret-dismiss');

    const row = `tr[data-service-id="${service.body.id}"]`;
    await page.waitForSelector(`${row} button.rotate`);
    await page.click(`${row} button.rotate`);
    await page.waitForSelector('#secret-once:not(.hidden)');
    expect(await page.textContent('#secret-title')).toContain(service.body.access_key_id);
    await page.waitForSelector(`${row} button.confirm-rotation`);
    await page.click(`${row} button.confirm-rotation`);
    await page.waitForSelector(`${row} button.rotate`);
    await textHas(page, '#runs-empty', 'No provisioning runs');
    await screenshot(page, 'provisioning');
    expect(errors).toEqual([]);
    await page.close();

    const viewer = await open('/console/provisioning', 'vic', 'viewer');
    await viewer.page.waitForSelector(`${row}`);
    await viewer.page.waitForSelector('#group-rows tr');
    expect(await viewer.page.isVisible('#group-form')).toBe(false);
    expect(await viewer.page.isVisible('#token-form')).toBe(false);
    expect(await viewer.page.$$('#service-rows button, #group-rows button')).toHaveLength(0);
    expect(viewer.errors).toEqual([]);
    await viewer.page.close();
  });

  it('access: keys created (secret once), deactivated and deleted, roles assigned to a user; not offered to an operator', async () => {
    const { page, errors } = await open('/console/iam', 'ada', 'admin');
    await textIs(page, '#status', '');
    await page.fill('#k-principal', 'bob');
    await page.fill('#k-description', 'pipeline');
    await page.click('#k-create');
    await page.waitForSelector('#secret-once:not(.hidden)');
    expect(await page.textContent('#secret-value')).toHaveLength(54);
    const key = await page.waitForSelector('#key-rows tr[data-status="ACTIVE"]');
    const keyId = (await key.getAttribute('data-key-id'))!;
    await page.click(`tr[data-key-id="${keyId}"] button.toggle`);
    await page.waitForSelector(`tr[data-key-id="${keyId}"][data-status="INACTIVE"]`);

    await page.waitForSelector('tr[data-principal="bob"]');
    await page.fill('#u-principal', 'bob');
    await page.fill('#u-roles', 'operator');
    await page.click('#u-assign');
    await textIs(page, 'tr[data-principal="bob"] .assigned', 'operator');
    expect(await page.textContent('tr[data-principal="bob"] .key-roles')).toBe('operator');

    await page.click(`tr[data-key-id="${keyId}"] button.delete`);
    await page.waitForSelector(`tr[data-key-id="${keyId}"]`, { state: 'detached' });
    const left = await gw.http.get(`/iam/v1/accounts/${account.id}/credentials`, { token: account.admin });
    expect(left.body).toEqual([]);
    await screenshot(page, 'iam');
    expect(errors).toEqual([]);
    await page.close();

    const operator = await open('/console/iam', 'olga', 'operator');
    await operator.page.waitForSelector('#not-admin:not(.hidden)');
    expect(await operator.page.isVisible('#iam')).toBe(false);
    expect(operator.errors).toEqual([]);
    await operator.page.close();
  });

  it('sessions: the connected device with its protocol and since, live; no kick for a viewer, an operator disconnects a device; the device page offers a viewer no Send, Save or Revoke; the badge is live on every page', async () => {
    const { page, errors } = await open('/console/sessions', 'vic', 'viewer');
    const row = `tr[data-thing-id="${devices[0].thingId}"]`;
    await page.waitForSelector(row);
    await textIs(page, '#total', '1 connected');
    expect(await page.textContent(`${row} .protocol`)).toBe('MQTT 5');
    // the node holding the session (NODE_ID; a test gateway's default is hostname-pid)
    expect(await page.textContent(`${row} .node`)).toMatch(/-\d+$/);
    expect(await page.textContent(`${row} .since`)).not.toBe('—');
    expect(await page.$$(`${row} button`)).toHaveLength(0);
    await textIs(page, '#live', 'live updates on');

    // the badge follows a notification published while this page is open
    const before = Number(await page.textContent('#badge'));
    const published = await gw.http.post('/api/notifications/publish', {
      channel: ['in_app'], scope: 'tenant', to: { subscriberId: account.id }, template: 'general/message', severity: 'info', data: { subject: 'hello', message: 'live badge' },
    }, { token: await publisherToken(gw) });
    expect(published.status, published.text).toBe(201);
    await textIs(page, '#badge', String(before + 1));

    const second = await connectDevice(gw.mqttPort!, devices[1]);
    await page.waitForSelector(`tr[data-thing-id="${devices[1].thingId}"]`);
    await second.endAsync();
    await page.waitForSelector(`tr[data-thing-id="${devices[1].thingId}"]`, { state: 'detached' });
    await screenshot(page, 'sessions');

    // an operator of the account is offered the kick (DELETE /api/v1/things/{id}/session); the device is dropped
    const kicked = await connectDevice(gw.mqttPort!, devices[1], { reconnectPeriod: 0 });
    const closed = new Promise<void>((resolve) => kicked.once('close', () => resolve()));
    const operator = await open('/console/sessions', 'olga', 'operator');
    const kickRow = `tr[data-thing-id="${devices[1].thingId}"]`;
    await operator.page.click(`${kickRow} button.kick`);
    await closed;
    await operator.page.waitForSelector(kickRow, { state: 'detached' });
    expect(operator.errors).toEqual([]);
    await operator.page.close();
    // not connected: 404; another account's thing: 404; a viewer: 403
    const again = await gw.http.delete(`/api/v1/things/${devices[1].thingId}/session`, { token: account.admin });
    expect(again.status, again.text).toBe(404);
    expect(again.body.type).toMatch(/device-not-connected$/);
    const other = await createAccount(gw);
    expect((await gw.http.delete(`/api/v1/things/${devices[0].thingId}/session`, { token: other.admin })).status).toBe(404);
    expect((await gw.http.delete(`/api/v1/things/${devices[0].thingId}/session`, { token: await gw.token({ realm: `acc-${account.id}`, sub: 'vic', roles: ['viewer'] }) })).status).toBe(403);

    await page.goto(`${gw.httpUrl}/console/things/${devices[0].thingId}`);
    await page.waitForSelector('#device:not(.hidden)');
    for (const id of ['#c-send', '#desired-save', '#revoke']) expect(await page.isVisible(id), id).toBe(false);
    expect(errors).toEqual([]);
    await page.close();
    void crypto;
  });
});
