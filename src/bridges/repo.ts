import type { Db, Sql } from '../db/client.js';

export interface BridgeRow {
  id: string; account_id: string; name: string; type: 'nats' | 'amqp'; url: string; secret_sealed: Buffer;
  subject_prefix: string; exchange: string | null; created_at: Date; updated_at: Date;
}

export interface RuleRow {
  id: string; account_id: string; bridge_id: string; name: string; from_filter: string; source: 'telemetry' | 'connectivity' | 'state' | 'twin' | 'commandReply';
  where_expr: unknown; select_fields: string[] | null; format: 'event' | 'batch'; status: string; failing_since: Date | null; last_error: string | null; last_error_at: Date | null;
  pos_xid: string; pos_thing: string | null; pos_seq: string | null; delivered: string; failed: string; last_delivered_at: Date | null;
  created_at: Date; updated_at: Date;
}

export interface EventRow { xid: string; seq: string; actor_id: string; type: string; payload: Record<string, unknown>; created_at: Date }

const RULE_COLUMNS = 'id, account_id, bridge_id, name, from_filter, source, where_expr, select_fields, format, status, failing_since, last_error, last_error_at, pos_xid::text as pos_xid, pos_thing, pos_seq::text as pos_seq, delivered::text as delivered, failed::text as failed, last_delivered_at, created_at, updated_at';

/** Event types each event source reads (index domain_events_bridges, migration 1800). */
export const SOURCE_EVENTS = {
  connectivity: ['device.connected', 'device.disconnected'],
  state: ['thing.stateChanged', 'thing.enrolled'],
} as const;

/** SQL of the bridges domain: its tables, and the actor store's event log (a published read model). */
export class BridgesRepo {
  constructor(private readonly sql: Sql) {}

  async insertBridge(b: Omit<BridgeRow, 'created_at' | 'updated_at'>, at: Date): Promise<void> {
    await this.sql`
      insert into bridges (id, account_id, name, type, url, secret_sealed, subject_prefix, exchange, created_at, updated_at)
      values (${b.id}, ${b.account_id}, ${b.name}, ${b.type}, ${b.url}, ${b.secret_sealed}, ${b.subject_prefix}, ${b.exchange}, ${at}, ${at})`;
  }

  async bridge(accountId: string, id: string): Promise<BridgeRow | undefined> {
    const [row] = await this.sql<BridgeRow[]>`select * from bridges where account_id = ${accountId} and id = ${id}`;
    return row;
  }

  async bridgeById(id: string): Promise<BridgeRow | undefined> {
    const [row] = await this.sql<BridgeRow[]>`select * from bridges where id = ${id}`;
    return row;
  }

  async bridges(accountId: string): Promise<BridgeRow[]> {
    return this.sql<BridgeRow[]>`select * from bridges where account_id = ${accountId} order by created_at, id limit 1000`;
  }

  async updateBridge(id: string, b: { name: string; url: string; secret_sealed: Buffer; subject_prefix: string; exchange: string | null }, at: Date): Promise<void> {
    await this.sql`
      update bridges set name = ${b.name}, url = ${b.url}, secret_sealed = ${b.secret_sealed}, subject_prefix = ${b.subject_prefix},
        exchange = ${b.exchange}, updated_at = ${at}
      where id = ${id}`;
  }

  async deleteBridge(id: string): Promise<void> {
    await this.sql`delete from bridges where id = ${id}`;
  }

  async rulesOfBridge(id: string): Promise<number> {
    const [{ n }] = await this.sql<{ n: number }[]>`select count(*)::int as n from bridge_rules where bridge_id = ${id}`;
    return n;
  }

  /** Inserted before its actor is created (the store projects the status onto it). */
  async insertRule(sql: Db, r: { id: string; account_id: string; bridge_id: string; name: string; from_filter: string; source: string; where_expr: unknown; select_fields: string[] | null; format: string; pos_xid: string; pos_thing: string | null; pos_seq: string | null; created_by: string }, at: Date): Promise<void> {
    await sql`
      insert into bridge_rules (id, account_id, bridge_id, name, from_filter, source, where_expr, select_fields, format, pos_xid, pos_thing, pos_seq, created_by, created_at, updated_at)
      values (${r.id}, ${r.account_id}, ${r.bridge_id}, ${r.name}, ${r.from_filter}, ${r.source}, ${r.where_expr === null ? null : sql.json(r.where_expr as never)},
        ${r.select_fields}, ${r.format}, ${r.pos_xid}::xid8, ${r.pos_thing}, ${r.pos_seq}, ${r.created_by}, ${at}, ${at})`;
  }

  async rule(accountId: string, id: string): Promise<RuleRow | undefined> {
    const [row] = await this.sql.unsafe<RuleRow[]>(`select ${RULE_COLUMNS} from bridge_rules where account_id = $1 and id = $2`, [accountId, id]);
    return row;
  }

  async ruleById(id: string): Promise<RuleRow | undefined> {
    const [row] = await this.sql.unsafe<RuleRow[]>(`select ${RULE_COLUMNS} from bridge_rules where id = $1`, [id]);
    return row;
  }

  async rules(accountId: string): Promise<RuleRow[]> {
    return this.sql.unsafe<RuleRow[]>(`select ${RULE_COLUMNS} from bridge_rules where account_id = $1 order by created_at, id limit 1000`, [accountId]);
  }

  async updateRule(sql: Db, id: string, r: { name: string; where_expr: unknown; select_fields: string[] | null; format: string }, at: Date): Promise<void> {
    await sql`
      update bridge_rules set name = ${r.name}, where_expr = ${r.where_expr === null ? null : sql.json(r.where_expr as never)},
        select_fields = ${r.select_fields}, format = ${r.format}, updated_at = ${at}
      where id = ${id}`;
  }

  async deleteRule(sql: Db, id: string): Promise<void> {
    await sql`delete from bridge_rules where id = ${id}`;
  }

  /**
   * Takes or renews this node's lease of the active rules (ENABLED or FAILING) that no other node
   * holds: one node delivers a rule at a time. Returns the rules this node holds now.
   */
  async lease(node: string, seconds: number): Promise<RuleRow[]> {
    return this.sql.unsafe<RuleRow[]>(`
      update bridge_rules set lease_node = $1, lease_until = now() + make_interval(secs => $2)
      where status in ('ENABLED', 'FAILING') and (lease_node = $1 or lease_node is null or lease_until < now())
      returning ${RULE_COLUMNS}`, [node, seconds]);
  }

  async releaseLeases(node: string): Promise<void> {
    await this.sql`update bridge_rules set lease_node = null, lease_until = null where lease_node = ${node}`;
  }

  /** Moves a rule's position (only while this node holds it) and counts what the sink took. */
  async advance(id: string, node: string, p: { xid: string; thing: string | null; seq: string | null }, delivered: number): Promise<boolean> {
    // committed without waiting for its WAL flush (synchronous_commit off for this statement's own
    // transaction): a position lost in a crash only sends its batch again, which at least once allows
    // and the sink's deduplication drops by id; a flush per delivery would take turns with the
    // ingest's commits, which the devices' PUBACKs wait for
    const r = await this.sql`
      update bridge_rules set pos_xid = ${p.xid}::xid8, pos_thing = ${p.thing}, pos_seq = ${p.seq},
        delivered = delivered + ${delivered}, last_delivered_at = case when ${delivered}::int > 0 then now() else last_delivered_at end
      where id = ${id} and lease_node = ${node} and (select set_config('synchronous_commit', 'off', true)) is not null`;
    return r.count === 1;
  }

  async countFailed(id: string, n: number): Promise<void> {
    await this.sql`update bridge_rules set failed = failed + ${n} where id = ${id}`;
  }

  /** The account's events of `types` after (xid, seq), below the horizon, in the log's order. */
  async events(accountId: string, types: readonly string[], xid: string, seq: string, limit: number): Promise<EventRow[]> {
    return this.sql<EventRow[]>`
      with h as materialized (select pg_snapshot_xmin(pg_current_snapshot()) as xmin)
      select e.xid::text as xid, e.seq::text as seq, e.actor_id, e.type, e.payload, e.created_at
      from h, domain_events e
      where e.account_id = ${accountId} and e.type in ${this.sql(types as string[])}
        and (e.xid, e.seq) > (${xid}::xid8, ${seq}::bigint) and e.xid < h.xmin
      order by e.xid, e.seq
      limit ${limit}`;
  }

  async eventsBehind(accountId: string, types: readonly string[], xid: string, seq: string): Promise<{ messages: number; oldest: Date | null }> {
    const [r] = await this.sql<{ messages: number; oldest: Date | null }[]>`
      select count(*)::int as messages, min(created_at) as oldest from (
        select e.created_at from domain_events e
        where e.account_id = ${accountId} and e.type in ${this.sql(types as string[])} and (e.xid, e.seq) > (${xid}::xid8, ${seq}::bigint)
        limit 2000) x`;
    return r;
  }

  async horizon(): Promise<string> {
    const [{ xmin }] = await this.sql<{ xmin: string }[]>`select pg_snapshot_xmin(pg_current_snapshot())::text as xmin`;
    return xmin;
  }
}
