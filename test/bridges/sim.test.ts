import { afterAll, beforeAll, expect, it } from 'vitest';
import { startTestGateway, type TestGateway } from '../helpers/gateway.js';
import { createAccount, type TestAccount } from '../helpers/accounts.js';
import { enrollDevice } from '../helpers/devices.js';
import { connectDevice } from '../broker/fixtures.js';
import { formatBridgeReport, startSimBridge } from '../../src/sim/bridge.js';
import { natsSink } from './helpers.js';
import { waitFor } from '../helpers/wait.js';

const nats = await natsSink();
let gw: TestGateway;
let account: TestAccount;
beforeAll(async () => {
  if (!nats) return;
  gw = await startTestGateway();
  account = await createAccount(gw);
});
afterAll(async () => { await gw?.close(); await nats?.close(); });

it.skipIf(!nats)("the simulator's bridge: a stream, bridge and rule for the fleet, and what reached the sink", async () => {
  const bridge = await startSimBridge({ gatewayUrl: gw.httpUrl, token: account.operator, natsUrl: nats!.url });
  const devices = [await enrollDevice(gw, account), await enrollDevice(gw, account)];
  for (const d of devices) {
    const c = await connectDevice(gw.mqttPort!, d);
    for (let i = 0; i < 5; i++) await c.publishAsync(`devices/${d.thingId}/telemetry`, `{"i":${i}}`, { qos: 1 });
    await c.endAsync();
  }
  const report = await waitFor(async () => { const r = await bridge.report(10); return r.received === 10 ? r : undefined; }, 20_000, 'ten messages at the sink');
  expect(report).toMatchObject({ sent: 10, received: 10, devices: 2, rule: { status: 'ENABLED', delivered: 10, lag: { messages: 0 } } });
  expect(formatBridgeReport(report)).toMatch(/10 messages reached the sink from 2 devices \(the devices sent 10\)/);
  await bridge.close();
  expect((await gw.http.get(`/api/v1/rules/${bridge.ruleId}`, { token: account.viewer })).status).toBe(404);
});
