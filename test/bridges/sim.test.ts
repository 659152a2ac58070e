import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { spawn } from 'node:child_process';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { startTestGateway, type TestGateway } from '../helpers/gateway.js';
import { createAccount, type TestAccount } from '../helpers/accounts.js';
import type { SimBridgeReport } from '../../src/sim/bridge.js';
import type { SimSummary } from '../../src/sim/fleet.js';
import { natsSink } from './helpers.js';
import { compiled } from '../helpers/compiled.js';

const nats = await natsSink();
let gw: TestGateway;
let account: TestAccount;
const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'sim-bridge-'));
beforeAll(async () => {
  if (!nats) return;
  gw = await startTestGateway();
  account = await createAccount(gw);
});
afterAll(async () => {
  await gw?.close();
  await nats?.close();
  fs.rmSync(dir, { recursive: true, force: true });
});

function sim(args: string[]): Promise<{ code: number; out: string; err: string }> {
  return new Promise((resolve) => {
    const proc = spawn(process.execPath, [compiled('src/sim/cli.ts'), ...args], { env: { ...process.env, HTTP_PORT: '' } });
    let out = '';
    let err = '';
    proc.stdout.on('data', (d) => (out += d));
    proc.stderr.on('data', (d) => (err += d));
    proc.on('exit', (code) => resolve({ code: code ?? 1, out, err }));
  });
}

it.skipIf(!nats)("npm run sim -- --bridge nats://...: a stream, bridge and rule for the fleet's account; everything the devices sent reached the sink; removed at the end", async () => {
  const res = await sim([
    '--url', gw.httpUrl, '--token', account.operator, '--mqtt-host', '127.0.0.1', '--mqtt-port', String(gw.mqttPort), '--dir', dir,
    '--devices', '2', '--duration', '2', '--rate', '5', '--json', '-', '--no-progress', '--bridge', nats!.url, '--bridge-format', 'batch',
  ]);
  expect(res.code, res.err + res.out).toBe(0);
  const summary = JSON.parse(res.out) as SimSummary & { bridge: SimBridgeReport };
  // heartbeats are not telemetry: the rule forwards telemetry only
  expect(summary.telemetrySent).toBeGreaterThan(0);
  expect(summary.telemetrySent).toBeLessThan(summary.messagesSent);
  // batches: every event reached the stream, in at most as many messages
  expect(summary.bridge.messages).toBeLessThanOrEqual(summary.telemetrySent);
  expect(summary.bridge).toMatchObject({ format: 'batch', sent: summary.telemetrySent, received: summary.telemetrySent, devices: 2, rule: { status: 'ENABLED', delivered: summary.telemetrySent, lag: { messages: 0 } } });
  // the rule and bridge are gone with the run
  expect((await gw.http.get(`/api/v1/rules/${summary.bridge.ruleId}`, { token: account.viewer })).status).toBe(404);
  // a URL that is not NATS is refused with usage (exit 2)
  const bad = await sim(['--url', gw.httpUrl, '--bridge', 'amqp://localhost']);
  expect(bad.code).toBe(2);
  expect(bad.err).toMatch(/--bridge must be a NATS URL/);
  const badFormat = await sim(['--url', gw.httpUrl, '--bridge', nats!.url, '--bridge-format', 'csv']);
  expect(badFormat.code).toBe(2);
  expect(badFormat.err).toMatch(/--bridge-format must be event or batch/);
}, 90_000);
