import { execFile } from 'node:child_process';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestGateway, type TestGateway } from '../helpers/gateway.js';
import { waitFor } from '../helpers/wait.js';
import { issueDevice, metric, type TestDevice } from './fixtures.js';
import { compiled } from '../helpers/compiled.js';

let gw: TestGateway;
let devices: TestDevice[];

beforeAll(async () => {
  gw = await startTestGateway();
  devices = await Promise.all(Array.from({ length: 100 }, () => issueDevice(gw)));
});
afterAll(async () => gw?.close());

/** Runs disconnect-clients.ts in a child process: per device, the socket errors seen until it closed. */
function runClients(burst: number): Promise<string[][]> {
  return new Promise((resolve, reject) => {
    const child = execFile(process.execPath, [compiled('test/broker/disconnect-clients.ts')], { timeout: 60_000 }, (err, stdout, stderr) => {
      if (err) return reject(new Error(`clients failed: ${err.message}\n${stderr}`));
      resolve(JSON.parse(stdout) as string[][]);
    });
    child.stdin!.end(JSON.stringify({ port: gw.mqttPort, burst, devices }));
  });
}

describe('clean DISCONNECT', () => {
  it('100 devices (MQTT 5 and 3.1.1) that disconnect cleanly see no TCP reset, also right after a burst', async () => {
    for (const burst of [0, 50]) {
      const errors = await runClients(burst);
      expect(errors).toHaveLength(100);
      expect(errors.flat()).toEqual([]);
      await waitFor(async () => (await metric(gw, 'mqtt_connected_clients')) === 0, 10_000, 'every session released');
    }
  });
});
