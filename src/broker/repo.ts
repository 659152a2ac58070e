import type { Sql } from '../db/client.js';

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;

export interface ConnectivityRow {
  thing_id: string;
  connected: boolean;
  node_id: string | null;
  protocol_version: number | null;
  connected_at: Date | null;
  disconnected_at: Date | null;
  last_seen: Date | null;
}

export interface TwinRow {
  reported: Record<string, unknown>;
  reported_version: number;
  reported_at: Date | null;
  desired: Record<string, unknown>;
  desired_version: number;
  desired_at: Date | null;
}

/** SQL of the broker domain (device connectivity, telemetry, twins). */
/** a thing's latest values of a batch: `telemetry` is the text of a checked JSON object, `at` epoch ms */
export interface TelemetryRow { thing_id: string; telemetry: string; at: number }
/** when a thing was last seen, epoch ms */
export interface SeenRow { thing_id: string; at: number }

export class BrokerRepo {
  constructor(private readonly sql: Sql) {}

  /**
   * A batch of connects of this node, one statement; each thing at most once per batch (an upsert
   * cannot touch a row twice; the caller splits the batch so a thing's changes stay in order).
   */
  async markConnectedMany(nodeId: string, rows: { thing_id: string; session_id: string; protocol_version: number }[]): Promise<void> {
    if (rows.length === 0) return;
    await this.sql`
      insert into device_connectivity (thing_id, connected, node_id, session_id, protocol_version, connected_at, last_seen)
      select x.thing_id, true, ${nodeId}, x.session_id, x.protocol_version, now(), now()
      from jsonb_to_recordset(${this.sql.json(rows as never)}) as x(thing_id text, session_id uuid, protocol_version int)
      on conflict (thing_id) do update set connected = true, node_id = excluded.node_id, session_id = excluded.session_id,
        protocol_version = excluded.protocol_version, connected_at = now(), last_seen = now()`;
  }

  /**
   * A batch of disconnects, one statement (each thing at most once): returns the things whose
   * given session was their current one (a newer session, maybe on another node, is left alone).
   */
  async markDisconnectedMany(rows: { thing_id: string; session_id: string }[]): Promise<Set<string>> {
    if (rows.length === 0) return new Set();
    const ended = await this.sql<{ thing_id: string }[]>`
      update device_connectivity c set connected = false, disconnected_at = now()
      from jsonb_to_recordset(${this.sql.json(rows as never)}) as x(thing_id text, session_id uuid)
      where c.thing_id = x.thing_id and c.session_id = x.session_id and c.connected
      returning c.thing_id`;
    return new Set(ended.map((r) => r.thing_id));
  }

  /** Sessions of nodes that are gone (crashed, or this node's previous run) are not connected. */
  async releaseDeadNodes(nodeId: string, ttlSeconds: number): Promise<void> {
    await this.sql`
      update device_connectivity c set connected = false, disconnected_at = now()
      where c.connected and (c.node_id = ${nodeId} or not exists (
        select 1 from broker_nodes n where n.node_id = c.node_id and n.heartbeat_at > now() - make_interval(secs => ${ttlSeconds})))`;
  }

  async connectivity(thingId: string): Promise<ConnectivityRow | undefined> {
    const [row] = await this.sql<ConnectivityRow[]>`
      select thing_id, connected, node_id, protocol_version, connected_at, disconnected_at, last_seen
      from device_connectivity where thing_id = ${thingId}`;
    return row;
  }

  /**
   * One statement per batch: latest telemetry merged per key. Each row's `telemetry` is a JSON
   * object's text (checked), so the batch's JSON is put together as text and parsed once, by
   * PostgreSQL: the gateway never parses or encodes the values.
   */
  async writeTelemetry(rows: TelemetryRow[]): Promise<void> {
    const json = `[${rows.map((r) => `{"thing_id":${JSON.stringify(r.thing_id)},"at":${r.at},"telemetry":${r.telemetry}}`).join(',')}]`;
    await this.sql`
      insert into device_telemetry_latest (thing_id, telemetry, updated_at)
      select x.thing_id, x.telemetry, to_timestamp(x.at / 1000) from jsonb_to_recordset(${json}::text::jsonb) as x(thing_id text, telemetry jsonb, at float8)
      on conflict (thing_id) do update set telemetry = device_telemetry_latest.telemetry || excluded.telemetry,
        updated_at = greatest(device_telemetry_latest.updated_at, excluded.updated_at)`;
  }

  /** One statement per batch: last seen advanced (`at` in epoch ms). */
  async writeSeen(rows: SeenRow[]): Promise<void> {
    const json = `[${rows.map((r) => `{"thing_id":${JSON.stringify(r.thing_id)},"at":${r.at}}`).join(',')}]`;
    await this.sql`
      insert into device_connectivity (thing_id, last_seen)
      select x.thing_id, to_timestamp(x.at / 1000) from jsonb_to_recordset(${json}::text::jsonb) as x(thing_id text, at float8)
      on conflict (thing_id) do update set last_seen = greatest(device_connectivity.last_seen, excluded.last_seen)`;
  }

  async telemetry(thingId: string): Promise<{ telemetry: Record<string, unknown>; updated_at: Date } | undefined> {
    const [row] = await this.sql<{ telemetry: Record<string, unknown>; updated_at: Date }[]>`
      select telemetry, updated_at from device_telemetry_latest where thing_id = ${thingId}`;
    return row;
  }

  async twin(thingId: string): Promise<TwinRow | undefined> {
    const [row] = await this.sql<TwinRow[]>`
      select reported, reported_version, reported_at, desired, desired_version, desired_at from device_twins where thing_id = ${thingId}`;
    return row;
  }

  /**
   * Stores the reported state and, in the same statement, appends it to the device message log
   * (deviceLog.ts) under the thing's account: a data bridge rule reads it from there.
   */
  async setReported(thingId: string, reported: Record<string, unknown>): Promise<number> {
    const text = JSON.stringify(reported);
    // (a thing id is a UUID; another id has no account and no log row, and is never cast)
    const thing = UUID.test(thingId) ? thingId : null;
    const [row] = await this.sql<{ reported_version: number }[]>`
      with twin as (
        insert into device_twins (thing_id, reported, reported_version, reported_at) values (${thingId}, ${text}::text::jsonb, 1, now())
        on conflict (thing_id) do update set reported = excluded.reported, reported_version = device_twins.reported_version + 1, reported_at = now()
        returning reported_version
      ), logged as (
        insert into device_message_log (account_id, thing_id, kind, payload)
        select d.account_id, ${thingId}, 'twin', ${text}::text::json
        from thing_directory d where d.id = ${thing}::uuid and d.account_id is not null
      )
      select reported_version from twin`;
    return row.reported_version;
  }

  /** New desired state; with `ifVersion`, only when the current version still matches (else undefined). */
  async setDesired(thingId: string, desired: Record<string, unknown>, ifVersion?: number): Promise<{ desired_version: number; desired_at: Date } | undefined> {
    const json = this.sql.json(desired as never);
    if (ifVersion === undefined || ifVersion === 0) {
      const [row] = await this.sql<{ desired_version: number; desired_at: Date }[]>`
        insert into device_twins (thing_id, desired, desired_version, desired_at) values (${thingId}, ${json}, 1, now())
        on conflict (thing_id) do update set desired = excluded.desired, desired_version = device_twins.desired_version + 1, desired_at = now()
          where ${ifVersion === undefined} or device_twins.desired_version = 0
        returning desired_version, desired_at`;
      return row;
    }
    const [row] = await this.sql<{ desired_version: number; desired_at: Date }[]>`
      update device_twins set desired = ${json}, desired_version = desired_version + 1, desired_at = now()
      where thing_id = ${thingId} and desired_version = ${ifVersion}
      returning desired_version, desired_at`;
    return row;
  }
}
