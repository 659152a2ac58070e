import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { execFile } from 'node:child_process';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestGateway, type TestGateway } from '../helpers/gateway.js';
import { createAccount, type TestAccount } from '../helpers/accounts.js';
import { enrollDevice, revokeDevice } from '../helpers/devices.js';
import { waitFor } from '../helpers/wait.js';
import { selfSigned, type TestDevice } from './fixtures.js';

// Debian's mosquitto-clients (installed by .ci/run) against the gateway, MQTT v5 with mutual TLS.
const available = fs.existsSync('/usr/bin/mosquitto_pub') && fs.existsSync('/usr/bin/mosquitto_sub');
if (!available) console.warn('mosquitto-clients not installed: the real-client tests are skipped (.ci/run installs them)');

let gw: TestGateway;
let account: TestAccount;
const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'mosq-'));

beforeAll(async () => {
  if (!available) return;
  gw = await startTestGateway();
  account = await createAccount(gw);
});
afterAll(async () => {
  await gw?.close();
  fs.rmSync(dir, { recursive: true, force: true });
});

function files(name: string, d: Pick<TestDevice, 'certPem' | 'keyPem' | 'caPem'>) {
  const f = { cert: path.join(dir, `${name}.crt`), key: path.join(dir, `${name}.key`), ca: path.join(dir, `${name}-ca.pem`) };
  fs.writeFileSync(f.cert, d.certPem);
  fs.writeFileSync(f.key, d.keyPem, { mode: 0o600 });
  fs.writeFileSync(f.ca, d.caPem);
  return f;
}

/** Runs a mosquitto client (asynchronously: the gateway runs in this process). */
function run(cmd: string, args: string[]): Promise<{ code: number; out: string }> {
  return new Promise((resolve) => {
    execFile(cmd, args, { timeout: 15_000 }, (err, stdout, stderr) => {
      resolve({ code: err ? (typeof err.code === 'number' ? err.code : 1) : 0, out: stdout + stderr });
    });
  });
}

function common(id: string, f: ReturnType<typeof files>) {
  return ['-h', '127.0.0.1', '-p', String(gw.mqttPort), '-V', 'mqttv5', '--cafile', f.ca, '--cert', f.cert, '--key', f.key, '-i', id, '-u', id];
}

describe.skipIf(!available)('mosquitto_pub / mosquitto_sub', () => {
  it('own topic works, another device topic is refused', async () => {
    const device = await enrollDevice(gw, account);
    const f = files(device.thingId, device);
    const topic = `devices/${device.thingId}/telemetry`;
    const sub = run('mosquitto_sub', [...common(device.thingId, f), '-t', topic, '-C', '1', '-W', '10']);
    // the gateway publishes on the device's topic until mosquitto_sub (-C 1) has printed one message
    let done = false;
    void sub.then(() => (done = true));
    while (!done) {
      await gw.testHooks.broker.publish({ topic, payload: '{"t":1}' });
      await new Promise((r) => setTimeout(r, 100));
    }
    const got = await sub;
    expect(got.code).toBe(0);
    expect(got.out.trim()).toBe('{"t":1}');

    const pub = await run('mosquitto_pub', [...common(device.thingId, f), '-t', topic, '-m', '{"temp":20}', '-q', '1']);
    expect(pub.code).toBe(0);
    await waitFor(async () => (await gw.http.get(`/api/v1/things/${device.thingId}/telemetry`, { token: account.viewer })).body.telemetry.temp === 20, 10_000, 'telemetry stored');

    const otherDevice = await enrollDevice(gw, account);
    const denied = await run('mosquitto_sub', [...common(device.thingId, f), '-t', `devices/${otherDevice.thingId}/telemetry`, '-E', '-W', '5']);
    expect(denied.out).toMatch(/denied|not authori[sz]ed/i);
    const deniedPub = await run('mosquitto_pub', [...common(device.thingId, f), '-t', `devices/${otherDevice.thingId}/telemetry`, '-m', 'x', '-q', '1', '-d']);
    expect(deniedPub.out).toMatch(/Not authori[sz]ed|reason code 135|\(135\)|rc135|PUBACK.*135/i);
  });

  it('a self-signed certificate fails the handshake', async () => {
    const device = await enrollDevice(gw, account);
    const f = files(`${device.thingId}-self`, { ...(await selfSigned(device.thingId)), caPem: device.caPem });
    const res = await run('mosquitto_pub', [...common(device.thingId, f), '-t', `devices/${device.thingId}/heartbeat`, '-m', '', '-q', '1']);
    expect(res.code).not.toBe(0);
    expect(res.out).toMatch(/error|lost|alert|unknown ca|certificate/i);
  });

  it('a revoked certificate is refused', async () => {
    const device = await enrollDevice(gw, account);
    const f = files(device.thingId, device);
    const ok = await run('mosquitto_pub', [...common(device.thingId, f), '-t', `devices/${device.thingId}/heartbeat`, '-m', '', '-q', '1']);
    expect(ok.code).toBe(0);
    await revokeDevice(gw, account, device.thingId);
    const res = await run('mosquitto_pub', [...common(device.thingId, f), '-t', `devices/${device.thingId}/heartbeat`, '-m', '', '-q', '1']);
    expect(res.code).not.toBe(0);
    expect(res.out).toMatch(/error|lost|revoked|alert|not authori[sz]ed/i);
  });
});
