import type { AedesPublishPacket } from 'aedes';
import type { Sql } from '../db/client.js';
import type { Logger } from '../log.js';
import { parseDeviceTopic } from './topics.js';

/** The device topics kept in the log (migration 1960): twin reports and command replies. */
export type DeviceLogKind = 'twin' | 'commandReply';

/** A place in the log of one kind: everything at or before (tx, seq) was read. */
export interface DeviceLogPosition {
  /** xid8 as decimal text */
  tx: string;
  /** bigint as decimal text */
  seq: string;
}

export interface DeviceLogRow {
  tx: string;
  seq: string;
  thingId: string;
  /** the JSON text as stored: a reply's bytes as the device sent them, a twin report as stored */
  payload: string;
  /** a reply's MQTT 5 correlation data (the command id), when it came with one */
  correlation: string | null;
  at: Date;
}

const MAX_SEQ = '9223372036854775807';
/** rows deleted per statement by the retention sweep (short transactions, no long lock) */
const PRUNE_BATCH = 10_000;
const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;
/** correlation data kept as text: printable ASCII (the gateway's command ids are UUIDs) */
const PRINTABLE = /^[\x20-\x7e]{1,200}$/;

/**
 * The log of the twin reports and command replies devices publish, for readers that resume from a
 * position (data bridges, src/bridges/): an account's rows of one kind in (tx, seq) order, only
 * those written by transactions below the snapshot's xmin (every transaction there has ended, so
 * no row can appear behind a position later; as TelemetryLog). A twin report's row is written by
 * the statement that stores the reported state (BrokerRepo.setReported); a reply's here, by the
 * node holding the device's connection, one device's replies one after another (their order).
 */
export class DeviceMessageLog {
  /** replies being written, chained per device so that they commit in the order it sent them */
  private readonly writes = new Map<string, Promise<boolean>>();

  constructor(private readonly sql: Sql, private readonly log: Logger) {}

  /** Waits for the replies taken so far to be written (before the database closes). */
  async stop(): Promise<void> {
    await Promise.all([...this.writes.values()]);
  }

  /**
   * The write of the device's replies taken so far (true: stored), or undefined when none is under
   * way: what its QoS 1 PUBACK waits for (service.ts `whenStored`).
   */
  written(thingId: string): Promise<boolean> | undefined {
    return this.writes.get(thingId);
  }

  /**
   * A command reply a device on this node published (its payload checked as JSON before the broker
   * took it, service.ts): logged under its account, after the device's earlier replies. Called
   * before its PUBACK, which waits for `written`.
   */
  recordReply(thingId: string, packet: Pick<AedesPublishPacket, 'payload'> & { properties?: unknown }): void {
    const payload = Buffer.from(packet.payload as Buffer).toString('utf8');
    const data = (packet as { properties?: { correlationData?: Buffer | Uint8Array } }).properties?.correlationData;
    const text = data ? Buffer.from(data).toString('latin1') : undefined;
    const correlation = text !== undefined && PRINTABLE.test(text) ? text : null;
    const previous = this.writes.get(thingId) ?? Promise.resolve(true);
    const next = previous
      .then(() => this.insertReply(thingId, payload, correlation))
      .then(() => true, (err) => {
        this.log.error({ err, thingId }, 'command reply not logged');
        return false;
      });
    this.writes.set(thingId, next);
    void next.then(() => {
      if (this.writes.get(thingId) === next) this.writes.delete(thingId);
    });
  }

  /** One reply, under its thing's account (a thing of no account has no reader: not kept). */
  private async insertReply(thingId: string, payload: string, correlation: string | null): Promise<void> {
    if (!UUID.test(thingId)) return;
    await this.sql`
      insert into device_message_log (account_id, thing_id, kind, payload, correlation)
      select d.account_id, ${thingId}, 'commandReply', ${payload}::text::json, ${correlation}
      from thing_directory d where d.id = ${thingId}::uuid and d.account_id is not null`;
  }

  /** The position after everything committed so far (where a new reader starts). */
  async head(): Promise<DeviceLogPosition> {
    const [{ xmin }] = await this.sql<{ xmin: string }[]>`select pg_snapshot_xmin(pg_current_snapshot())::text as xmin`;
    return { tx: (BigInt(xmin) - 1n).toString(), seq: MAX_SEQ };
  }

  /** Up to `limit` rows of the account's things of `kind` after `after`, in the log's order. */
  async read(accountId: string, kind: DeviceLogKind, after: DeviceLogPosition, limit: number): Promise<DeviceLogRow[]> {
    const rows = await this.sql<{ tx: string; seq: string; thing_id: string; payload: string; correlation: string | null; at: Date }[]>`
      with h as materialized (select pg_snapshot_xmin(pg_current_snapshot()) as xmin)
      select m.tx::text as tx, m.seq::text as seq, m.thing_id, m.payload::text as payload, m.correlation, m.at
      from h, device_message_log m
      where m.account_id = ${accountId} and m.kind = ${kind}
        and (m.tx, m.seq) > (${after.tx}::xid8, ${after.seq}::bigint) and m.tx < h.xmin
      order by m.tx, m.seq
      limit ${limit}`;
    return rows.map((r) => ({ tx: r.tx, seq: r.seq, thingId: r.thing_id, payload: r.payload, correlation: r.correlation, at: r.at }));
  }

  /** What the account's log of `kind` holds after `after` (at most `bound` rows counted): messages and the oldest one's time. */
  async behind(accountId: string, kind: DeviceLogKind, after: DeviceLogPosition, bound = 2_000): Promise<{ messages: number; oldest: Date | null }> {
    const [r] = await this.sql<{ messages: number; oldest: Date | null }[]>`
      select count(*)::int as messages, min(at) as oldest from (
        select m.at from device_message_log m
        where m.account_id = ${accountId} and m.kind = ${kind} and (m.tx, m.seq) > (${after.tx}::xid8, ${after.seq}::bigint)
        limit ${bound}) x`;
    return r;
  }

  /** Deletes the rows older than `retentionDays` (the telemetry history's retention); returns how many. */
  async prune(retentionDays: number, now = new Date()): Promise<number> {
    const cutoff = new Date(now.getTime() - retentionDays * 86_400_000);
    let total = 0;
    for (;;) {
      const r = await this.sql`
        delete from device_message_log where ctid in (select ctid from device_message_log where at < ${cutoff} limit ${PRUNE_BATCH})`;
      total += r.count;
      if (r.count < PRUNE_BATCH) return total;
    }
  }
}
