/**
 * What an idle gateway asks its database (issue 36 item 4): one gateway in this process (embedded
 * PostgreSQL, JOBS on), left alone 15 s, then for 60 s the transactions committed on its database
 * (pg_stat_database; a statement outside a transaction counts one) and this process's CPU.
 *
 *   npx tsx bench/idle-statements.ts [label]
 *   (cd <other checkout> && npx tsx /path/to/bench/idle-statements.ts before)   compare a checkout
 */
import { startBenchGateway } from './lib/gateway.js';
const gw = await startBenchGateway('idleprobe', { env: { JOBS: 'true' } });
const sql = gw.gw.sql;
const read = async () => (await sql`select xact_commit::int + xact_rollback::int as x from pg_stat_database where datname = current_database()`)[0].x as number;
await new Promise((r) => setTimeout(r, 15_000));
const c0 = process.cpuUsage(); const x0 = await read(); const t0 = Date.now();
await new Promise((r) => setTimeout(r, 60_000));
const x1 = await read(); const cpu = process.cpuUsage(c0); const s = (Date.now() - t0) / 1000;
console.log(`RESULT ${process.argv[2] ?? 'gateway'}: ${((x1 - x0 - 1) / s).toFixed(2)} transactions/s on its database (statements outside a transaction count one each), gateway process CPU ${((cpu.user + cpu.system) / 1e4 / s).toFixed(2)}% of a core over ${s.toFixed(0)} s`);
await gw.stop();
process.exit(0);
