import { spawn, type ChildProcess } from 'node:child_process';
import crypto from 'node:crypto';
import net from 'node:net';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { freePort } from '../../src/db/embedded.js';
import { createTestDatabase, type TestDatabase } from '../helpers/db.js';
import { expectProblem, HttpClient, type TestGateway } from '../helpers/gateway.js';
import { createAccount, type TestAccount } from '../helpers/accounts.js';
import { createClaimGroup, enrollDevice, revokeDevice } from '../helpers/devices.js';
import { spawnGateway } from '../helpers/process.js';
import { waitFor } from '../helpers/wait.js';
import { closed, connectDevice, selfSigned, tlsOutcome } from '../broker/fixtures.js';
import { REDIS_URL, redisReachable } from '../helpers/redis.js';

// The compose topology without Docker: Debian's haproxy running docs/haproxy-mqtt-tls.cfg (its
// addresses and files set through the same environment variables compose leaves at their
// defaults) in front of two gateway processes sharing one Postgres database, one Redis and one PKI
// folder. HAProxy terminates the devices' mutual TLS on its MQTT port and hands each connection to
// a gateway's MQTT_PROXY_PORT with a PROXY v2 header; the gateways push every CRL change to its
// admin socket (HAPROXY_RUNTIME_API) before a revocation answers.
const REDIS = REDIS_URL;
const HAPROXY = [...(process.env.PATH ?? '').split(':'), '/usr/sbin', '/usr/local/sbin']
  .map((dir) => path.join(dir, 'haproxy'))
  .find((file) => fs.existsSync(file));


const skipReason = !HAPROXY ? 'haproxy is not installed (apt-get install haproxy)' : !(await redisReachable()) ? `Redis at ${REDIS} is not reachable` : undefined;
if (skipReason) console.warn(`deploy topology test skipped: ${skipReason}`);

interface Node { name: string; proc: ChildProcess; http: HttpClient; mqttPort: number; proxyPort: number }

let db: TestDatabase;
let nodes: Node[] = [];
let lb: { proc: ChildProcess; http: HttpClient; mqttPort: number; output: () => string };
/** HAProxy's admin socket and the CRL file it loads at start (written by the gateways) */
const tlsDir = fs.mkdtempSync(path.join(os.tmpdir(), 'haproxy-tls-'));
const adminSocket = path.join(tlsDir, 'admin.sock');
const crlFile = path.join(tlsDir, 'crl.pem');

/**
 * Starts haproxy in the foreground with docs/haproxy-mqtt-tls.cfg on fresh loopback ports and waits until it
 * answers. Ports are picked just before the start, and again if haproxy could not bind them (an
 * outgoing connection of another process may have taken one).
 */
async function startLoadBalancer(): Promise<typeof lb> {
  const [a, b] = nodes;
  for (let attempt = 1; ; attempt++) {
    const [httpPort, mqttPort] = [await freePort(), await freePort()];
    let output = '';
    const certs = inject('certsDir');
    const proc = spawn(HAPROXY!, ['-db', '-f', 'docs/haproxy-mqtt-tls.cfg'], {
      env: {
        ...process.env,
        LB_HTTP_BIND: `127.0.0.1:${httpPort}`,
        LB_MQTT_BIND: `127.0.0.1:${mqttPort}`,
        GATEWAY_A_HTTP: new URL(a.http.baseUrl).host,
        GATEWAY_B_HTTP: new URL(b.http.baseUrl).host,
        GATEWAY_A_MQTT: `127.0.0.1:${a.proxyPort}`,
        GATEWAY_B_MQTT: `127.0.0.1:${b.proxyPort}`,
        LB_ADMIN_BIND: adminSocket,
        LB_THREADS: '2',
        LB_MAXCONN: '2000',
        TLS_CERT: path.join(certs, 'server.crt'),
        TLS_CA: path.join(certs, 'ca-bundle.pem'),
        TLS_CRL: crlFile,
      },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    proc.stdout!.on('data', (d) => (output += d));
    proc.stderr!.on('data', (d) => (output += d));
    const http = new HttpClient(`http://127.0.0.1:${httpPort}`);
    try {
      await waitFor(async () => {
        if (proc.exitCode !== null) throw new Error(`haproxy exited (${proc.exitCode}):\n${output}`);
        return (await http.get('/readyz')).status === 200;
      }, 30_000, 'load balancer ready', 200);
      return { proc, http, mqttPort, output: () => output };
    } catch (err) {
      proc.kill('SIGTERM');
      if (attempt === 3 || !/cannot bind/i.test(output)) throw err;
    }
  }
}

/** One sample of a Prometheus text exposition: the line naming `metric` with all of `labels`. */
async function sample(http: HttpClient, metric: string, labels: Record<string, string> = {}): Promise<number> {
  const text = (await http.get('/metrics')).text;
  const wanted = Object.entries(labels).map(([k, v]) => `${k}="${v}"`);
  const line = text.split('\n').find((l) => (l.startsWith(`${metric}{`) || l.startsWith(`${metric} `)) && wanted.every((w) => l.includes(w)));
  return line ? Number(line.slice(line.lastIndexOf(' ') + 1)) : 0;
}

/** What the shared helpers need of a gateway, for one reached only over HTTP (here: the LB). */
function viaHttp(http: HttpClient): TestGateway {
  return {
    http,
    gw: { services: {} },
    token: async (input: object) => (await http.post('/dev/token', input)).body.access_token,
  } as unknown as TestGateway;
}

const stop = (proc: ChildProcess) => new Promise((r) => {
  if (proc.exitCode !== null || proc.signalCode !== null) return r(null);
  proc.once('exit', r);
  proc.kill('SIGTERM');
});

beforeAll(async () => {
  if (skipReason) return;
  const redisUrl = `${REDIS.replace(/\/\d*$/, '')}/${1 + crypto.randomInt(15)}`;
  db = await createTestDatabase();
  // both nodes publish one public address, as behind the LB in compose (only tokens' and
  // licenses' issuer and links use it: nothing fetches it)
  const publicBase = 'http://gateway.test:8080';
  for (const name of ['a', 'b']) {
    const [httpPort, mqttPort, proxyPort] = [await freePort(), await freePort(), await freePort()];
    const { proc, http } = await spawnGateway({
      DATABASE_URL: db.url,
      REDIS_URL: redisUrl,
      NODE_ID: `topology-${name}-${crypto.randomBytes(3).toString('hex')}`,
      HTTP_PORT: String(httpPort),
      MQTT_PORT: String(mqttPort),
      MQTT_PROXY_PORT: String(proxyPort),
      // the gateway writes the CRL file haproxy loads at its start, and pushes every change to its admin socket
      HAPROXY_RUNTIME_API: adminSocket,
      HAPROXY_CRL_PATH: crlFile,
      PUBLIC_BASE_URL: publicBase,
      TRUSTED_PROXIES: '127.0.0.1',
      JOBS: 'false',
    });
    nodes.push({ name, proc, http, mqttPort, proxyPort });
  }
  lb = await startLoadBalancer();
}, 180_000);

afterAll(async () => {
  if (lb) await stop(lb.proc);
  for (const n of nodes) await stop(n.proc);
  await db?.drop();
  fs.rmSync(tlsDir, { recursive: true, force: true });
});

describe.skipIf(!!skipReason)('compose topology without Docker: haproxy (docs/haproxy-mqtt-tls.cfg) in front of two gateway processes', () => {
  let account: TestAccount;
  let claimSecret: string;

  beforeAll(async () => {
    account = await createAccount(viaHttp(lb.http));
    claimSecret = (await createClaimGroup(viaHttp(lb.http), account)).sharedSecret;
  });

  it('spreads HTTP requests over both nodes and health-checks each with GET /readyz', async () => {
    const readyzBefore = await Promise.all(nodes.map((n) => sample(n.http, 'http_requests_total', { route: '/readyz', status: '200' })));
    for (let i = 0; i < 6; i++) expect((await lb.http.get('/healthz')).status).toBe(200);
    for (const n of nodes) {
      expect(await sample(n.http, 'http_requests_total', { method: 'GET', route: '/healthz', status: '200' }), `node ${n.name} served /healthz`).toBeGreaterThan(0);
    }
    // nobody but haproxy asks the nodes for /readyz now
    for (const [i, n] of nodes.entries()) {
      await waitFor(async () => (await sample(n.http, 'http_requests_total', { method: 'GET', route: '/readyz', status: '200' })) > readyzBefore[i], 30_000, `haproxy's /readyz check on node ${n.name}`);
    }
  });

  it('drops a client-supplied X-SSL-Client-Cert (the nodes trust it from the LB only)', async () => {
    const device = await enrollDevice(viaHttp(lb.http), account, { claimSecret });
    const headers = { 'x-ssl-client-cert': encodeURIComponent(device.certPem) };
    const url = `/ddi/v1/${device.thingId}/device/status`;
    // straight from a trusted address the header authenticates the device...
    expect((await nodes[0].http.get(url, { headers })).status).toBe(200);
    // ...but through the LB it never arrives, whichever node answers
    for (let i = 0; i < 2; i++) {
      const problem = expectProblem(await lb.http.get(url, { headers }), 401);
      expect(problem.detail).toMatch(/^authentication required: .*TargetToken.*mutual TLS/);
    }
  });

  it('a device enrolled through the LB connects through haproxy\'s TLS (PROXY v2 to a node); revoked on the other node, it is kicked and refused at haproxy\'s handshake as the DELETE returns', async () => {
    const device = await enrollDevice(viaHttp(lb.http), account, { claimSecret });
    // mutual TLS ends at haproxy: the gateways' own TLS listeners are not in the path
    const client = await connectDevice(lb.mqttPort, device);
    await client.publishAsync(`devices/${device.thingId}/telemetry`, '{"t":1}', { qos: 1 });
    const holders = await waitFor(async () => {
      const counts = await Promise.all(nodes.map((n) => sample(n.http, 'mqtt_connected_clients')));
      const on = nodes.filter((_, i) => counts[i] > 0);
      return on.length === 1 ? on : undefined;
    }, 15_000, 'the device to appear on one node');
    const other = nodes.find((n) => n !== holders[0])!;
    const gone = closed(client);
    const revoked = await revokeDevice(viaHttp(other.http), account, device.thingId);
    expect(revoked.disconnected).toBe(true);
    // the CRL reached haproxy before the DELETE answered: its handshake refuses the certificate now
    expect(await tlsOutcome(lb.mqttPort, device.certPem, device.keyPem, device.caPem)).toMatch(/certificate revoked/);
    await gone;
    expect(client.connected).toBe(false);
    client.end(true);
    for (let i = 0; i < 2; i++) expect(await tlsOutcome(lb.mqttPort, device.certPem, device.keyPem, device.caPem)).toMatch(/certificate revoked/);
  });

  it('haproxy refuses a self-signed certificate with the CN of an enrolled device at the handshake', async () => {
    const device = await enrollDevice(viaHttp(lb.http), account, { claimSecret });
    const fake = await selfSigned(device.thingId);
    expect(await tlsOutcome(lb.mqttPort, fake.certPem, fake.keyPem, device.caPem)).toMatch(/unknown ca|certificate verify failed|alert/i);
    // and a connection to a node's PROXY port from an address not in TRUSTED_PROXIES is closed (the nodes trust 127.0.0.1 only)
    expect(await new Promise((resolve) => {
      const socket = net.connect({ host: '127.0.0.1', port: nodes[0].proxyPort, localAddress: '127.0.0.3' });
      socket.on('error', () => {});
      socket.on('close', () => resolve('closed'));
      socket.on('data', () => resolve('answered'));
    })).toBe('closed');
  });
});
