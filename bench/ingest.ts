/**
 * bench:ingest — items/s of `POST /wms-ingest/v1/stock/batch` with batches of 500 new items over
 * real HTTP (schema check, version lookup, business rules, one upsert, idempotency key and the
 * stored answer, all in one transaction), against a baseline in the same run: the same batches
 * stored by a plain multi-row INSERT into a table of the same shape (same unique key), straight
 * from this process with no HTTP and no checks. Both run with the same number of concurrent
 * clients, in alternating rounds.
 *
 *   npm run bench:ingest [-- --rounds 4 --connections 4 --duration 5 --no-write]
 *
 * Starts one gateway (embedded PostgreSQL in a temporary folder). Rewrites its section of
 * docs/benchmarks.md unless --no-write.
 */
import crypto from 'node:crypto';
import os from 'node:os';
import { createSql } from '../src/db/client.js';
import { writeBenchmarkSection } from './lib/report.js';
import { startBenchGateway } from './lib/gateway.js';
import { roundOptions } from './lib/args.js';
import { gatewayClient, must, type Schemas } from '../src/clients/api.js';

const BATCH = 500;
const { duration, connections, rounds, write } = roundOptions();

/** Runs `send` from `connections` concurrent clients for `seconds`; items stored per second. */
async function measure(seconds: number, send: () => Promise<void>): Promise<number> {
  let batches = 0;
  const end = performance.now() + seconds * 1000;
  const start = performance.now();
  await Promise.all(Array.from({ length: connections }, async () => {
    while (performance.now() < end) {
      await send();
      batches++;
    }
  }));
  return (batches * BATCH) / ((performance.now() - start) / 1000);
}

async function main() {
  const gw = await startBenchGateway('ingest', { env: { INGEST_RATE_LIMIT: '1000000' } });
  const sql = createSql(gw.databaseUrl, connections);
  try {
    const base = gw.httpUrl;
    const account = await gw.services.accounts.create({ name: 'bench' });
    // through the typed client generated from the gateway's document (src/clients/api.ts), the measured
    // batches too: the bench measures the ingest path (a 500-item batch), not the HTTP client
    const token = (await must(gatewayClient(base).POST('/dev/token', { body: { realm: `acc-${account.id}`, sub: 'bench-operator', roles: ['admin', 'operator'] } }))).access_token;
    const client = gatewayClient(base, { bearer: token });
    await must(client.PUT('/wms-ingest/v1/warehouses/{warehouse_id}', { params: { path: { warehouse_id: 'WH-B' } }, body: { name: 'bench' } }));
    await sql`create table bench_plain (like ingest_records including all)`;

    let n = 0;
    const items = () => {
      const first = n;
      n += BATCH;
      return Array.from({ length: BATCH }, (_, i) => ({ source_id: `S-${first + i}`, source_version: 1, sku: `SKU-${(first + i) % 5000}`, location: `A-${i % 40}-${i % 7}`, quantity: (first + i) % 97 }));
    };
    const api = async () => {
      const body: Schemas['IngestBatch'] = { partner_id: account.id, correlation_id: `b-${n}`, mode: 'DELTA', warehouse_id: 'WH-B', items: items() };
      const res = await must(client.POST('/wms-ingest/v1/stock/batch', { body }));
      if (res.summary.accepted !== BATCH) throw new Error(`expected ${BATCH} accepted: ${JSON.stringify(res.summary)}`);
    };
    const plain = async () => {
      const rows = items().map((item) => ({
        internal_id: crypto.randomUUID(), account_id: account.id, warehouse_id: 'WH-B', resource: 'stock',
        source_id: item.source_id, source_version: item.source_version, data: sql.json(item as never),
      }));
      await sql`insert into bench_plain ${sql(rows as never)}`;
    };

    console.log('warm-up...');
    await measure(1, plain);
    await measure(2, api);

    const apiRates: number[] = [];
    const plainRates: number[] = [];
    const loadBefore = os.loadavg()[0];
    for (let i = 0; i < rounds; i++) {
      const p = await measure(duration, plain);
      const a = await measure(duration, api);
      plainRates.push(p);
      apiRates.push(a);
      console.log(`round ${i + 1}: plain INSERT ${p.toFixed(0)} items/s, ingest API ${a.toFixed(0)} items/s (ratio ${(a / p).toFixed(2)})`);
    }
    const mean = (xs: number[]) => xs.reduce((s, x) => s + x, 0) / xs.length;
    const ratios = apiRates.map((x, i) => x / plainRates[i]).sort((x, y) => x - y);
    const mid = Math.floor(ratios.length / 2);
    const ratio = ratios.length % 2 ? ratios[mid] : (ratios[mid - 1] + ratios[mid]) / 2;
    const [{ records }] = await sql<{ records: number }[]>`select count(*)::int as records from ingest_records`;
    console.log(`plain INSERT: ${mean(plainRates).toFixed(0)} items/s; ingest API: ${mean(apiRates).toFixed(0)} items/s; ratio ${ratio.toFixed(2)} [${ratios.map((r) => r.toFixed(2)).join(', ')}]; ${records} records stored by the API`);

    if (write) {
      writeBenchmarkSection([
        '## Ingest batches (`npm run bench:ingest`)',
        '',
        `Measured ${new Date().toISOString().slice(0, 16)}Z on ${os.cpus().length} cores, Node ${process.versions.node}: one gateway,`,
        `${connections} concurrent clients, ${rounds} alternating rounds of ${duration} s, batches of ${BATCH} new stock items.`,
        'The API path: HTTP, JSON parse and input guard, bearer token, warehouse scope, idempotency key, per-item',
        'schema and rules, version lookup, one upsert, the stored answer, in one transaction. Baseline: the same',
        'rows stored by a plain multi-row INSERT (postgres.js) into a table of the same shape, from the benchmark process.',
        `Load average (1 min) when the run started: ${loadBefore.toFixed(2)}.`,
        '',
        '| Path | Items/s (mean) |',
        '|---|---|',
        `| plain INSERT (baseline) | ${mean(plainRates).toFixed(0)} |`,
        `| \`POST /wms-ingest/v1/stock/batch\` | ${mean(apiRates).toFixed(0)} |`,
        `| **ratio** (median of the per-round ratios ${ratios.map((r) => r.toFixed(2)).join(', ')}) | **${ratio.toFixed(2)}** |`,
        '',
      ].join('\n'));
    }
  } finally {
    await sql.end({ timeout: 5 });
    await gw.stop();
  }
}

main().catch((err) => {
  console.error(err);
  process.exit(1);
});
