import postgres from 'postgres';

export type Sql = postgres.Sql<Record<string, never>>;
export type Tx = postgres.TransactionSql<Record<string, never>>;
/** Either the pool or a transaction: repos take this so services decide the transaction. */
export type Db = Sql | Tx;

export interface SqlOptions {
  /** seconds to wait for a connection to open (postgres.js default: 30) */
  connectTimeoutSeconds?: number;
  /** seen in pg_stat_activity: tells the readiness connection from the pool's */
  applicationName?: string;
}

export function createSql(url: string, max = 10, options: SqlOptions = {}): Sql {
  return postgres(url, {
    max,
    onnotice: () => {},
    // bigint columns (counters, sequence numbers) come back as JS numbers: they stay far below 2^53.
    types: { bigint: { to: 20, from: [20], serialize: (x: number) => String(x), parse: (x: string) => Number(x) } },
    transform: { undefined: null },
    ...(options.connectTimeoutSeconds !== undefined ? { connect_timeout: options.connectTimeoutSeconds } : {}),
    connection: { application_name: options.applicationName ?? 'device-gateway' },
  }) as unknown as Sql;
}
