import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { spawn } from 'node:child_process';

export const mosquittoAvailable = fs.existsSync('/usr/bin/mosquitto_pub');

interface DeviceFiles { thingId: string; certPem: string; keyPem: string; caPem: string }

/**
 * Publishes `lines` with stock mosquitto_pub (-l: one message per line, one connection, in order),
 * MQTT v5 with mutual TLS, QoS 1. Resolves with its exit code: 0 once every message was PUBACKed.
 */
export function mosquittoPub(port: number, device: DeviceFiles, topic: string, lines: string[]): Promise<{ code: number; out: string }> {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'mosq-bridge-'));
  const f = { cert: path.join(dir, 'd.crt'), key: path.join(dir, 'd.key'), ca: path.join(dir, 'ca.pem') };
  fs.writeFileSync(f.cert, device.certPem);
  fs.writeFileSync(f.key, device.keyPem, { mode: 0o600 });
  fs.writeFileSync(f.ca, device.caPem);
  return new Promise((resolve) => {
    const p = spawn('mosquitto_pub', ['-h', '127.0.0.1', '-p', String(port), '-V', 'mqttv5', '--cafile', f.ca, '--cert', f.cert, '--key', f.key,
      '-i', device.thingId, '-u', device.thingId, '-t', topic, '-q', '1', '-l']);
    let out = '';
    p.stdout.on('data', (d) => (out += d));
    p.stderr.on('data', (d) => (out += d));
    p.on('close', (code) => {
      fs.rmSync(dir, { recursive: true, force: true });
      resolve({ code: code ?? 1, out });
    });
    p.stdin.end(lines.join('\n') + '\n');
  });
}
