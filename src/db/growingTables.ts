import type { Logger } from '../log.js';
import type { Sql } from './client.js';

/** how often the tables' growth is looked at */
const CHECK_EVERY_MS = 10_000;
/** below this a wrong plan costs little, and an ANALYZE is not worth its statement */
const MIN_ROWS = 1_000;
/** every node takes the same lock: one of them analyzes */
const ANALYZE_LOCK = 0x7461626c; // 'tabl'

/**
 * Analyzes a table as soon as it has more than doubled since PostgreSQL last analyzed it.
 *
 * Why: a table's plans follow its statistics, and autovacuum analyzes a young table late (the first
 * visit of a new database can take minutes, then only after 10% of the rows changed). Until then the
 * planner believes what the migration left, an empty table, and prepared statements keep the plan they
 * made then. Measured (bench:enroll, docs/benchmarks.md): the claim query's identity lookup chose an
 * index on the account alone and read every thing of the account per claim; enrollments fell from 540/s
 * to 270/s within 15,000 things, PostgreSQL's CPU per enrollment from 0.5 to 2.8 ms. ANALYZE replaces
 * the statistics and invalidates the cached plans.
 *
 * Growth is counted in live rows (n_live_tup) against the rows the last ANALYZE saw (pg_class.reltuples),
 * not in modifications: tables updated in place all the time (last seen, counters) are not analyzed
 * again and again. A table that doubles is analyzed about log2(size) times in its life; from then on
 * autovacuum's own rule keeps up.
 */
export class GrowingTables {
  private timer: NodeJS.Timeout | undefined;
  private running: Promise<string[]> | undefined;

  constructor(private readonly sql: Sql, private readonly log: Logger) {}

  start(): void {
    this.timer = setInterval(() => void this.check().catch((err) => this.log.warn({ err }, 'table statistics check failed')), CHECK_EVERY_MS);
    this.timer.unref();
  }

  async stop(): Promise<void> {
    clearInterval(this.timer);
    this.timer = undefined;
    await this.running?.catch(() => {});
  }

  /** Analyzes the tables that have doubled; returns their names (none when another node holds the lock). */
  check(): Promise<string[]> {
    this.running ??= this.analyzeGrown().finally(() => (this.running = undefined));
    return this.running;
  }

  private async analyzeGrown(): Promise<string[]> {
    const grown = await this.sql<{ name: string }[]>`
      select quote_ident(s.schemaname) || '.' || quote_ident(s.relname) as name
      from pg_stat_user_tables s join pg_class c on c.oid = s.relid
      where s.n_live_tup >= ${MIN_ROWS} and (c.reltuples < 0 or s.n_live_tup > 2 * c.reltuples)
      order by s.relname`;
    if (!grown.length) return [];
    const names = grown.map((g) => g.name);
    const done = await this.sql.begin(async (tx) => {
      const [{ locked }] = await tx<{ locked: boolean }[]>`select pg_try_advisory_xact_lock(${ANALYZE_LOCK}) as locked`;
      if (!locked) return false;
      await tx.unsafe(`analyze ${names.join(', ')}`);
      return true;
    });
    if (!done) return [];
    this.log.info({ tables: names }, 'tables analyzed after they doubled');
    return names;
  }
}
