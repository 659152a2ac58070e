import { spawn, type ChildProcess } from 'node:child_process';
import crypto from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { freePort } from '../../src/db/embedded.js';
import { createTestDatabase, type TestDatabase } from '../helpers/db.js';
import { expectProblem, HttpClient, type TestGateway } from '../helpers/gateway.js';
import { createAccount, type TestAccount } from '../helpers/accounts.js';
import { createClaimGroup, enrollDevice, revokeDevice } from '../helpers/devices.js';
import { spawnGateway } from '../helpers/process.js';
import { waitFor } from '../helpers/wait.js';
import { closed, connectDevice, tlsOutcome } from '../broker/fixtures.js';
import { REDIS_URL, redisReachable } from '../helpers/redis.js';

// The compose topology without Docker: Debian's haproxy running docs/haproxy.cfg (its addresses
// set through the same environment variables compose leaves at their defaults) in front of two
// gateway processes sharing one Postgres database, one Redis and one PKI folder.
const REDIS = REDIS_URL;
const HAPROXY = [...(process.env.PATH ?? '').split(':'), '/usr/sbin', '/usr/local/sbin']
  .map((dir) => path.join(dir, 'haproxy'))
  .find((file) => fs.existsSync(file));


const skipReason = !HAPROXY ? 'haproxy is not installed (apt-get install haproxy)' : !(await redisReachable()) ? `Redis at ${REDIS} is not reachable` : undefined;
if (skipReason) console.warn(`deploy topology test skipped: ${skipReason}`);

interface Node { name: string; proc: ChildProcess; http: HttpClient; mqttPort: number }

let db: TestDatabase;
let nodes: Node[] = [];
let lb: { proc: ChildProcess; http: HttpClient; mqttPort: number; output: () => string };

/**
 * Starts haproxy in the foreground with docs/haproxy.cfg on fresh loopback ports and waits until it
 * answers. Ports are picked just before the start, and again if haproxy could not bind them (an
 * outgoing connection of another process may have taken one).
 */
async function startLoadBalancer(): Promise<typeof lb> {
  const [a, b] = nodes;
  for (let attempt = 1; ; attempt++) {
    const [httpPort, mqttPort] = [await freePort(), await freePort()];
    let output = '';
    const proc = spawn(HAPROXY!, ['-db', '-f', 'docs/haproxy.cfg'], {
      env: {
        ...process.env,
        LB_HTTP_BIND: `127.0.0.1:${httpPort}`,
        LB_MQTT_BIND: `127.0.0.1:${mqttPort}`,
        GATEWAY_A_HTTP: new URL(a.http.baseUrl).host,
        GATEWAY_B_HTTP: new URL(b.http.baseUrl).host,
        GATEWAY_A_MQTT: `127.0.0.1:${a.mqttPort}`,
        GATEWAY_B_MQTT: `127.0.0.1:${b.mqttPort}`,
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
  db = await createTestDatabase({ migrated: false });
  // both nodes publish one public address, as behind the LB in compose (only tokens' and
  // licenses' issuer and links use it: nothing fetches it)
  const publicBase = 'http://gateway.test:8080';
  for (const name of ['a', 'b']) {
    const [httpPort, mqttPort] = [await freePort(), await freePort()];
    const { proc, http } = await spawnGateway({
      DATABASE_URL: db.url,
      REDIS_URL: redisUrl,
      NODE_ID: `topology-${name}-${crypto.randomBytes(3).toString('hex')}`,
      HTTP_PORT: String(httpPort),
      MQTT_PORT: String(mqttPort),
      PUBLIC_BASE_URL: publicBase,
      TRUSTED_PROXIES: '127.0.0.1',
      JOBS: 'false',
    });
    nodes.push({ name, proc, http, mqttPort });
  }
  lb = await startLoadBalancer();
}, 180_000);

afterAll(async () => {
  if (lb) await stop(lb.proc);
  for (const n of nodes) await stop(n.proc);
  await db?.drop();
});

describe.skipIf(!!skipReason)('compose topology without Docker: haproxy (docs/haproxy.cfg) in front of two gateway processes', () => {
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

  it('a device enrolled through the LB connects through the 8883 passthrough; revoking it on the other node kicks it', async () => {
    const device = await enrollDevice(viaHttp(lb.http), account, { claimSecret });
    const client = await connectDevice(lb.mqttPort, device);
    const holders = await waitFor(async () => {
      const counts = await Promise.all(nodes.map((n) => sample(n.http, 'mqtt_connected_clients')));
      const on = nodes.filter((_, i) => counts[i] > 0);
      return on.length === 1 ? on : undefined;
    }, 15_000, 'the device to appear on one node');
    const other = nodes.find((n) => n !== holders[0])!;
    const gone = closed(client);
    const revoked = await revokeDevice(viaHttp(other.http), account, device.thingId);
    expect(revoked.disconnected).toBe(true);
    await gone;
    expect(client.connected).toBe(false);
    client.end(true);
    // and no node behind the LB lets it back in (the handshake is refused or the socket closed)
    for (let i = 0; i < 2; i++) expect(await tlsOutcome(lb.mqttPort, device.certPem, device.keyPem, device.caPem)).not.toBe('open');
  });
});
