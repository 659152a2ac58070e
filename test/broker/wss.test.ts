import net from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import mqtt, { type IClientOptions, type MqttClient } from 'mqtt';
import WebSocket from 'ws';
import { startTestGateway, type TestGateway } from '../helpers/gateway.js';
import { createAccount, type TestAccount } from '../helpers/accounts.js';
import { createClaimGroup, enrollDevice, revokeDevice } from '../helpers/devices.js';
import { buildProxyHeader, PP2_CLIENT } from '../../src/broker/proxyProtocol.js';
import { closed, mqttOptions, pubackCode, selfSigned, subackCodes, type TestDevice } from './fixtures.js';

// MQTT over secure WebSocket (MQTT_WS_PORT): wss://host:port/mqtt, subprotocol mqtt, the device's
// certificate required at the TLS handshake (device CA, CRL), then the same broker as MQTT_PORT.
let gw: TestGateway;
let wsPort: number;
let account: TestAccount;
let claimSecret: string;

beforeAll(async () => {
  gw = await startTestGateway({ MQTT_WS_PORT: '0' });
  wsPort = gw.testHooks.broker.listenerPorts().ws!;
  account = await createAccount(gw);
  claimSecret = (await createClaimGroup(gw, account)).sharedSecret;
});
afterAll(async () => gw?.close());

const wssUrl = () => `wss://127.0.0.1:${wsPort}/mqtt`;
const connectWss = (device: Pick<TestDevice, 'certPem' | 'keyPem' | 'caPem' | 'thingId'>, extra: Partial<IClientOptions> = {}): Promise<MqttClient> =>
  mqtt.connectAsync(wssUrl(), { ...mqttOptions(device), connectTimeout: 5_000, ...extra });

/** Status of a WebSocket upgrade with these options (the handshake's HTTP answer), or 'open'. */
function upgrade(url: string, protocols: string[], options: WebSocket.ClientOptions & { servername?: string }): Promise<{ status: number | 'open' | 'error'; body: string }> {
  return new Promise((resolve) => {
    const ws = new WebSocket(url, protocols, options);
    ws.on('open', () => { ws.close(); resolve({ status: 'open', body: '' }); });
    ws.on('unexpected-response', (_req, res) => {
      let body = '';
      res.on('data', (d) => (body += d));
      res.on('end', () => resolve({ status: res.statusCode ?? 0, body }));
    });
    ws.on('error', () => resolve({ status: 'error', body: '' }));
  });
}

describe('MQTT over wss://…/mqtt', () => {
  it('a device with its certificate publishes to its own topic; another device\'s topic is refused', async () => {
    const device = await enrollDevice(gw, account, { claimSecret });
    const other = await enrollDevice(gw, account, { claimSecret });
    const client = await connectWss(device);
    expect(await pubackCode(client, `devices/${device.thingId}/telemetry`, JSON.stringify({ t: 21.5 }))).toBe(0);
    expect(await pubackCode(client, `devices/${other.thingId}/telemetry`, '{}')).toBe(0x87);
    expect(await subackCodes(client, [`devices/${device.thingId}/cmd`, `devices/${other.thingId}/cmd`])).toEqual([1, 0x87]);
    // the same broker's session (what revocation kicks)
    expect(gw.testHooks.broker.isConnected(device.thingId)).toBe(true);
    await client.endAsync();
  });

  it('is refused without a certificate, with a self-signed one, and with a CN other than the client id', async () => {
    const device = await enrollDevice(gw, account, { claimSecret });
    const other = await enrollDevice(gw, account, { claimSecret });
    // no client certificate: the TLS handshake fails (no WebSocket at all)
    expect((await upgrade(wssUrl(), ['mqtt'], { ca: device.caPem, servername: 'localhost' })).status).toBe('error');
    await expect(connectWss({ ...device, certPem: undefined as never, keyPem: undefined as never })).rejects.toThrow();
    const fake = await selfSigned(device.thingId);
    await expect(connectWss({ ...device, ...fake })).rejects.toThrow();
    // the certificate of one device with another's client id: CONNACK not authorized
    await expect(connectWss(device, { clientId: other.thingId, username: other.thingId })).rejects.toMatchObject({ code: 0x87 });
  });

  it('answers another path, another subprotocol and a plain request with a problem', async () => {
    const device = await enrollDevice(gw, account, { claimSecret });
    const tlsOptions = { cert: device.certPem, key: device.keyPem, ca: device.caPem, servername: 'localhost' };
    const wrongPath = await upgrade(`wss://127.0.0.1:${wsPort}/other`, ['mqtt'], tlsOptions);
    expect(wrongPath.status).toBe(404);
    expect(JSON.parse(wrongPath.body).detail).toMatch(/\/mqtt/);
    const wrongProtocol = await upgrade(wssUrl(), ['chat'], tlsOptions);
    expect(wrongProtocol.status).toBe(400);
    expect(JSON.parse(wrongProtocol.body).detail).toMatch(/subprotocol must be mqtt/);
    expect((await upgrade(wssUrl(), ['mqtt'], tlsOptions)).status).toBe('open');
  });

  it('revocation kicks the device and its certificate is then refused at the TLS handshake', async () => {
    const device = await enrollDevice(gw, account, { claimSecret });
    const client = await connectWss(device);
    const gone = closed(client);
    expect((await revokeDevice(gw, account, device.thingId)).disconnected).toBe(true);
    await gone;
    client.end(true);
    expect((await upgrade(wssUrl(), ['mqtt'], { cert: device.certPem, key: device.keyPem, ca: device.caPem, servername: 'localhost' })).status).toBe('error');
  });
});

describe('MQTT_WS_BEHIND_PROXY: plain WebSocket from a TLS terminator, identity in the PROXY v2 header', () => {
  let behind: TestGateway;
  let port: number;
  beforeAll(async () => {
    behind = await startTestGateway({ MQTT_WS_PORT: '0', MQTT_WS_BEHIND_PROXY: 'true', TRUSTED_PROXIES: '127.0.0.2' }, { db: gw.db });
    port = behind.testHooks.broker.listenerPorts().ws!;
  });
  afterAll(async () => behind?.close());

  /** a WebSocket connection that starts with a header as HAProxy writes it, from `from` */
  const through = (device: TestDevice, from: string, verify = 0) => () => {
    const socket = net.connect({ host: '127.0.0.1', port, localAddress: from });
    socket.write(buildProxyHeader({ ssl: { client: PP2_CLIENT.SSL | PP2_CLIENT.CERT_CONN, verify, cn: device.thingId }, uniqueId: device.serial }));
    return socket;
  };

  it('serves a device vouched for by a trusted proxy; refuses an untrusted address and an unverified certificate', async () => {
    const device = await enrollDevice(behind, account, { claimSecret });
    const url = `ws://127.0.0.1:${port}/mqtt`;
    const client = await mqtt.connectAsync(url, { clientId: device.thingId, protocolVersion: 5, reconnectPeriod: 0, connectTimeout: 5_000, wsOptions: { createConnection: through(device, '127.0.0.2') } as never });
    expect(await pubackCode(client, `devices/${device.thingId}/telemetry`, '{"t":1}')).toBe(0);
    await client.endAsync();
    expect((await upgrade(url, ['mqtt'], { createConnection: through(device, '127.0.0.1') as never })).status).toBe('error');
    expect((await upgrade(url, ['mqtt'], { createConnection: through(device, '127.0.0.2', 10) as never })).status).toBe('error');
  });
});
