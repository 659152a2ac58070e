/**
 * bench:blacklist — requests/s of `GET /api/v1/identity-blacklist/check` with 100,000 entries on
 * the list against `GET /healthz` (no auth, no database) in one run, on real HTTP (autocannon).
 * Also times what a change costs with that list: an add (commit, enforcement, snapshot rebuild)
 * and the size of the signed snapshot.
 *
 *   npm run bench:blacklist [-- --duration 5 --connections 32 --rounds 4]
 *
 * The entries (and their change-log rows) are seeded with one INSERT ... SELECT generate_series;
 * the add that follows brings the node's in-memory copy of the list (which answers checks) and
 * the signed snapshot up to date. Check requests carry an OIDC
 * bearer token (viewer) and ask for listed and unlisted serials in turn (200 and 404 both count
 * as answered; anything else is an error). Starts one gateway (embedded PostgreSQL in a temporary
 * folder). Prints only: the lead pastes the figures into docs/benchmarks.md.
 */
import os from 'node:os';
import autocannon from 'autocannon';
import { startBenchGateway } from './lib/gateway.js';
import { roundOptions } from './lib/args.js';
import { gatewayClient, must } from '../src/clients/api.js';

const ENTRIES = 100_000;
const { duration, connections, rounds } = roundOptions();

async function main() {
  const gw = await startBenchGateway('blacklist');
  try {
    const base = gw.httpUrl;
    const sql = gw.gw.sql;
    const account = await gw.services.accounts.create({ name: 'bench' });
    // setup calls go through the typed client generated from the gateway's document (src/clients/api.ts); the measured loop stays on autocannon (raw HTTP on purpose)
    const anon = gatewayClient(base);
    const token = async (realm: string, roles: string[]) => (await must(anon.POST('/dev/token', { body: { realm, sub: `bench-${roles[0]}`, roles } }))).access_token;
    const viewer = await token(`acc-${account.id}`, ['viewer']);
    const reader = gatewayClient(base, { bearer: viewer });
    const operator = gatewayClient(base, { bearer: await token('platform', ['platform-operator']) });

    let started = Date.now();
    // entries and their change rows in one statement (nodes follow the change log)
    await sql`
      with added as (
        insert into blacklist_entries (model, sn, reason, added_by, added_at)
        select 'FFF9:' || lpad(to_hex(i % 16), 4, '0'), 'BENCH-' || i, 'bench seed', 'bench', now()
        from generate_series(0, ${ENTRIES - 1}) as i
        returning model, sn, reason, added_by, added_at)
      insert into blacklist_changes (op, model, sn, reason, by, at) select 'add', model, sn, reason, added_by, added_at from added`;
    await sql`analyze blacklist_entries`;
    console.log(`seeded ${ENTRIES} entries in ${Date.now() - started} ms`);

    // adds through HTTP: commit, enforcement, the node's copy of the list and the snapshot of the
    // whole list rebuilt and stored. The first also replays the seeded changes into the copy.
    const addOne = async (sn: string) => {
      const t0 = Date.now();
      await must(operator.POST('/api/v1/identity-blacklist', { body: { model: 'FFF9:FFFF', sn, reason: 'bench add' } }));
      return Date.now() - t0;
    };
    const firstAddMs = await addOne('BENCH-ADDED-1');
    // builds are spaced by their own duration (src/blacklist/snapshot.ts): measure an add that does not wait for that
    await new Promise((resolve) => setTimeout(resolve, firstAddMs));
    const addMs = await addOne('BENCH-ADDED-2');
    const snapshotBytes = (await must(reader.GET('/api/v1/identity-blacklist/snapshot.signed', { parseAs: 'text' }))).length;
    console.log(`add with ${ENTRIES} entries (incl. snapshot rebuild): ${addMs} ms (first, replaying the seed: ${firstAddMs} ms); snapshot ${(snapshotBytes / 1e6).toFixed(1)} MB`);

    const serial = (n: number) => `BENCH-${n % 2 === 0 ? (n * 7919) % ENTRIES : `MISS-${n}`}`;
    const check = (n: number) => `/api/v1/identity-blacklist/check?sn=${serial(n)}`;
    const { response: hit } = await reader.GET('/api/v1/identity-blacklist/check', { params: { query: { sn: serial(2) } } });
    const { response: miss } = await reader.GET('/api/v1/identity-blacklist/check', { params: { query: { sn: serial(1) } } });
    if (hit.status !== 200 || miss.status !== 404) throw new Error(`check answers ${hit.status}/${miss.status}, expected 200/404`);

    let n = 0;
    const unexpected = { count: 0 };
    const checkRun = (seconds: number) => autocannon({
      url: base, connections, duration: seconds, pipelining: 1,
      requests: [{ method: 'GET', setupRequest: (req) => ({ ...req, path: check(n++), headers: { ...req.headers, authorization: `Bearer ${viewer}` } }) }],
    }).then((r) => {
      // 404 is the answer for an unlisted serial
      unexpected.count += r.errors + r.non2xx - (r.statusCodeStats?.['404']?.count ?? 0);
      return r;
    });
    const healthRun = (seconds: number) => autocannon({ url: `${base}/healthz`, connections, duration: seconds, pipelining: 1 });

    console.log('warm-up...');
    await healthRun(2);
    await checkRun(2);
    unexpected.count = 0;

    const health: number[] = [];
    const checks: number[] = [];
    const loadBefore = os.loadavg()[0];
    for (let i = 0; i < rounds; i++) {
      const h = await healthRun(duration);
      const c = await checkRun(duration);
      unexpected.count += h.errors + h.non2xx;
      health.push(h.requests.average);
      checks.push(c.requests.average);
      console.log(`round ${i + 1}: /healthz ${h.requests.average.toFixed(0)} req/s (p99 ${h.latency.p99} ms), check ${c.requests.average.toFixed(0)} req/s (p99 ${c.latency.p99} ms)`);
    }
    const mean = (xs: number[]) => xs.reduce((s, x) => s + x, 0) / xs.length;
    const ratios = checks.map((x, i) => x / health[i]).sort((x, y) => x - y);
    const mid = Math.floor(ratios.length / 2);
    const ratio = ratios.length % 2 ? ratios[mid] : (ratios[mid - 1] + ratios[mid]) / 2;
    console.log('');
    console.log(`Measured ${new Date().toISOString().slice(0, 16)}Z on ${os.cpus().length} cores, Node ${process.versions.node}, load average ${loadBefore.toFixed(2)} at start;`);
    console.log(`${connections} connections, ${rounds} alternating rounds of ${duration} s, ${ENTRIES} entries.`);
    console.log('| Route | Requests/s (mean) |');
    console.log('|---|---|');
    console.log(`| \`GET /healthz\` | ${mean(health).toFixed(0)} |`);
    console.log(`| \`GET /api/v1/identity-blacklist/check\` (bearer, half listed) | ${mean(checks).toFixed(0)} |`);
    console.log(`| **ratio** check / healthz (median of ${ratios.map((r) => r.toFixed(2)).join(', ')}) | **${ratio.toFixed(2)}** |`);
    console.log(`| add with ${ENTRIES} entries (commit + snapshot rebuild) | ${addMs} ms |`);
    console.log(`| signed snapshot size | ${(snapshotBytes / 1e6).toFixed(1)} MB |`);
    if (unexpected.count > 0) throw new Error(`${unexpected.count} errors or answers other than 200/404`);
  } finally {
    await gw.stop();
  }
}

main().catch((err) => {
  console.error(err);
  process.exit(1);
});
