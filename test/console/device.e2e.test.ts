import type { Browser } from 'playwright-core';
import type { MqttClient } from 'mqtt';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestGateway, type TestGateway } from '../helpers/gateway.js';
import { createAccount, type TestAccount } from '../helpers/accounts.js';
import { enrollDevice, type EnrolledDevice } from '../helpers/devices.js';
import { waitFor } from '../helpers/wait.js';
import { closed, connectDevice, nextMessage } from '../broker/fixtures.js';
import { hasChromium, launchChromium, openPage, screenshot, signIn, textHas, textIs } from './browser.js';

/**
 * The device page (/console/things/{id}) in headless Chromium with a real MQTT device over mTLS:
 * identity and certificate, live telemetry on the chart, history, a desired-state edit reaching the
 * device, commands with and without a time to live answered by the device, revoke with confirmation.
 */
describe.skipIf(!hasChromium)('console device page in headless Chromium', () => {
  let gw: TestGateway;
  let account: TestAccount;
  let browser: Browser;
  let device: EnrolledDevice;
  let client: MqttClient;
  const commands: { name: string; payload: unknown }[] = [];

  beforeAll(async () => {
    gw = await startTestGateway();
    account = await createAccount(gw);
    browser = await launchChromium();
    device = await enrollDevice(gw, account, { serial: 'SN-DEV-1', model: 'thermo-1' });
    client = await connectDevice(gw.mqttPort!, device);
    // the device answers every command with an echo
    client.on('message', (topic, payload, packet) => {
      if (topic !== `devices/${device.thingId}/commands`) return;
      const request = JSON.parse(payload.toString());
      commands.push({ name: request.name, payload: request.payload });
      client.publish(packet.properties!.responseTopic!, JSON.stringify({ ok: true, echo: request.payload ?? null }), { qos: 1, properties: { correlationData: packet.properties!.correlationData } });
    });
    await client.subscribeAsync([`devices/${device.thingId}/commands`, `devices/${device.thingId}/twin/desired`], { qos: 1 });
    await client.publishAsync(`devices/${device.thingId}/telemetry`, JSON.stringify({ temperature: 20, status: 'ok' }), { qos: 1 });
    await client.publishAsync(`devices/${device.thingId}/twin/reported`, JSON.stringify({ firmware: '1.0.3' }), { qos: 1 });
  });
  afterAll(async () => {
    await client?.endAsync().catch(() => {});
    await browser?.close();
    await gw?.close();
  });

  const api = (path: string) => gw.http.get(`/api/v1/things/${device.thingId}${path}`, { token: account.viewer });

  it('shows the device, its live telemetry and history; edits the desired state; sends commands; revokes after confirmation', async () => {
    const detail = await waitFor(async () => {
      const d = (await api('')).body;
      return d.connected && d.telemetry?.values?.temperature === 20 && d.twin?.reported_version === 1 ? d : undefined;
    }, 10_000, 'connected device with telemetry and reported state');
    const { page, errors } = await openPage(browser);
    await page.goto(`${gw.httpUrl}/console/things/${device.thingId}`);
    await signIn(page, `acc-${account.id}`, 'hal', 'operator');
    await page.waitForSelector('#device:not(.hidden)');

    // identity, certificate, connectivity, twin
    expect(await page.textContent('#identity .serial')).toBe('SN-DEV-1');
    expect(await page.textContent('#identity .thing-id')).toBe(device.thingId);
    expect(await page.textContent('#title')).toBe('thermo-1 · SN-DEV-1');
    expect(await page.textContent('#certificate .cert-serial')).toBe(detail.certificate.serial);
    expect(await page.textContent('#certificate .cert-expiry')).toContain('days');
    expect(await page.textContent('#conn-text')).toBe('connected');
    await textHas(page, '#reported', '"firmware": "1.0.3"');
    expect(await page.textContent('.value[data-key="temperature"] b')).toBe('20');

    // live telemetry from the device: the value and the chart follow
    await textIs(page, '#live', 'live');
    await client.publishAsync(`devices/${device.thingId}/telemetry`, JSON.stringify({ temperature: 21.5 }), { qos: 1 });
    await client.publishAsync(`devices/${device.thingId}/telemetry`, JSON.stringify({ temperature: 22.25, humidity: 40, ratio: 0.1 + 0.2 }), { qos: 1 });
    await textIs(page, '.value[data-key="temperature"] b', '22.25');
    // shown with the digits it was sent with, without binary-float noise (0.30000000000000004)
    expect(await page.textContent('.value[data-key="ratio"] b')).toBe('0.3');
    await page.waitForSelector('#live-chart polyline[data-series="temperature"][data-count="2"]');
    expect(await page.textContent('#live-chart .legend')).toBe('temperature: 22.25');
    // one key at a time (their scales differ): every numeric key can be chosen
    expect(await page.$$eval('#live-key option', (os) => os.map((o) => o.textContent))).toEqual(['humidity', 'ratio', 'temperature']);
    await page.selectOption('#live-key', 'humidity');
    await page.waitForSelector('#live-chart polyline[data-series="humidity"][data-count="1"]', { state: 'attached' });
    await page.selectOption('#live-key', 'temperature');
    // device data is text, never markup
    await client.publishAsync(`devices/${device.thingId}/telemetry`, JSON.stringify({ '<img src=x onerror=alert(1)>': '<b>bold?</b>' }), { qos: 1 });
    await page.waitForSelector('.value[data-key="<img src=x onerror=alert(1)>"]');
    expect(await page.textContent('.value[data-key="<img src=x onerror=alert(1)>"] b')).toBe('<b>bold?</b>');
    expect(await page.locator('#values img, #values b b').count()).toBe(0);

    // history of the stored points (raw, then downsampled)
    await waitFor(async () => (await api('/telemetry?key=temperature')).body.points?.length === 3, 10_000, 'three temperature points stored');
    await page.fill('#h-key', 'temperature');
    await page.click('#h-load');
    await page.waitForSelector('#history-chart[data-points="3"]');
    expect(await page.textContent('#h-status')).toBe('3 points');
    await screenshot(page, 'device-history-raw');
    await page.selectOption('#h-bucket', '1h');
    await page.click('#h-load');
    await textHas(page, '#h-status', 'of 1h');
    expect(Number(await page.getAttribute('#history-chart', 'data-points'))).toBeGreaterThanOrEqual(1);

    // desired state: edited on the page, received by the device, stored on the twin
    const desiredSent = nextMessage(client, `devices/${device.thingId}/twin/desired`);
    await page.fill('#desired', '{ "led": "on", "interval": 5 }');
    await page.click('#desired-save');
    expect(JSON.parse((await desiredSent).payload.toString())).toEqual({ version: 1, desired: { led: 'on', interval: 5 } });
    await textHas(page, '#desired-result', 'saved as version 1');
    expect((await api('/twin')).body.desired).toMatchObject({ version: 1, state: { led: 'on', interval: 5 } });
    await page.fill('#desired', '[1, 2]');
    await page.click('#desired-save');
    await textIs(page, '#desired-result', 'the desired state must be a JSON object');

    // a command without a time to live: the device's reply is shown
    await page.fill('#c-name', 'blink');
    await page.fill('#c-payload', '{ "times": 2 }');
    await page.click('#c-send');
    await page.waitForSelector('#c-status[data-status="completed"]');
    expect(JSON.parse((await page.textContent('#c-result'))!)).toEqual({ ok: true, echo: { times: 2 } });
    // with a time to live: accepted, then followed to its final status
    await page.fill('#c-name', 'reboot');
    await page.fill('#c-payload', '');
    await page.fill('#c-ttl', '60');
    await page.click('#c-send');
    await page.waitForSelector('#c-status[data-status="succeeded"]', { timeout: 20_000 });
    expect(JSON.parse((await page.textContent('#c-result'))!)).toEqual({ ok: true, echo: null });
    expect(commands.map((c) => c.name)).toEqual(['blink', 'reboot']);
    const stored = (await api('/commands')).body.items;
    expect(stored.map((c: any) => [c.name, c.status])).toEqual([['reboot', 'succeeded']]);
    await screenshot(page, 'device');

    // revoke: cancelling the confirmation changes nothing; confirming revokes and disconnects
    await page.click('#revoke');
    await page.waitForSelector('#revoke-dialog[open]');
    expect(await page.textContent('#revoke-name')).toBe('SN-DEV-1');
    await page.click('#revoke-cancel');
    await page.waitForSelector('#revoke-dialog', { state: 'hidden' });
    expect((await api('')).body.revoked).toBe(false);
    const gone = closed(client);
    await page.click('#revoke');
    await page.click('#revoke-confirm');
    await textHas(page, '#revoke-result', 'revoked: 1 certificate(s) on the CRL; the device was disconnected');
    await gone;
    await textIs(page, '#conn-text', 'offline');
    await textHas(page, '#identity .revoked-flag', 'yes');
    expect(await page.isDisabled('#revoke')).toBe(true);
    expect(await page.isVisible('#revoked-badge')).toBe(true);
    expect((await api('')).body).toMatchObject({ revoked: true, connected: false });
    await screenshot(page, 'device-revoked');
    expect(errors).toEqual([]);
    await page.close();
  });

  it('a viewer sees the page but is offered no Send, Save or Revoke (the API refuses them to a viewer anyway)', async () => {
    const { page, errors } = await openPage(browser);
    await page.goto(`${gw.httpUrl}/console/things/${device.thingId}`);
    await signIn(page, `acc-${account.id}`, 'ivy', 'viewer');
    await page.waitForSelector('#device:not(.hidden)');
    await page.waitForSelector('#reported');
    for (const id of ['#c-send', '#desired-save', '#revoke', '#command-form', '#desired-form']) expect(await page.isVisible(id), id).toBe(false);
    expect(await page.isVisible('#values')).toBe(true);
    expect(await page.textContent('#who')).toContain('viewer');
    expect(errors).toEqual([]);
    await page.close();
  });
});
