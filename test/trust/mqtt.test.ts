import mqtt from 'mqtt';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestGateway, type TestGateway } from '../helpers/gateway.js';
import { createAccount, type TestAccount } from '../helpers/accounts.js';
import { enrollDevice, revokeDevice, type EnrolledDevice } from '../helpers/devices.js';

let gw: TestGateway;
let account: TestAccount;

beforeAll(async () => {
  gw = await startTestGateway();
  account = await createAccount(gw, { capabilities: ['enroll_things'] });
});
afterAll(async () => gw?.close());

function connect(d: EnrolledDevice) {
  return mqtt.connectAsync(`mqtts://127.0.0.1:${d.response.mqttBrokerPort}`, {
    key: d.keyPem, cert: d.certPem, ca: d.response.caBundlePem, servername: 'localhost', rejectUnauthorized: true,
    clientId: d.thingId, username: d.thingId, protocolVersion: 5, reconnectPeriod: 0, connectTimeout: 10_000,
  });
}

describe('enrolled devices on the broker', () => {
  it('connects with the enrollment response alone; after DELETE it is disconnected and refused', async () => {
    const d = await enrollDevice(gw, account);
    expect(d.response.mqttBrokerPort).toBe(gw.mqttPort);
    const client = await connect(d);
    const dropped = new Promise<number | undefined>((resolve) => client.once('disconnect', (p) => resolve(p.reasonCode)));
    await client.publishAsync(`${d.response.twinTopicPrefix}/telemetry`, JSON.stringify({ t: 1 }));
    const revoked = await revokeDevice(gw, account, d.thingId);
    expect(revoked.disconnected).toBe(true);
    expect(await dropped).toBe(0x98);
    console.log('after dropped'); // DISCONNECT: administrative action, sent before the DELETE answered
    client.end(true);
    // refused at the TLS handshake (CRL) or at CONNECT (revoked serial): never a CONNACK success
    const again = mqtt.connect(`mqtts://127.0.0.1:${d.response.mqttBrokerPort}`, {
      key: d.keyPem, cert: d.certPem, ca: d.response.caBundlePem, servername: 'localhost', clientId: d.thingId, username: d.thingId,
      protocolVersion: 5, reconnectPeriod: 0, connectTimeout: 5000,
    });
    const outcome = await new Promise<string>((resolve) => {
      again.once('connect', () => resolve('connected'));
      again.once('error', () => resolve('refused'));
      again.once('close', () => resolve('refused'));
    });
    again.end(true);
    expect(outcome).toBe('refused');
  });
});
