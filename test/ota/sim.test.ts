import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { spawn } from 'node:child_process';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestGateway, type TestGateway } from '../helpers/gateway.js';
import { createAccount, type TestAccount } from '../helpers/accounts.js';
import { waitFor } from '../helpers/wait.js';
import type { SimSummary } from '../../src/sim/fleet.js';
import { control, createFilter, createRollout, rolloutOf } from './helpers.js';
import { compiled } from '../helpers/compiled.js';

let gw: TestGateway;
let account: TestAccount;
const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'sim-ota-'));

beforeAll(async () => {
  gw = await startTestGateway();
  account = await createAccount(gw, { capabilities: ['manage_ota_rollouts'] });
});
afterAll(async () => {
  await gw?.close();
  fs.rmSync(dir, { recursive: true, force: true });
});

describe('the fleet simulator takes part in OTA rollouts', () => {
  it('its devices apply the update, report progress, and fail the share given by --ota-fail-rate', async () => {
    const proc = spawn(process.execPath, [compiled('src/sim/cli.ts'), '--url', gw.httpUrl, '--mqtt-host', '127.0.0.1', '--mqtt-port', String(gw.mqttPort),
      '--dir', dir, '--json', '-', '--no-progress', '--account', account.id, '--devices', '3', '--duration', '15', '--rate', '1',
      '--model', 'SIM-OTA', '--prefix', 'OTA', '--ota-fail-rate', '1', '--ota-step-ms', '0']);
    let out = '';
    let stderr = '';
    proc.stdout.on('data', (d) => (out += d));
    proc.stderr.on('data', (d) => (stderr += d));
    const exited = new Promise<number>((resolve) => proc.on('exit', (code) => resolve(code ?? 1)));
    try {
      await waitFor(async () => (await gw.http.get('/api/v1/things?model=SIM-OTA&connected=true', { token: account.viewer })).body.items?.length === 3, 60_000, 'simulated devices connected', 200);
      const filter = await createFilter(gw, account, { model: 'SIM-OTA' });
      const rollout = await createRollout(gw, account, filter.id, { groups: 1, success: 100, error: 50 });
      expect((await control(gw, account, rollout.id, 'start')).status).toBe(200);
      await waitFor(async () => (await rolloutOf(gw, account, rollout.id)).state === 'STOPPED', 30_000, 'rollout stopped', 200);
      await waitFor(async () => (await rolloutOf(gw, account, rollout.id)).actions.failed === 3, 30_000, 'all failed', 200);
    } finally {
      const code = await exited;
      const summary = JSON.parse(out) as SimSummary;
      expect(summary, stderr).toMatchObject({ connected: 3, otaFailed: 3, otaUpdated: 0, errorCount: 0 });
      expect(code).toBe(0);
    }
  }, 120_000);
});
