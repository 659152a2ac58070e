/**
 * bench:factory — requests/s of a SVC-HMAC-SHA256 signed read against the same route with an
 * OIDC bearer token, in one run, on real HTTP (autocannon). Target ratio: 0.8 or more.
 *
 *   npm run bench:factory [-- --duration 5 --connections 32 --rounds 4 --no-write]
 *
 * The route is `GET /api/v1/things/{id}/state` of a thing enrolled through `POST /api/v1/enrollments`
 * (the factory service reads a thing of its own model). Every signed request is
 * signed anew (a signature is accepted once: replay protection), and carries a counter in its
 * query so two requests within the same second differ; the bearer requests carry the same query.
 * Starts one gateway (embedded PostgreSQL in a temporary folder). Rewrites its section of
 * docs/benchmarks.md unless --no-write.
 */
import os from 'node:os';
import autocannon from 'autocannon';
import { signedHeaders, signingTimestamp, type Credentials } from '../src/clients/svcSigner.js';
import { gatewayClient, must } from '../src/clients/api.js';
import { writeBenchmarkSection } from './lib/report.js';
import { startBenchGateway } from './lib/gateway.js';
import { roundOptions } from './lib/args.js';

const { duration, connections, rounds, write } = roundOptions();

async function main() {
  const gw = await startBenchGateway('factory');
  try {
    const base = gw.httpUrl;
    const account = await gw.services.accounts.create({ name: 'bench' });
    // setup and the two checks through the typed client generated from the gateway's document
    // (src/clients/api.ts); the measured loops stay on autocannon (raw HTTP on purpose)
    const anon = gatewayClient(base);
    const token = async (roles: string[]) => (await must(anon.POST('/dev/token', { body: { realm: `acc-${account.id}`, sub: `bench-${roles[0]}`, roles } }))).access_token;
    const admin = gatewayClient(base, { bearer: await token(['admin']) });
    const viewer = await token(['viewer']);
    const model = await must(admin.POST('/api/v1/models', { body: { vid: 'FFF9', pid: '0001', name: 'bench', provisioning_method: 'none' } }));
    const service = await must(admin.POST('/api/v1/factory-services', { body: { role: 'provision', model_id: model.id, endpoint_url: 'https://factory.example' } }));
    const creds: Credentials = { accessKeyId: service.access_key_id, secretAccessKey: service.secret_access_key };
    const thing = await must(admin.POST('/api/v1/enrollments', { body: { model: model.descriptor, serial: 'BENCH-1' } }));
    const route = `/api/v1/things/${thing.thing_id}/state`;
    const host = new URL(base).host;

    // the loops' counter `n` is not a documented parameter: the checks go without it (a target no loop request signs)
    const state = { params: { path: { thingId: thing.thing_id } } };
    await must(gatewayClient(base, { signed: creds }).GET('/api/v1/things/{thingId}/state', state));
    await must(gatewayClient(base, { bearer: viewer }).GET('/api/v1/things/{thingId}/state', state));

    let n = 0;
    const signedRun = (seconds: number) => autocannon({
      url: base, connections, duration: seconds, pipelining: 1,
      requests: [{
        method: 'GET',
        setupRequest: (req) => {
          const target = `${route}?n=${n++}`;
          return { ...req, path: target, headers: { ...req.headers, ...signedHeaders(creds, { method: 'GET', target, host, timestamp: signingTimestamp() }) } };
        },
      }],
    });
    const bearerRun = (seconds: number) => autocannon({
      url: base, connections, duration: seconds, pipelining: 1,
      requests: [{ method: 'GET', setupRequest: (req) => ({ ...req, path: `${route}?n=${n++}`, headers: { ...req.headers, authorization: `Bearer ${viewer}` } }) }],
    });

    console.log('warm-up...');
    await bearerRun(2);
    await signedRun(2);

    const bearer: number[] = [];
    const signed: number[] = [];
    let errors = 0;
    const loadBefore = os.loadavg()[0];
    for (let i = 0; i < rounds; i++) {
      const a = await bearerRun(duration);
      const b = await signedRun(duration);
      errors += a.errors + a.non2xx + b.errors + b.non2xx;
      bearer.push(a.requests.average);
      signed.push(b.requests.average);
      console.log(`round ${i + 1}: bearer ${a.requests.average.toFixed(0)} req/s (p99 ${a.latency.p99} ms), signed ${b.requests.average.toFixed(0)} req/s (p99 ${b.latency.p99} ms)`);
    }
    const mean = (xs: number[]) => xs.reduce((s, x) => s + x, 0) / xs.length;
    // median of per-round ratios: both routes are measured back to back in each round
    const ratios = signed.map((x, i) => x / bearer[i]).sort((x, y) => x - y);
    const mid = Math.floor(ratios.length / 2);
    const ratio = ratios.length % 2 ? ratios[mid] : (ratios[mid - 1] + ratios[mid]) / 2;
    console.log(`bearer: ${mean(bearer).toFixed(0)} req/s; signed: ${mean(signed).toFixed(0)} req/s; ratio ${ratio.toFixed(2)} [${ratios.map((r) => r.toFixed(2)).join(', ')}] (target >= 0.8); errors/non-2xx ${errors}`);

    if (write) {
      writeBenchmarkSection([
        '## Factory signed requests (`npm run bench:factory`)',
        '',
        `Measured ${new Date().toISOString().slice(0, 16)}Z on ${os.cpus().length} cores, Node ${process.versions.node}: one gateway, autocannon`,
        `(${connections} connections, ${rounds} alternating rounds of ${duration} s each after a warm-up) on real HTTP against`,
        '`GET /api/v1/things/{id}/state` (a thing of the factory service\'s model, enrolled through',
        '`POST /api/v1/enrollments`) signed with SVC-HMAC-SHA256 (each request signed anew by the shared',
        'signer, src/clients/svcSigner.ts) and the same route with an OIDC bearer token (viewer). The signing identity comes',
        "from the node's cache (invalidated across nodes on rotation and delete); the replay check is one insert",
        'into an unlogged Postgres table, batched across the requests of one event-loop turn.',
        `Load average (1 min) when the run started: ${loadBefore.toFixed(2)}.`,
        '',
        '| Route | Requests/s (mean) |',
        '|---|---|',
        `| \`Authorization: Bearer <JWT>\` | ${mean(bearer).toFixed(0)} |`,
        '| SVC-HMAC-SHA256 signed | ' + mean(signed).toFixed(0) + ' |',
        `| **ratio** (median of the per-round ratios ${ratios.map((r) => r.toFixed(2)).join(', ')}) | **${ratio.toFixed(2)}** (target >= 0.8) |`,
        '',
      ].join('\n'));
    }
    if (errors > 0) throw new Error(`${errors} errors or non-2xx answers`);
    if (ratio < 0.8) process.exitCode = 1;
  } finally {
    await gw.stop();
  }
}

main().catch((err) => {
  console.error(err);
  process.exit(1);
});
