import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { spawn } from 'node:child_process';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestGateway, type TestGateway } from '../helpers/gateway.js';
import type { SimSummary } from '../../src/sim/fleet.js';

let gw: TestGateway;
const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'sim-'));

beforeAll(async () => {
  gw = await startTestGateway();
});
afterAll(async () => {
  await gw?.close();
  fs.rmSync(dir, { recursive: true, force: true });
});

/** `npm run sim -- ...` as a child process (the gateway runs in this one). */
function sim(args: string[]): Promise<{ code: number; summary?: SimSummary; stderr: string }> {
  return new Promise((resolve) => {
    const proc = spawn('node_modules/.bin/tsx', ['src/sim/cli.ts', '--url', gw.httpUrl, '--mqtt-host', '127.0.0.1', '--mqtt-port', String(gw.mqttPort), '--dir', dir, '--json', '-', '--no-progress', ...args]);
    let out = '';
    let stderr = '';
    proc.stdout.on('data', (d) => (out += d));
    proc.stderr.on('data', (d) => (stderr += d));
    proc.on('exit', (code) => {
      let summary: SimSummary | undefined;
      try { summary = JSON.parse(out); } catch { /* reported below */ }
      resolve({ code: code ?? 1, summary, stderr: stderr + out });
    });
  });
}

describe('fleet simulator', () => {
  it('enrolls through the HTTP APIs, connects over MQTT 5 mTLS, sends traffic; a second run reuses the credentials and revokes some', async () => {
    const first = await sim(['--devices', '4', '--duration', '2', '--rate', '5']);
    expect(first.summary, first.stderr).toBeDefined();
    expect(first.summary!.errors).toEqual({});
    expect(first.summary).toMatchObject({ devices: 4, enrolled: 4, reused: 0, connected: 4, errorCount: 0 });
    expect(first.summary!.messagesSent).toBeGreaterThan(4);
    expect(first.summary!.connectLatencyMs.p50).toBeGreaterThan(0);
    expect(first.code).toBe(0);
    expect(fs.readdirSync(path.join(dir, 'devices'))).toHaveLength(4);
    const [row] = await gw.db.sql<{ n: number }[]>`select count(*)::int as n from device_telemetry_latest`;
    expect(row.n).toBe(4);

    const second = await sim(['--devices', '4', '--duration', '2', '--rate', '2', '--scenario', 'revoke', '--revoke', '1']);
    if (!second.summary) throw new Error(second.stderr);
    expect(second.summary.errors).toEqual({});
    expect(second.summary).toMatchObject({ enrolled: 0, reused: 4, connected: 4, revoked: 1, revokedReconnectsRefused: 1, errorCount: 0 });
    expect(fs.readdirSync(path.join(dir, 'devices'))).toHaveLength(3);
  });

  it('reconnect storm: every device drops and reconnects at once, over MQTT 3.1.1 too', async () => {
    const res = await sim(['--devices', '3', '--duration', '2', '--rate', '2', '--scenario', 'reconnect-storm', '--protocol', '4', '--prefix', 'STORM']);
    if (!res.summary) throw new Error(res.stderr);
    expect(res.summary).toMatchObject({ devices: 3, enrolled: 3, connected: 3, errorCount: 0 });
    expect(res.summary.reconnectLatencyMs.p50).toBeGreaterThan(0);
  });

  it('rejects bad options with usage', async () => {
    const res = await sim(['--scenario', 'chaos']);
    expect(res.code).toBe(2);
    expect(res.stderr).toMatch(/--scenario must be steady, reconnect-storm or revoke/);
  });
});
