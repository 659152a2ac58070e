import { spawn, type ChildProcess } from 'node:child_process';
import fs from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { inject } from 'vitest';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import mqtt, { type MqttClient } from 'mqtt';
import { startTestGateway, type TestGateway } from '../helpers/gateway.js';
import { createAccount, type TestAccount } from '../helpers/accounts.js';
import { createClaimGroup, enrollDevice, revokeDevice } from '../helpers/devices.js';
import { buildProxyHeader, deviceIdentity, parseProxyHeader, PP2_CLIENT, ProxyHeaderError, type ProxyHeaderParts } from '../../src/broker/proxyProtocol.js';
import { metric, pubackCode, tlsOutcome, type TestDevice } from './fixtures.js';
import { freePort } from '../../src/db/embedded.js';
import { runtimeCommand } from '../../src/broker/haproxyRuntime.js';
import { acceptProxied } from '../../src/broker/proxyListener.js';
import { createLogger } from '../../src/log.js';
import { waitFor } from '../helpers/wait.js';

// MQTT_PROXY_PORT: plain TCP from a TLS terminator, the device's identity in a PROXY v2 header.
// The terminator here is this test writing the header (what HAProxy sends, see
// test/deploy/topology.test.ts for the real HAProxy); the trusted proxy is 127.0.0.2, so a
// connection from 127.0.0.1 is an untrusted one.
const PROXY = '127.0.0.2';
const HAPROXY = ['/usr/sbin/haproxy', '/usr/local/sbin/haproxy'].find((f) => fs.existsSync(f));
/** HAProxy's admin socket (nobody listens there until the last test starts HAProxy) and its crl-file, in a folder made only then */
const tlsDir = fs.mkdtempSync(path.join(os.tmpdir(), 'proxy-v2-'));
const adminSocket = path.join(tlsDir, 'admin.sock');
const crlPath = path.join(tlsDir, 'crl', 'crl.pem');
let haproxy: ChildProcess | undefined;

let gw: TestGateway;
let port: number;
let account: TestAccount;
let claimSecret: string;

beforeAll(async () => {
  gw = await startTestGateway({ MQTT_PROXY_PORT: '0', TRUSTED_PROXIES: PROXY, HAPROXY_RUNTIME_API: adminSocket, HAPROXY_CRL_PATH: crlPath });
  port = gw.testHooks.broker.listenerPorts().proxy!;
  account = await createAccount(gw);
  claimSecret = (await createClaimGroup(gw, account)).sharedSecret;
});
afterAll(async () => {
  if (haproxy && haproxy.exitCode === null) {
    const exited = new Promise((resolve) => haproxy!.once('exit', resolve));
    haproxy.kill('SIGTERM');
    await exited;
  }
  await gw?.close();
  fs.rmSync(tlsDir, { recursive: true, force: true });
});

const VERIFIED = PP2_CLIENT.SSL | PP2_CLIENT.CERT_CONN | PP2_CLIENT.CERT_SESS;

/** The header HAProxy sends for a device (docs/haproxy-mqtt-tls.cfg: CN TLV, unique id = serial:notBefore). */
const headerOf = (device: TestDevice, over: Partial<ProxyHeaderParts> = {}): ProxyHeaderParts => ({
  ssl: { client: VERIFIED, verify: 0, cn: device.thingId, version: 'TLSv1.3' },
  uniqueId: `${device.serial}:261127154242Z`,
  ...over,
});

/** A TCP connection to the proxy port from `from` that first writes `header` (or nothing). */
function rawConnection(header: Buffer | undefined, from = PROXY): Promise<net.Socket> {
  return new Promise((resolve, reject) => {
    const socket = net.connect({ host: '127.0.0.1', port, localAddress: from }, () => {
      if (header) socket.write(header);
      resolve(socket);
    });
    socket.once('error', reject);
  });
}

/** mqtt.js over a connection that starts with `header`. */
async function connectThrough(header: Buffer | undefined, device: TestDevice, from = PROXY): Promise<MqttClient> {
  const socket = await rawConnection(header, from);
  const client = new mqtt.MqttClient(() => socket, { clientId: device.thingId, username: device.thingId, protocolVersion: 5, reconnectPeriod: 0, connectTimeout: 5_000 });
  return new Promise((resolve, reject) => {
    client.once('connect', () => resolve(client));
    client.once('error', (err) => { client.end(true); reject(err); });
    client.once('close', () => reject(new Error('closed before CONNACK')));
  });
}

/** What the broker does with a connection that starts with `header` and then sends CONNECT: 'closed' before any byte back, or the first bytes it answered. */
async function outcome(header: Buffer | undefined, device: TestDevice, from = PROXY): Promise<string> {
  const socket = await rawConnection(header, from);
  // an MQTT 3.1.1 CONNECT (client id = the thing id): a broker that read it would answer CONNACK
  const id = Buffer.from(device.thingId);
  const body = Buffer.concat([Buffer.from([0, 4]), Buffer.from('MQTT'), Buffer.from([4, 0x02, 0, 30, 0, id.length]), id]);
  socket.write(Buffer.concat([Buffer.from([0x10, body.length]), body]));
  return new Promise((resolve) => {
    let got = '';
    socket.on('data', (d) => {
      got += d.toString('hex');
      // CONNACK (4 bytes) read: the broker took the connection
      if (got.length >= 8) socket.destroy();
    });
    socket.on('error', () => {});
    socket.on('close', () => resolve(got === '' ? 'closed' : got));
  });
}

describe('PROXY v2 header parsing (strict, bounded)', () => {
  it('reads the addresses, the SSL TLV and the unique id, and waits for a header cut short', () => {
    const bytes = buildProxyHeader({ ssl: { client: VERIFIED, verify: 0, cn: 'thing-1' }, uniqueId: '0A1B:261127154242Z', crc32c: true });
    for (let cut = 1; cut < bytes.length; cut += 7) expect(parseProxyHeader(bytes.subarray(0, cut))).toBeUndefined();
    const header = parseProxyHeader(Buffer.concat([bytes, Buffer.from([0x10])]))!;
    expect(header.length).toBe(bytes.length);
    expect(header.source).toEqual({ address: '192.0.2.10', port: 50000 });
    expect(deviceIdentity(header)).toEqual({ cn: 'thing-1', serial: '0A1B', notBefore: new Date('2026-11-27T15:42:42Z') });
  });

  it('refuses another signature, version 1, a TLV past the end, a wrong CRC32C and an oversized header', () => {
    const good = buildProxyHeader({ ssl: { client: VERIFIED, verify: 0, cn: 'x' }, uniqueId: 'AB', crc32c: true });
    expect(() => parseProxyHeader(Buffer.from('PROXY TCP4 1.2.3.4 5.6.7.8 1 2\r\n'))).toThrow(ProxyHeaderError);
    const v1 = Buffer.from(good); v1[12] = 0x11;
    expect(() => parseProxyHeader(v1)).toThrow(/version 1/);
    const overrun = Buffer.from(good); overrun.writeUInt16BE(0xffff, 16 + 12 + 1);
    expect(() => parseProxyHeader(overrun)).toThrow(/runs past|CRC32C/);
    const crc = Buffer.from(good); crc[crc.length - 1] ^= 1;
    expect(() => parseProxyHeader(crc)).toThrow(/CRC32C does not match/);
    const big = Buffer.from(good); big.writeUInt16BE(4000, 14);
    expect(() => parseProxyHeader(big)).toThrow(/at most 2048/);
  });

  it('gives no identity without a verified client certificate, its CN or its serial', () => {
    const identity = (parts: ProxyHeaderParts) => deviceIdentity(parseProxyHeader(buildProxyHeader(parts))!);
    expect(identity({ ssl: { client: VERIFIED, verify: 21, cn: 'x' }, uniqueId: 'AB' })).toMatch(/not verified/);
    expect(identity({ ssl: { client: PP2_CLIENT.SSL, verify: 0, cn: 'x' }, uniqueId: 'AB' })).toMatch(/no client certificate/);
    expect(identity({ ssl: { client: VERIFIED, verify: 0 }, uniqueId: 'AB' })).toMatch(/CN/);
    expect(identity({ ssl: { client: VERIFIED, verify: 0, cn: 'x' } })).toMatch(/serial/);
    expect(identity({ ssl: { client: VERIFIED, verify: 0, cn: 'x' }, uniqueId: 'not hex' })).toMatch(/serial/);
    expect(identity({ uniqueId: 'AB' })).toMatch(/no SSL TLV/);
    expect(identity({ command: 'LOCAL' })).toMatch(/LOCAL/);
  });

  it('takes a header that arrived before its deadline while the event loop was blocked past it, and refuses a missing one after the deadline', async () => {
    const server = net.createServer();
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    const serverPort = (server.address() as net.AddressInfo).port;
    const clients: net.Socket[] = [];
    // each connection: the header written straight into the kernel (a synchronous write on the
    // client's descriptor) right after the listener's timer started, then the loop blocked 150 ms
    // against a 20 ms deadline, as a node busy with a reconnect storm
    const outcome = (header: Buffer | undefined) => new Promise<string>((resolve) => {
      const client = net.connect(serverPort, '127.0.0.1');
      client.on('error', () => {});
      clients.push(client);
      server.once('connection', (socket) => {
        acceptProxied(socket, { trusted: () => true, log: createLogger('silent', false), refused: (reason) => resolve(`refused: ${reason}`), headerTimeoutMs: 20 }, (_s, identity) => resolve(`accepted ${identity.cn}`));
        if (header) fs.writeSync((client as unknown as { _handle: { fd: number } })._handle.fd, header);
        const until = Date.now() + 150;
        while (Date.now() < until) { /* blocked */ }
      });
    });
    try {
      expect(await outcome(buildProxyHeader({ ssl: { client: VERIFIED, verify: 0, cn: 'dev-1' }, uniqueId: 'AB' }))).toBe('accepted dev-1');
      expect(await outcome(undefined)).toBe('refused: timeout');
    } finally {
      for (const c of clients) c.destroy();
      await new Promise((resolve) => server.close(resolve));
    }
  });
});

describe('MQTT_PROXY_PORT', () => {
  it('serves a device whose header a trusted proxy sent: CN = client id, its own topic, not another device\'s', async () => {
    const device = await enrollDevice(gw, account, { claimSecret });
    const other = await enrollDevice(gw, account, { claimSecret });
    const client = await connectThrough(buildProxyHeader(headerOf(device)), device);
    const laneBefore = gw.testHooks.broker.fastLaneTaken();
    expect(await pubackCode(client, `devices/${device.thingId}/telemetry`, JSON.stringify({ t: 1 }))).toBe(0);
    // the same broker after CONNECT: its fast lane took the telemetry publish
    expect(gw.testHooks.broker.fastLaneTaken()).toBe(laneBefore + 1);
    // another device's topic: PUBACK 0x87 (MQTT 5), as on MQTT_PORT
    expect(await pubackCode(client, `devices/${other.thingId}/telemetry`, '{}')).toBe(0x87);
    expect(client.connected).toBe(true);
    await client.endAsync();
    // a client id other than the header's CN: CONNACK not authorized
    await expect(connectThrough(buildProxyHeader(headerOf(device)), other)).rejects.toThrow(/Not authorized|0x87|135/i);
  });

  it('closes before CONNECT: a forged header from an untrusted address, no header, an unverified or missing certificate', async () => {
    const device = await enrollDevice(gw, account, { claimSecret });
    const valid = buildProxyHeader(headerOf(device));
    const refusedBefore = await metric(gw, 'mqtt_connects_refused_total');
    const proxyRefusedBefore = await metric(gw, 'mqtt_proxy_connections_refused_total');
    // the same valid header from 127.0.0.1 (not in TRUSTED_PROXIES)
    expect(await outcome(valid, device, '127.0.0.1')).toBe('closed');
    // a trusted proxy that sends MQTT without the header
    expect(await outcome(undefined, device)).toBe('closed');
    // the terminator says the certificate did not verify (X509_V_ERR_UNABLE_TO_VERIFY_LEAF_SIGNATURE)
    expect(await outcome(buildProxyHeader(headerOf(device, { ssl: { client: VERIFIED, verify: 21, cn: device.thingId } })), device)).toBe('closed');
    // TLS without a client certificate
    expect(await outcome(buildProxyHeader(headerOf(device, { ssl: { client: PP2_CLIENT.SSL, verify: 0, cn: device.thingId } })), device)).toBe('closed');
    // none of them reached CONNECT (the broker's refusals count CONNECTs it read); each is counted as a proxy refusal
    expect(await metric(gw, 'mqtt_connects_refused_total')).toBe(refusedBefore);
    expect(await metric(gw, 'mqtt_proxy_connections_refused_total')).toBe(proxyRefusedBefore + 4);
    // and the valid header from the trusted address is answered with CONNACK accepted (0x20 0x02 0x00 0x00)
    expect(await outcome(valid, device)).toMatch(/^20020000/);
  });

  it('refuses a revoked certificate\'s serial at CONNECT and kicks its session on revocation', async () => {
    const device = await enrollDevice(gw, account, { claimSecret });
    const client = await connectThrough(buildProxyHeader(headerOf(device)), device);
    const gone = new Promise<void>((resolve) => client.once('close', () => resolve()));
    const revoked = await revokeDevice(gw, account, device.thingId);
    expect(revoked.disconnected).toBe(true);
    await gone;
    client.end(true);
    await expect(connectThrough(buildProxyHeader(headerOf(device)), device)).rejects.toThrow(/Not authorized|0x87|135|closed/i);
  });
});

describe.skipIf(!HAPROXY)('CRL pushes to HAProxy\'s runtime API', () => {
  it('a revocation succeeds while HAProxy is unreachable; the push is retried until HAProxy takes the CRL and refuses the certificate at its handshake', async () => {
    const device = await enrollDevice(gw, account, { claimSecret });
    // the CRL before the revocation: what HAProxy will load from its file at start
    const der = Buffer.from(await (await fetch(`${gw.httpUrl}/api/v1/certificates/crl`)).arrayBuffer());
    // nothing listens on the admin socket: the revocation still answers (its push failed and is retried)
    expect((await revokeDevice(gw, account, device.thingId)).revokedSerials.length).toBe(1);
    fs.mkdirSync(path.dirname(crlPath));
    const oldCrl = `-----BEGIN X509 CRL-----\n${der.toString('base64').replace(/.{64}/g, '$&\n')}\n-----END X509 CRL-----\n`;
    fs.writeFileSync(crlPath, oldCrl);
    const certs = inject('certsDir');
    const [httpPort, mqttPort] = [await freePort(), await freePort()];
    haproxy = spawn(HAPROXY!, ['-db', '-f', 'docs/haproxy-mqtt-tls.cfg'], {
      env: {
        ...process.env, LB_HTTP_BIND: `127.0.0.1:${httpPort}`, LB_MQTT_BIND: `127.0.0.1:${mqttPort}`, LB_ADMIN_BIND: adminSocket, LB_THREADS: '1', LB_MAXCONN: '1000',
        GATEWAY_A_HTTP: new URL(gw.httpUrl).host, GATEWAY_B_HTTP: new URL(gw.httpUrl).host, GATEWAY_A_MQTT: `127.0.0.1:${port}`, GATEWAY_B_MQTT: `127.0.0.1:${port}`,
        TLS_CERT: path.join(certs, 'server.crt'), TLS_CA: path.join(certs, 'ca-bundle.pem'), TLS_CRL: crlPath,
      },
      stdio: 'ignore',
    });
    const serial = device.serial.toUpperCase().replace(/^0+/, '');
    // the gateway's retry (1 s, doubling) pushes the CRL holding the serial; the file HAProxy started with does not hold it
    await waitFor(async () => (await runtimeCommand(adminSocket, `show ssl crl-file ${crlPath}`).catch(() => '')).toUpperCase().includes(serial), 20_000, 'the revoked serial in HAProxy\'s CRL', 250);
    // (a retry pushes over the socket only: the file is written with a new load, at most every CRL_REFRESH_SECONDS)
    expect(fs.readFileSync(crlPath, 'utf8')).toBe(oldCrl);
    expect(await tlsOutcome(mqttPort, device.certPem, device.keyPem, device.caPem)).toMatch(/certificate revoked/);
  });
});
