/**
 * bench:feed — the state-change feed and webhook delivery, each against a baseline in the same run:
 *
 * 1. changes/s written (4 writers, things born through the actor store in transactions of 25) by
 *    an account without a subscription (baseline), and by an account with one ACTIVE subscription
 *    whose HTTPS receiver (in this process, test CA trusted through OUTBOUND_CA_FILE) answers 204:
 *    how fast its changes are written, and delivered (first write to last delivery received);
 * 2. feed pages/s (`GET /provisioning/v1/state-changes?since=...&limit=100`, each a full page)
 *    against the full-sync page of as many things (`GET /provisioning/v1/things?limit=100`), and
 *    the feed read with SVC-HMAC-SHA256 signed requests.
 *
 *   npm run bench:feed [-- --duration 5 --connections 32 --rounds 4 --no-write]
 *
 * Starts one gateway (embedded PostgreSQL in a temporary folder, background work on). Rewrites
 * its section of docs/benchmarks.md unless --no-write.
 */
import crypto from 'node:crypto';
import fs from 'node:fs';
import https from 'node:https';
import os from 'node:os';
import type { AddressInfo } from 'node:net';
import autocannon from 'autocannon';
import { gatewayClient, must } from '../src/clients/api.js';
import { signedHeaders, signingTimestamp, type Credentials } from '../src/clients/svcSigner.js';
import type { RunningGateway } from '../src/server.js';
import { thingKind } from '../src/trust/kinds.js';
import { createTestCa } from '../test/feed/helpers.js';
import { roundOptions } from './lib/args.js';
import { startBenchGateway } from './lib/gateway.js';
import { writeBenchmarkSection } from './lib/report.js';

const { duration, connections, rounds, write } = roundOptions();
const CHANGES_PER_ROUND = 4000;
const WRITERS = 4;
const PER_TX = 25;

/** `count` things born in ROLLEDOFF (one change each) by WRITERS concurrent writers. */
async function writeChanges(gw: RunningGateway, accountId: string, count: number): Promise<void> {
  const one = async (n: number) => {
    for (let i = 0; i < n; i += PER_TX) {
      const ids = Array.from({ length: Math.min(PER_TX, n - i) }, () => crypto.randomUUID());
      await gw.gw.actors.run(async (uow) => {
        const at = gw.gw.clock.now().toISOString();
        await uow.sql`insert into things ${uow.sql(ids.map((id) => ({ id, account_id: accountId, manufacturer: 'Acme', model: 'FFF8:0001', serial: id })))}`;
        for (const id of ids) await uow.create(thingKind, id, { id, accountId, manufacturer: 'Acme', model: 'FFF8:0001', serial: id, enrolledBy: 'bench', enrolledAt: at });
      });
    }
  };
  await Promise.all(Array.from({ length: WRITERS }, () => one(count / WRITERS)));
}

async function main() {
  const ca = await createTestCa();
  let delivered = 0;
  let waiter: (() => void) | undefined;
  let target = 0;
  const receiver = https.createServer({ key: ca.keyPem, cert: ca.certPem }, (req, res) => {
    req.resume();
    req.on('end', () => {
      delivered++;
      res.writeHead(204).end();
      if (delivered >= target) waiter?.();
    });
  });
  await new Promise<void>((r) => receiver.listen(0, '127.0.0.1', r));
  const receiverUrl = `https://127.0.0.1:${(receiver.address() as AddressInfo).port}/hook`;

  const gw = await startBenchGateway('feed', { env: { JOBS: 'true', ALLOW_PRIVATE_TARGETS: 'true', OUTBOUND_CA_FILE: ca.caFile } });
  try {
    const base = gw.httpUrl;
    const accounts = gw.services.accounts as unknown as { create(i: { name: string }): Promise<{ id: string }> };
    const plain = await accounts.create({ name: 'bench feed, no subscription' });
    const subscribed = await accounts.create({ name: 'bench feed, one subscription' });
    // the typed client generated from the gateway's own document (src/clients/api.ts): a contract change breaks this bench at compile time
    const anon = gatewayClient(base);
    const token = async (accountId: string, roles: string[]) =>
      (await must(anon.POST('/dev/token', { body: { realm: `acc-${accountId}`, sub: `bench-${roles[0]}`, roles } }))).access_token;
    const admin = gatewayClient(base, { bearer: await token(subscribed.id, ['admin']) });
    await must(admin.POST('/provisioning/v1/state-change-subscriptions', { body: { target_url: receiverUrl, acknowledge_polling_still_mandatory: true } }));

    // --- 1. written and delivered
    const writeRound = async (withSubscription: boolean) => {
      const account = withSubscription ? subscribed : plain;
      target = delivered + (withSubscription ? CHANGES_PER_ROUND : 0);
      const all = withSubscription ? new Promise<void>((r) => (waiter = r)) : Promise.resolve();
      const t0 = performance.now();
      await writeChanges(gw, account.id, CHANGES_PER_ROUND);
      const written = performance.now() - t0;
      await all;
      const end = performance.now() - t0;
      return { written: CHANGES_PER_ROUND / (written / 1000), delivered: withSubscription ? CHANGES_PER_ROUND / (end / 1000) : 0 };
    };
    console.log('warm-up...');
    await writeRound(false);
    await writeRound(true);
    const base1: number[] = [];
    const subWritten: number[] = [];
    const subDelivered: number[] = [];
    const loadBefore = os.loadavg()[0];
    for (let i = 0; i < rounds; i++) {
      const b = await writeRound(false);
      const s = await writeRound(true);
      base1.push(b.written);
      subWritten.push(s.written);
      subDelivered.push(s.delivered);
      console.log(`round ${i + 1}: no subscription ${b.written.toFixed(0)} changes/s written; one subscription ${s.written.toFixed(0)} written, ${s.delivered.toFixed(0)} delivered end to end`);
    }

    // --- 2. feed pages/s (a log of the changes written above: pages of 100 from its start)
    const viewer = await token(subscribed.id, ['viewer']);
    const reader = gatewayClient(base, { bearer: viewer });
    const model = await must(admin.POST('/api/v1/models', { body: { vid: 'FFF8', pid: '0001', name: 'bench', provisioning_method: 'none' } }));
    const service = await must(admin.POST('/api/v1/factory-services', { body: { role: 'provision', model_id: model.id, endpoint_url: 'https://factory.example' } }));
    const creds: Credentials = { accessKeyId: service.access_key_id, secretAccessKey: service.secret_access_key };
    // full pages from many places in the log and in the things: a signature is accepted once, so
    // every signed request needs a target of its own within its second
    const feedPage = (since?: string, limit = 100) => must(reader.GET('/provisioning/v1/state-changes', { params: { query: { since, limit } } }));
    const thingsPage = (after?: string, limit = 100) => must(reader.GET('/provisioning/v1/things', { params: { query: { after, limit } } }));
    const cursors: string[] = [];
    for (let page = await feedPage(); page.has_more; page = await feedPage(page.next_cursor)) cursors.push(page.next_cursor);
    const afters: string[] = [];
    for (let page = await thingsPage(); page.next_cursor; page = await thingsPage(page.next_cursor)) afters.push(page.next_cursor);
    cursors.splice(-2);
    afters.splice(-2);
    const LIMITS = 10; // limit 91..100: pages of nearly the same size, ten times as many targets
    const feedTarget = (i: number) => `/provisioning/v1/state-changes?since=${cursors[i % cursors.length]}&limit=${100 - (Math.floor(i / cursors.length) % LIMITS)}`;
    const thingsTarget = (i: number) => `/provisioning/v1/things?after=${afters[i % afters.length]}&limit=${100 - (Math.floor(i / afters.length) % LIMITS)}`;
    if ((await feedPage(cursors[0])).items.length !== 100 || (await thingsPage(afters[0])).items.length !== 100) throw new Error('expected full pages');
    const host = new URL(base).host;
    let n = 0;
    const run = (path: () => string, headers: (p: string) => Record<string, string>) => (seconds: number) => autocannon({
      url: base, connections, duration: seconds, pipelining: 1,
      requests: [{ method: 'GET', setupRequest: (req) => { const p = path(); return { ...req, path: p, headers: { ...req.headers, ...headers(p) } }; } }],
    });
    const bearer = () => ({ authorization: `Bearer ${viewer}` });
    const feedRun = run(() => feedTarget(n++), bearer);
    const thingsRun = run(() => thingsTarget(n++), bearer);
    const signedRun = run(() => feedTarget(n++), (p) => signedHeaders(creds, { method: 'GET', target: p, host, timestamp: signingTimestamp() }));
    console.log(`${cursors.length * LIMITS} feed targets, ${afters.length * LIMITS} things targets`);
    await thingsRun(2);
    await feedRun(2);
    const things: number[] = [];
    const feed: number[] = [];
    const signedFeed: number[] = [];
    let errors = 0;
    for (let i = 0; i < rounds; i++) {
      const t = await thingsRun(duration);
      const f = await feedRun(duration);
      const s = await signedRun(duration);
      errors += t.errors + t.non2xx + f.errors + f.non2xx + s.errors + s.non2xx;
      things.push(t.requests.average);
      feed.push(f.requests.average);
      signedFeed.push(s.requests.average);
      console.log(`round ${i + 1}: things page ${t.requests.average.toFixed(0)}/s, feed page ${f.requests.average.toFixed(0)}/s (p99 ${f.latency.p99} ms), signed feed page ${s.requests.average.toFixed(0)}/s`);
    }

    const mean = (xs: number[]) => xs.reduce((s, x) => s + x, 0) / xs.length;
    const median = (xs: number[]) => {
      const s = [...xs].sort((x, y) => x - y);
      const m = Math.floor(s.length / 2);
      return s.length % 2 ? s[m] : (s[m - 1] + s[m]) / 2;
    };
    const ratio = (xs: number[], ys: number[]) => median(xs.map((x, i) => x / ys[i]));
    const lines = [
      `written, no subscription (baseline): ${mean(base1).toFixed(0)} changes/s`,
      `written, one subscription: ${mean(subWritten).toFixed(0)} changes/s (ratio ${ratio(subWritten, base1).toFixed(2)})`,
      `delivered end to end, one subscription: ${mean(subDelivered).toFixed(0)} changes/s (ratio ${ratio(subDelivered, base1).toFixed(2)})`,
      `things page of 100 (baseline): ${mean(things).toFixed(0)} pages/s`,
      `feed page of 100: ${mean(feed).toFixed(0)} pages/s (ratio ${ratio(feed, things).toFixed(2)}); signed: ${mean(signedFeed).toFixed(0)} pages/s (ratio ${ratio(signedFeed, things).toFixed(2)})`,
      `errors/non-2xx ${errors}; receiver got ${delivered} deliveries`,
    ];
    for (const l of lines) console.log(l);

    if (write) {
      writeBenchmarkSection([
        '## State-change feed and webhooks (`npm run bench:feed`)',
        '',
        `Measured ${new Date().toISOString().slice(0, 16)}Z on ${os.cpus().length} cores, Node ${process.versions.node}: one gateway (embedded`,
        `PostgreSQL), ${rounds} alternating rounds. Writes: ${CHANGES_PER_ROUND} things born per round through the actor store by ${WRITERS} writers`,
        `(${PER_TX} to a transaction), for an account without a subscription and for one with an ACTIVE subscription whose HTTPS`,
        'receiver (same process, test CA) answers 204; delivered = first write to last delivery received. Pages: autocannon',
        `(${connections} connections, ${duration} s) with a viewer bearer token, full pages of 100. Load average (1 min) at the start: ${loadBefore.toFixed(2)}.`,
        '',
        '| Measure | Figure | Ratio to baseline |',
        '|---|---|---|',
        `| changes written/s, no subscription (baseline) | ${mean(base1).toFixed(0)} | 1 |`,
        `| changes written/s, one subscription | ${mean(subWritten).toFixed(0)} | ${ratio(subWritten, base1).toFixed(2)} |`,
        `| changes delivered/s end to end, one receiver | ${mean(subDelivered).toFixed(0)} | ${ratio(subDelivered, base1).toFixed(2)} |`,
        `| full-sync pages/s, \`GET /provisioning/v1/things?limit=100\` (baseline) | ${mean(things).toFixed(0)} | 1 |`,
        `| feed pages/s, \`GET /provisioning/v1/state-changes?since=..&limit=100\` | ${mean(feed).toFixed(0)} | ${ratio(feed, things).toFixed(2)} |`,
        `| feed pages/s, signed (SVC-HMAC-SHA256) | ${mean(signedFeed).toFixed(0)} | ${ratio(signedFeed, things).toFixed(2)} |`,
        '',
      ].join('\n'));
    }
    if (errors > 0) throw new Error(`${errors} errors or non-2xx answers`);
  } finally {
    await gw.stop();
    receiver.closeAllConnections();
    receiver.close();
    fs.rmSync(ca.dir, { recursive: true, force: true });
  }
}

main().catch((err) => {
  console.error(err);
  process.exit(1);
});
