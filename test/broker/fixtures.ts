import crypto from 'node:crypto';
import tls from 'node:tls';
import mqtt, { type IClientOptions, type MqttClient } from 'mqtt';
import type { TestGateway } from '../helpers/gateway.js';

export interface TestDevice {
  thingId: string;
  certPem: string;
  keyPem: string;
  serial: string;
  caPem: string;
}

/** A device certificate issued directly by the gateway's device CA (no enrollment). */
export async function issueDevice(gw: TestGateway, opts: { thingId?: string; days?: number } = {}): Promise<TestDevice> {
  const thingId = opts.thingId ?? crypto.randomUUID();
  const { spki, privateKeyPem } = await gw.gw.pki.generateDeviceKeyPair();
  const cert = await gw.gw.pki.signDeviceCertificate(thingId, spki, opts.days ?? 30);
  return { thingId, certPem: cert.pem, keyPem: privateKeyPem, serial: cert.serial, caPem: gw.gw.pki.bundlePem };
}

export function mqttOptions(device: Pick<TestDevice, 'certPem' | 'keyPem' | 'caPem' | 'thingId'>, extra: Partial<IClientOptions> = {}): IClientOptions {
  return {
    key: device.keyPem,
    cert: device.certPem,
    ca: device.caPem,
    servername: 'localhost',
    rejectUnauthorized: true,
    clientId: device.thingId,
    username: device.thingId,
    protocolVersion: 5,
    reconnectPeriod: 0,
    connectTimeout: 10_000,
    ...extra,
  };
}

export function connectDevice(port: number, device: TestDevice, extra: Partial<IClientOptions> = {}): Promise<MqttClient> {
  return mqtt.connectAsync(`mqtts://127.0.0.1:${port}`, mqttOptions(device, extra));
}

/** The error a refused connection fails with (CONNACK refusal or TLS handshake). */
export async function connectError(port: number, device: TestDevice, extra: Partial<IClientOptions> = {}): Promise<Error & { code?: number | string }> {
  try {
    const client = await connectDevice(port, device, extra);
    await client.endAsync();
  } catch (err) {
    return err as Error & { code?: number | string };
  }
  throw new Error('connection was accepted');
}

/** Resolves with the next message on `topic` (already subscribed). */
export function nextMessage(client: MqttClient, topic: string): Promise<{ payload: Buffer; packet: mqtt.IPublishPacket }> {
  return new Promise((resolve) => {
    const on = (t: string, payload: Buffer, packet: mqtt.IPublishPacket) => {
      if (t !== topic) return;
      client.off('message', on);
      resolve({ payload, packet });
    };
    client.on('message', on);
  });
}

export const closed = (client: MqttClient) => new Promise<void>((resolve) => (client.connected ? client.once('close', () => resolve()) : resolve()));

/** SUBACK reason codes (granted QoS or failure code) for each topic, refused ones included. */
export async function subackCodes(client: MqttClient, topics: string | string[], qos: 0 | 1 = 1): Promise<number[]> {
  try {
    return (await client.subscribeAsync(topics, { qos })).map((g) => g.qos);
  } catch (err) {
    const granted = (err as { packet?: { granted?: (number | { qos: number })[] } }).packet?.granted;
    if (!granted) throw err;
    return granted.map((g) => (typeof g === 'number' ? g : g.qos));
  }
}

/** A self-signed certificate with the device's CN (not issued by the gateway's CA). */
export async function selfSigned(thingId: string): Promise<{ certPem: string; keyPem: string }> {
  const { execFileSync } = await import('node:child_process');
  const fs = await import('node:fs');
  const os = await import('node:os');
  const path = await import('node:path');
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'selfsigned-'));
  try {
    execFileSync('openssl', ['req', '-x509', '-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:P-256', '-nodes', '-keyout', path.join(dir, 'k.pem'), '-out', path.join(dir, 'c.pem'), '-subj', `/CN=${thingId}`, '-days', '1'], { stdio: 'ignore' });
    return { certPem: fs.readFileSync(path.join(dir, 'c.pem'), 'utf8'), keyPem: fs.readFileSync(path.join(dir, 'k.pem'), 'utf8') };
  } finally {
    fs.rmSync(dir, { recursive: true, force: true });
  }
}

/**
 * Opens a bare TLS connection with this certificate: 'open' when the broker accepted the handshake
 * (it then waits for CONNECT), else the error or 'closed'. (With TLS 1.3 the client learns of a
 * refused certificate only from the server's alert after its own handshake completed.)
 */
export function tlsOutcome(port: number, certPem: string, keyPem: string, caPem: string): Promise<string> {
  return new Promise((resolve) => {
    const socket = tls.connect({ host: '127.0.0.1', port, servername: 'localhost', cert: certPem, key: keyPem, ca: caPem });
    const timer = setTimeout(() => { socket.destroy(); resolve('open'); }, 1500);
    socket.on('data', () => {});
    socket.on('error', (err) => { clearTimeout(timer); resolve(err.message); });
    socket.on('close', () => { clearTimeout(timer); resolve('closed'); });
  });
}

/** PUBACK (QoS 1) or PUBREC (QoS 2) reason code of a publish (mqtt.js rejects on a failure code). */
export async function pubackCode(client: MqttClient, topic: string, payload: string | Buffer, qos: 1 | 2 = 1): Promise<number> {
  try {
    const ack = (await client.publishAsync(topic, payload, { qos })) as { reasonCode?: number } | undefined;
    return ack?.reasonCode ?? 0;
  } catch (err) {
    const code = (err as { code?: number }).code;
    if (typeof code !== 'number') throw err;
    return code;
  }
}

/** A series of the gateway's /metrics (the broker's public figures): `name` or `name{labels}`; 0 when absent. */
export async function metric(gw: Pick<TestGateway, 'http'>, name: string, labels: Record<string, string> = {}): Promise<number> {
  const text = (await gw.http.get('/metrics')).text;
  const want = Object.entries(labels).map(([k, v]) => `${k}="${v}"`);
  const line = text.split('\n').find((l) => (want.length ? l.startsWith(`${name}{`) && want.every((w) => l.includes(w)) : l.startsWith(`${name} `)));
  return line ? Number(line.slice(line.lastIndexOf(' ') + 1)) : 0;
}
