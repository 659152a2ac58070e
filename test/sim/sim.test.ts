import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { spawn } from 'node:child_process';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestGateway, type TestGateway } from '../helpers/gateway.js';
import type { SimSummary } from '../../src/sim/fleet.js';
import { freePort } from '../../src/db/embedded.js';
import { compiled } from '../helpers/compiled.js';

let gw: TestGateway;
const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'sim-'));

beforeAll(async () => {
  gw = await startTestGateway();
});
afterAll(async () => {
  await gw?.close();
  fs.rmSync(dir, { recursive: true, force: true });
});

/** A CLI as a child process (the gateway runs in this one). */
function run(script: string, args: string[], env: Record<string, string> = {}): Promise<{ code: number; out: string; err: string }> {
  return new Promise((resolve) => {
    const proc = spawn(process.execPath, [compiled(script), ...args], { env: { ...process.env, HTTP_PORT: '', ...env } });
    let out = '';
    let err = '';
    proc.stdout.on('data', (d) => (out += d));
    proc.stderr.on('data', (d) => (err += d));
    proc.on('exit', (code) => resolve({ code: code ?? 1, out, err }));
  });
}

/** `npm run sim -- ...`; the gateway's URL by --url, or by HTTP_PORT alone when `byPort` */
async function sim(args: string[], byPort = false): Promise<{ code: number; summary?: SimSummary; stderr: string }> {
  const where = byPort ? [] : ['--url', gw.httpUrl];
  const env: Record<string, string> = byPort ? { HTTP_PORT: String(new URL(gw.httpUrl).port) } : {};
  const res = await run('src/sim/cli.ts', [...where, '--mqtt-host', '127.0.0.1', '--mqtt-port', String(gw.mqttPort), '--dir', dir, '--json', '-', '--no-progress', ...args], env);
  let summary: SimSummary | undefined;
  try { summary = JSON.parse(res.out); } catch { /* reported by the caller */ }
  return { code: res.code, summary, stderr: res.err + res.out };
}

const thingIds = () => fs.readdirSync(path.join(dir, 'devices')).map((f) => (JSON.parse(fs.readFileSync(path.join(dir, 'devices', f), 'utf8')) as { thingId: string; serial: string }));

describe('fleet simulator', () => {
  it('a revoke run, then a steady run on the same folder: revoked serials are replaced, a kicked device reconnects; both exit 0', async () => {
    const first = await sim(['--devices', '4', '--duration', '2', '--rate', '5', '--scenario', 'revoke', '--revoke', '1']);
    if (!first.summary) throw new Error(first.stderr);
    expect(first.summary.errors).toEqual({});
    expect(first.summary).toMatchObject({ devices: 4, enrolled: 4, reused: 0, connected: 4, revoked: 1, revokedReconnectsRefused: 1, errorCount: 0, revokedSkipped: [], replacements: [] });
    expect(first.summary.messagesSent).toBeGreaterThan(4);
    expect(first.summary.connectLatencyMs.p50).toBeGreaterThan(0);
    expect(first.code).toBe(0);
    const kept = thingIds();
    expect(kept).toHaveLength(3);
    const revokedSerial = ['SIM-000000', 'SIM-000001', 'SIM-000002', 'SIM-000003'].find((s) => !kept.some((k) => k.serial === s));
    const [row] = await gw.db.sql<{ n: number }[]>`select count(*)::int as n from device_telemetry_latest`;
    expect(row.n).toBeGreaterThanOrEqual(3);

    // second run, the gateway found by HTTP_PORT; one device is kicked by a platform admin mid-run
    const second = sim(['--devices', '4', '--duration', '4', '--rate', '2'], true);
    const platform = await gw.token({ realm: 'platform', sub: 'root', roles: ['platform-admin'] });
    let kicked = false;
    for (let i = 0; i < 100 && !kicked; i++) {
      kicked = (await gw.http.delete(`/platform/v1/broker/sessions/${kept[0].thingId}`, { token: platform })).status === 204;
      if (!kicked) await new Promise((r) => setTimeout(r, 100));
    }
    expect(kicked).toBe(true);
    const res = await second;
    if (!res.summary) throw new Error(res.stderr);
    expect(res.summary.errors).toEqual({});
    expect(res.summary).toMatchObject({ enrolled: 1, reused: 3, connected: 4, revokedSkipped: [revokedSerial], replacements: ['SIM-000004'], kicked: 1, reconnectedAfterKick: 1, kickedNotReconnected: 0, errorCount: 0 });
    expect(res.code).toBe(0);
  });

  it('reconnect storm: every device drops and reconnects at once, over MQTT 3.1.1 too', async () => {
    const res = await sim(['--devices', '3', '--duration', '2', '--rate', '2', '--scenario', 'reconnect-storm', '--protocol', '4', '--prefix', 'STORM']);
    if (!res.summary) throw new Error(res.stderr);
    expect(res.summary).toMatchObject({ devices: 3, enrolled: 3, connected: 3, errorCount: 0, kicked: 0 });
    expect(res.summary.reconnectLatencyMs.p50).toBeGreaterThan(0);
  });

  it('rejects bad options with usage', async () => {
    const res = await sim(['--scenario', 'chaos']);
    expect(res.code).toBe(2);
    expect(res.stderr).toMatch(/--scenario must be steady, reconnect-storm or revoke/);
  });

  it('every CLI answers --help with exit 0; token finds the gateway by HTTP_PORT as by --url', async () => {
    const helps = await Promise.all(['src/sim/cli.ts', 'src/sim/factoryCli.ts', 'src/cli/token.ts'].map((script) => run(script, ['--help'])));
    for (const h of helps) {
      expect(h.code, h.err).toBe(0);
      expect(h.out).toMatch(/^npm run (sim|sim:factory|token) -- /);
      expect(h.out).toMatch(/--url URL .*HTTP_PORT/);
    }
    const port = String(new URL(gw.httpUrl).port);
    const [byPort, byUrl, nowhere] = await Promise.all([
      run('src/cli/token.ts', ['--realm', 'platform', '--roles', 'platform-admin'], { HTTP_PORT: port }),
      run('src/cli/token.ts', ['--realm', 'platform', '--url', gw.httpUrl]),
      run('src/cli/token.ts', ['--realm', 'platform'], { HTTP_PORT: String(await freePort()) }),
    ]);
    expect(byPort.code, byPort.err).toBe(0);
    expect(byPort.out.trim()).toMatch(/^[\w-]+\.[\w-]+\.[\w-]+$/);
    expect(byUrl.code, byUrl.err).toBe(0);
    expect(nowhere.code).toBe(1);
    expect(nowhere.err).toMatch(/cannot reach the gateway at http:\/\/127\.0\.0\.1:\d+ .*--url or HTTP_PORT/);
  });
});
