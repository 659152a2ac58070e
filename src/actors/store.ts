import { createActor, type AnyActorRef, type AnyMachineSnapshot, type AnyStateMachine, type EventFromLogic, type SnapshotFrom, type InputFrom } from 'xstate';
import type { Sql, Tx } from '../db/client.js';
import { conflict, internal, notFound } from '../lib/errors.js';
import type { Cluster, DomainBus } from './cluster.js';

/**
 * How an actor kind's snapshot shows in its domain row: the columns that queries filter and sort
 * on (state, status, counters). The store writes them in the same transaction as the snapshot;
 * no other code writes them (the architecture check in test/architecture.test.ts enforces it).
 * The domain row must exist before the actor is created (insert it first, in the same unit of work).
 */
export interface Projection<M extends AnyStateMachine> {
  table: string;
  /** key column holding the actor id (default `id`) */
  key?: string;
  /** the projected column names */
  columns: readonly string[];
  project(snapshot: SnapshotFrom<M>, state: string): Record<string, unknown>;
}

/** How a machine is stored: its actor type (table key), its owning account, its projection. */
export interface ActorKind<M extends AnyStateMachine> {
  type: string;
  machine: M;
  accountOf?: (context: SnapshotFrom<M>['context']) => string | null | undefined;
  projection?: Projection<M>;
}

// eslint-disable-next-line @typescript-eslint/no-explicit-any
export type AnyActorKind = ActorKind<any>;

export interface EmittedEvent {
  type: string;
  [key: string]: unknown;
}

export interface StoredEvent {
  seq: number;
  id: string;
  actorType: string;
  actorId: string;
  type: string;
  accountId: string | null;
  payload: Record<string, unknown>;
  createdAt: string;
}

export interface ActorResult<M extends AnyStateMachine> {
  snapshot: SnapshotFrom<M>;
  state: string;
  version: number;
  events: StoredEvent[];
}

export const DOMAIN_EVENT_TOPIC = 'domain-event';

export function stateName(value: unknown): string {
  if (typeof value === 'string') return value;
  if (value && typeof value === 'object') {
    const [k, v] = Object.entries(value as Record<string, unknown>)[0] ?? [];
    return v === undefined ? String(k) : `${k}.${stateName(v)}`;
  }
  return String(value);
}

interface Row { state: string; snapshot: unknown; version: number }

/**
 * One unit of work = one Postgres transaction. Actors loaded here are locked (`FOR UPDATE`),
 * their new snapshots written with `version + 1` (checked), their emitted events inserted in
 * the same transaction; the events reach the in-process bus after commit and the other nodes
 * through a transactional NOTIFY.
 */
export class UnitOfWork {
  readonly events: StoredEvent[] = [];
  constructor(readonly sql: Tx, private readonly cluster: Cluster) {}

  /** Current snapshot of an actor (locked for the rest of the transaction), or undefined. */
  async load<M extends AnyStateMachine>(kind: ActorKind<M>, id: string): Promise<{ snapshot: SnapshotFrom<M>; version: number; state: string } | undefined> {
    const [row] = await this.sql<Row[]>`
      select state, snapshot, version from actors where type = ${kind.type} and id = ${id} for update`;
    if (!row) return undefined;
    return { snapshot: restore(kind, row.snapshot) as SnapshotFrom<M>, version: row.version, state: row.state };
  }

  /**
   * Several actors of one kind, locked in one statement (in id order, byte-wise: callers locking
   * several actors of a kind this way cannot deadlock on each other). Absent ids are not in the map.
   */
  async loadMany<M extends AnyStateMachine>(kind: ActorKind<M>, ids: readonly string[]): Promise<Map<string, { snapshot: SnapshotFrom<M>; version: number; state: string }>> {
    const out = new Map<string, { snapshot: SnapshotFrom<M>; version: number; state: string }>();
    if (ids.length === 0) return out;
    // ORDER BY under FOR UPDATE: the rows are locked as the sort hands them out, in that order
    const rows = await this.sql<(Row & { id: string })[]>`
      select id, state, snapshot, version from actors where type = ${kind.type} and id = any(${[...ids] as never}::text[])
      order by id collate "C" for update`;
    for (const row of rows) out.set(row.id, { snapshot: restore(kind, row.snapshot) as SnapshotFrom<M>, version: row.version, state: row.state });
    return out;
  }

  /** Starts a new actor from its machine's initial state; its entry events are stored. */
  async create<M extends AnyStateMachine>(kind: ActorKind<M>, id: string, input: InputFrom<M>): Promise<ActorResult<M>> {
    const { snapshot, state, persisted, emitted } = start(kind, id, input);
    await this.insertActor(kind, id, state, persisted);
    await this.project(kind, id, snapshot, state);
    const events = await this.record(kind, id, snapshot, emitted);
    return { snapshot: snapshot as SnapshotFrom<M>, state, version: 1, events };
  }

  private async insertActor(kind: AnyActorKind, id: string, state: string, persisted: unknown): Promise<void> {
    const inserted = await this.sql`
      insert into actors (type, id, state, snapshot, version)
      values (${kind.type}, ${id}, ${state}, ${this.sql.json(persisted as never)}, 1)
      on conflict do nothing`;
    if (inserted.count === 0) throw conflict(`${kind.type} ${id} already exists`);
  }

  /**
   * Starts new actors born with their domain rows: each row is inserted with the columns given (the
   * ones no machine decides) and the kind's projection of the machine's initial snapshot, all rows
   * in one statement, in the order given (callers racing on a unique key give one order, so that
   * concurrent inserts take its index entries alike). Every row names the same columns. A row that
   * `onConflict` (the columns of a unique key) finds taken is skipped, after waiting for a concurrent
   * inserter of it, and gets no actor. For rows whose key needs a projected column at insert (an owner
   * in a unique key); `create` projects onto a row inserted before. The results by id, of those born.
   */
  async createWithRows<M extends AnyStateMachine>(kind: ActorKind<M>, births: { id: string; input: InputFrom<M>; row: Record<string, unknown> }[], onConflict?: readonly string[]): Promise<Map<string, ActorResult<M>>> {
    const p = kind.projection;
    if (!p) throw internal(`${kind.type} projects no row: create its actor with create()`);
    if (births.length === 0) return new Map();
    const key = p.key ?? 'id';
    const started = births.map((b) => ({ id: b.id, row: b.row, ...start(kind, b.id, b.input) }));
    const rows = started.map((s) => ({ ...s.row, [key]: s.id, ...pick(p.project(s.snapshot as SnapshotFrom<M>, s.state), p.columns) }));
    const columns = Object.keys(rows[0]);
    // rows, actors and entry events in one statement (data-modifying CTEs: the actors and events
    // of the rows `on conflict` skipped are left out by joining on what the row insert returned),
    // and one NOTIFY statement: two round trips for a batch of births (issue 36 item 2)
    const actorRows = started.map((s) => ({ type: kind.type, id: s.id, state: s.state, snapshot: s.persisted }));
    const items = started.flatMap((s) => {
      const accountId = kind.accountOf?.((s.snapshot as AnyMachineSnapshot).context) ?? null;
      return s.emitted.map((event) => ({ actorType: kind.type, actorId: s.id, accountId, event }));
    });
    const eventRows = items.map(({ actorType, actorId, accountId, event: { type, ...payload } }, n) => ({ n, actor_type: actorType, actor_id: actorId, type, account_id: accountId, payload }));
    const out = await this.sql<{ what: 'row' | 'actor' | 'event'; id: string; seq: number | null; event_id: string | null; created_at: Date | null }[]>`
      with born as (
        insert into ${this.sql(p.table)} ${this.sql(rows as Record<string, never>[], columns)}
        ${onConflict ? this.sql`on conflict (${this.sql(onConflict as string[])}) do nothing` : this.sql``}
        returning lower(${this.sql(key)}::text) as id
      ), actors_in as (
        insert into actors (type, id, state, snapshot, version)
        select x.type, x.id, x.state, x.snapshot, 1 from jsonb_to_recordset(${this.sql.json(actorRows as never)}) as x(type text, id text, state text, snapshot jsonb)
        where lower(x.id) in (select id from born)
        on conflict do nothing
        returning id
      ), events_in as (
        insert into domain_events (actor_type, actor_id, type, account_id, payload)
        select x.actor_type, x.actor_id, x.type, x.account_id, x.payload
        from jsonb_to_recordset(${this.sql.json(eventRows as never)}) as x(n int, actor_type text, actor_id text, type text, account_id uuid, payload jsonb)
        where lower(x.actor_id) in (select id from born)
        order by x.n
        returning seq, id, created_at, actor_id
      )
      select 'row' as what, id, null::bigint as seq, null::uuid as event_id, null::timestamptz as created_at from born
      union all select 'actor', id, null, null, null from actors_in
      union all select 'event', actor_id, seq, id, created_at from events_in`;
    const ids = new Set(out.filter((r) => r.what === 'row').map((r) => r.id));
    const kept = started.filter((s) => ids.has(s.id.toLowerCase()));
    if (kept.length === 0) return new Map();
    const actorsIn = out.filter((r) => r.what === 'actor').length;
    if (actorsIn !== kept.length) throw conflict(`${kind.type}: ${kept.length - actorsIn} of ${kept.length} actors already exist`);
    // seq is drawn in insertion order, which follows `order by x.n`: the kept items in their order
    const inserted = out.filter((r) => r.what === 'event').sort((a, b) => Number(a.seq) - Number(b.seq));
    const keptRows = eventRows.filter((r) => ids.has(r.actor_id.toLowerCase()));
    const stored = inserted.map((row, i): StoredEvent => {
      const r = keptRows[i];
      if (row.id !== r.actor_id) throw internal('domain events were not inserted in the order given');
      return { seq: row.seq!, id: row.event_id!, actorType: r.actor_type, actorId: r.actor_id, type: r.type, accountId: r.account_id, payload: r.payload, createdAt: row.created_at!.toISOString() };
    });
    if (stored.length !== keptRows.length) throw internal('domain events of the births are missing');
    await this.cluster.notifyMany(DOMAIN_EVENT_TOPIC, stored, this.sql);
    this.events.push(...stored);
    const byActor = new Map<string, StoredEvent[]>();
    for (const ev of stored) {
      let list = byActor.get(ev.actorId);
      if (!list) byActor.set(ev.actorId, (list = []));
      list.push(ev);
    }
    return new Map(kept.map((s): [string, ActorResult<M>] => [s.id, { snapshot: s.snapshot as SnapshotFrom<M>, state: s.state, version: 1, events: byActor.get(s.id) ?? [] }]));
  }

  /**
   * Sends one event to a stored actor. Refuses with 409 when the machine does not accept the
   * event in its current state (no transition, or its guard is false). 404 when absent.
   */
  async send<M extends AnyStateMachine>(kind: ActorKind<M>, id: string, event: EventFromLogic<M>): Promise<ActorResult<M>> {
    const result = await this.trySend(kind, id, event);
    if ('refused' in result) {
      throw conflict(`${kind.type} ${id} is ${result.state}: ${event.type} is not accepted in that state`, {
        extra: { state: result.state, event: event.type },
      });
    }
    return result;
  }

  /**
   * Like `send`, but a refusal by the machine (no transition, or a false guard) is an answer,
   * not an error: `{ refused: true, state }`, nothing written. 404 when absent.
   */
  async trySend<M extends AnyStateMachine>(
    kind: ActorKind<M>, id: string, event: EventFromLogic<M>,
    /** what `load` answered for this actor earlier in this unit of work (it is locked): not read again */
    loaded?: { snapshot: SnapshotFrom<M>; version: number; state: string },
  ): Promise<ActorResult<M> | { refused: true; state: string; snapshot: SnapshotFrom<M> }> {
    const current = loaded ?? (await this.load(kind, id));
    if (!current) throw notFound(`${kind.type} ${id} not found`);
    const before = current.snapshot as AnyMachineSnapshot;
    if (!before.can(event)) return { refused: true, state: current.state, snapshot: current.snapshot };
    const { snapshot, persisted, state, emitted } = transition(kind, id, before, event);
    // the snapshot, its projection and the events go out together (pipelined on the transaction's
    // connection, executed in this order); a failed check throws, and the transaction rolls back
    const [updated, , events] = await Promise.all([
      this.sql`
        update actors set state = ${state}, snapshot = ${this.sql.json(persisted as never)},
          version = version + 1, updated_at = now()
        where type = ${kind.type} and id = ${id} and version = ${current.version}`,
      this.project(kind, id, snapshot, state),
      this.record(kind, id, snapshot, emitted),
    ]);
    // Unreachable while the row is locked; kept as the optimistic check the design asks for.
    if (updated.count !== 1) throw conflict(`${kind.type} ${id} was changed concurrently; retry`);
    return { snapshot: snapshot as SnapshotFrom<M>, state, version: current.version + 1, events };
  }

  /**
   * `trySend` to several actors of one kind at once, each with its own event and the snapshot
   * `loadMany` (or `load`) locked earlier in this unit of work: each machine decides alone, as
   * `trySend` would, and its decision is answered at once (`decisions`: refused, or the new
   * snapshot and the events it emits), so the caller may pipeline further statements behind the
   * writes. The accepted ones are written together (`written`): their snapshots in one statement,
   * their projections in one, their events in one insert and one NOTIFY statement, on the
   * transaction's connection in this order, instead of four or five statements each. The
   * projected values must survive JSON (no Buffer): the projection is written from a JSON array.
   * Both answers follow the order given.
   */
  trySendMany<M extends AnyStateMachine>(
    kind: ActorKind<M>,
    items: { id: string; event: EventFromLogic<M>; loaded: { snapshot: SnapshotFrom<M>; version: number; state: string } }[],
  ): {
    decisions: ({ refused: true; state: string; snapshot: SnapshotFrom<M> } | { refused?: undefined; state: string; snapshot: SnapshotFrom<M>; emitted: EmittedEvent[] })[];
    written: Promise<(ActorResult<M> | { refused: true; state: string; snapshot: SnapshotFrom<M> })[]>;
  } {
    if (new Set(items.map((i) => i.id)).size !== items.length) throw internal(`${kind.type}: trySendMany names an actor twice`);
    const decided = items.map(({ id, event, loaded }) => {
      const before = loaded.snapshot as AnyMachineSnapshot;
      if (!before.can(event)) return { id, refused: { refused: true as const, state: loaded.state, snapshot: loaded.snapshot } };
      return { id, version: loaded.version, next: transition(kind, id, before, event) };
    });
    const decisions = decided.map((d) => d.refused ?? { state: d.next!.state, snapshot: d.next!.snapshot as SnapshotFrom<M>, emitted: d.next!.emitted });
    return { decisions, written: this.writeMany(kind, decided) };
  }

  private async writeMany<M extends AnyStateMachine>(
    kind: ActorKind<M>,
    decided: { id: string; version?: number; next?: ReturnType<typeof transition>; refused?: { refused: true; state: string; snapshot: SnapshotFrom<M> } }[],
  ): Promise<(ActorResult<M> | { refused: true; state: string; snapshot: SnapshotFrom<M> })[]> {
    const accepted = decided.filter((d) => d.next !== undefined) as { id: string; version: number; next: ReturnType<typeof transition> }[];
    if (accepted.length === 0) return decided.map((d) => d.refused!);
    const p = kind.projection;
    const key = p?.key ?? 'id';
    const snapshots = accepted.map((a) => ({ id: a.id, state: a.next.state, snapshot: a.next.persisted, version: a.version }));
    const [updated, projected, stored] = await Promise.all([
      this.sql`
        update actors a set state = x.state, snapshot = x.snapshot, version = a.version + 1, updated_at = now()
        from jsonb_to_recordset(${this.sql.json(snapshots as never)}) as x(id text, state text, snapshot jsonb, version int)
        where a.type = ${kind.type} and a.id = x.id and a.version = x.version`,
      // typed by the table's own row type (jsonb_populate_recordset); identifiers quoted here, since
      // postgres.js reads an identifier list after `set (` or `row(` as values
      p ? this.sql.unsafe(`
        update ${ident(p.table)} t set (${p.columns.map(ident).join(', ')}) = row(${p.columns.map((c) => `r.${ident(c)}`).join(', ')})
        from jsonb_populate_recordset(null::${ident(p.table)}, $1::jsonb) as r
        where t.${ident(key)} = r.${ident(key)}`,
      // a jsonb parameter: postgres.js serialises the array itself (a string would arrive as a JSON string)
      [accepted.map((a) => ({ ...pick(p.project(a.next.snapshot as SnapshotFrom<M>, a.next.state), p.columns), [key]: a.id })) as never]) : undefined,
      this.emitMany(accepted.flatMap((a) => {
        const accountId = kind.accountOf?.((a.next.snapshot as AnyMachineSnapshot).context) ?? null;
        return a.next.emitted.map((event) => ({ actorType: kind.type, actorId: a.id, accountId, event }));
      })),
    ]);
    // Unreachable while the rows are locked; kept as the optimistic check the design asks for.
    if (updated.count !== accepted.length) throw conflict(`${kind.type}: ${accepted.length - updated.count} of ${accepted.length} actors were changed concurrently; retry`);
    if (projected && projected.count !== accepted.length) throw internal(`${kind.type}: ${accepted.length - projected.count} of its ${p!.table} rows are missing`);
    const byActor = new Map<string, StoredEvent[]>();
    for (const ev of stored) {
      let list = byActor.get(ev.actorId);
      if (!list) byActor.set(ev.actorId, (list = []));
      list.push(ev);
    }
    return decided.map((d) => d.refused ?? {
      snapshot: d.next!.snapshot as SnapshotFrom<M>, state: d.next!.state, version: d.version! + 1, events: byActor.get(d.id) ?? [],
    });
  }

  /**
   * Deletes a stored actor: garbage collection of a resource whose domain row goes in the same
   * unit of work (its domain events stay). False when there was none.
   */
  async delete(kind: AnyActorKind, id: string): Promise<boolean> {
    const deleted = await this.sql`delete from actors where type = ${kind.type} and id = ${id}`;
    return deleted.count > 0;
  }

  /** Records a domain event that no machine emitted (plain-row resources). */
  async emit(actorType: string, actorId: string, event: EmittedEvent, accountId?: string | null): Promise<StoredEvent> {
    const [stored] = await this.insertEvents(actorType, actorId, accountId ?? null, [event]);
    return stored;
  }

  /**
   * Records many domain events that no machine emitted, in one insert and one NOTIFY statement
   * (events in the given order: their `seq` follows it). For bursts such as the broker's connect
   * bookkeeping, where one transaction per event would cost a round trip each.
   */
  async emitMany(items: { actorType: string; actorId: string; accountId: string | null; event: EmittedEvent }[]): Promise<StoredEvent[]> {
    if (items.length === 0) return [];
    const rows = items.map(({ actorType, actorId, accountId, event: { type, ...payload } }, n) => ({ n, actor_type: actorType, actor_id: actorId, type, account_id: accountId, payload }));
    const inserted = await this.sql<{ seq: number; id: string; created_at: Date; actor_id: string }[]>`
      insert into domain_events (actor_type, actor_id, type, account_id, payload)
      select x.actor_type, x.actor_id, x.type, x.account_id, x.payload
      from jsonb_to_recordset(${this.sql.json(rows as never)}) as x(n int, actor_type text, actor_id text, type text, account_id uuid, payload jsonb)
      order by x.n
      returning seq, id, created_at, actor_id`;
    // seq is drawn in insertion order, which follows `order by x.n`
    inserted.sort((a, b) => Number(a.seq) - Number(b.seq));
    const out = inserted.map((row, i): StoredEvent => {
      const r = rows[i];
      if (row.actor_id !== r.actor_id) throw internal('domain events were not inserted in the order given');
      return { seq: row.seq, id: row.id, actorType: r.actor_type, actorId: r.actor_id, type: r.type, accountId: r.account_id, payload: r.payload, createdAt: row.created_at.toISOString() };
    });
    await this.cluster.notifyMany(DOMAIN_EVENT_TOPIC, out, this.sql);
    this.events.push(...out);
    return out;
  }

  /** Writes the kind's projection of the new snapshot onto its domain row. */
  private async project<M extends AnyStateMachine>(kind: ActorKind<M>, id: string, snapshot: AnyMachineSnapshot, state: string): Promise<void> {
    const p = kind.projection;
    if (!p) return;
    const values = p.project(snapshot as SnapshotFrom<M>, state);
    const updated = await this.sql`
      update ${this.sql(p.table)} set ${this.sql(values as Record<string, never>, p.columns as string[])} where ${this.sql(p.key ?? 'id')} = ${id}`;
    if (updated.count !== 1) throw internal(`${kind.type} ${id}: its ${p.table} row is missing; insert it before creating the actor`);
  }

  private async record<M extends AnyStateMachine>(kind: ActorKind<M>, id: string, snapshot: AnyMachineSnapshot, emitted: EmittedEvent[]): Promise<StoredEvent[]> {
    if (emitted.length === 0) return [];
    return this.insertEvents(kind.type, id, kind.accountOf?.(snapshot.context) ?? null, emitted);
  }

  private async insertEvents(actorType: string, actorId: string, accountId: string | null, emitted: EmittedEvent[]): Promise<StoredEvent[]> {
    const out: StoredEvent[] = [];
    for (const { type, ...payload } of emitted) {
      const [row] = await this.sql<{ seq: number; id: string; created_at: Date }[]>`
        insert into domain_events (actor_type, actor_id, type, account_id, payload)
        values (${actorType}, ${actorId}, ${type}, ${accountId}, ${this.sql.json(payload as never)})
        returning seq, id, created_at`;
      const ev: StoredEvent = { seq: row.seq, id: row.id, actorType, actorId, type, accountId, payload, createdAt: row.created_at.toISOString() };
      out.push(ev);
      await this.cluster.notify(DOMAIN_EVENT_TOPIC, ev, this.sql);
    }
    this.events.push(...out);
    return out;
  }
}

/** A new actor run from its machine's initial state: its snapshot, persisted form and entry events (nothing written). */
function start(kind: AnyActorKind, id: string, input: unknown): { snapshot: AnyMachineSnapshot; state: string; persisted: unknown; emitted: EmittedEvent[] } {
  const emitted: EmittedEvent[] = [];
  const actor = createActor(kind.machine as AnyStateMachine, { input, id });
  actor.on('*', (e: EmittedEvent) => emitted.push(e));
  actor.start();
  const snapshot = actor.getSnapshot() as AnyMachineSnapshot;
  const persisted = actor.getPersistedSnapshot();
  actor.stop();
  failIfErrored(kind, id, snapshot);
  return { snapshot, state: stateName(snapshot.value), persisted, emitted };
}

/** The machine's answer to an event it accepts (nothing written). */
function transition(kind: AnyActorKind, id: string, before: AnyMachineSnapshot, event: unknown): { snapshot: AnyMachineSnapshot; state: string; persisted: unknown; emitted: EmittedEvent[] } {
  const emitted: EmittedEvent[] = [];
  const actor: AnyActorRef = createActor(kind.machine as AnyStateMachine, { snapshot: before, id });
  actor.on('*', (e: EmittedEvent) => emitted.push(e));
  actor.start();
  actor.send(event as never);
  const snapshot = actor.getSnapshot() as AnyMachineSnapshot;
  const persisted = actor.getPersistedSnapshot();
  actor.stop();
  failIfErrored(kind, id, snapshot);
  return { snapshot, state: stateName(snapshot.value), persisted, emitted };
}

/** A quoted SQL identifier (as postgres.js quotes them). */
const ident = (name: string) => `"${name.replace(/"/g, '""')}"`;

const pick = (values: Record<string, unknown>, columns: readonly string[]) => Object.fromEntries(columns.map((c) => [c, values[c]]));

function failIfErrored(kind: ActorKind<AnyStateMachine>, id: string, snapshot: { status: string; error?: unknown }): void {
  if (snapshot.status === 'error') {
    throw internal(`${kind.type} ${id}: machine failed: ${String(snapshot.error)}`);
  }
}

export class ActorStore {
  constructor(private readonly sql: Sql, private readonly cluster: Cluster, private readonly bus: DomainBus) {
    cluster.on<StoredEvent>(DOMAIN_EVENT_TOPIC, (ev) => {
      this.bus.emit(ev.type, ev);
      this.bus.emit('*', ev);
    });
  }

  /** Runs `work` in one transaction; publishes the recorded events to the local bus after commit. */
  async run<T>(work: (uow: UnitOfWork) => Promise<T>): Promise<T> {
    let uow!: UnitOfWork;
    const result = await this.sql.begin(async (tx) => {
      uow = new UnitOfWork(tx, this.cluster);
      return work(uow);
    });
    for (const ev of uow.events) {
      this.bus.emit(ev.type, ev);
      this.bus.emit('*', ev);
    }
    return result as T;
  }

  send<M extends AnyStateMachine>(kind: ActorKind<M>, id: string, event: EventFromLogic<M>): Promise<ActorResult<M>> {
    return this.run((uow) => uow.send(kind, id, event));
  }

  create<M extends AnyStateMachine>(kind: ActorKind<M>, id: string, input: InputFrom<M>): Promise<ActorResult<M>> {
    return this.run((uow) => uow.create(kind, id, input));
  }

  /** Would the actor accept this event now? (the machine's guards decide; no write) */
  async can<M extends AnyStateMachine>(kind: ActorKind<M>, id: string, event: EventFromLogic<M>): Promise<boolean> {
    const current = await this.get(kind, id);
    return Boolean(current && (current.snapshot as AnyMachineSnapshot).can(event));
  }

  /** Reads without locking. */
  async get<M extends AnyStateMachine>(kind: ActorKind<M>, id: string): Promise<{ snapshot: SnapshotFrom<M>; version: number; state: string } | undefined> {
    const [row] = await this.sql<Row[]>`select state, snapshot, version from actors where type = ${kind.type} and id = ${id}`;
    if (!row) return undefined;
    return { snapshot: restore(kind, row.snapshot) as SnapshotFrom<M>, version: row.version, state: row.state };
  }
}

/** Rehydrates a persisted snapshot without starting the actor (no entry actions re-run). */
function restore(kind: ActorKind<AnyStateMachine>, persisted: unknown): AnyMachineSnapshot {
  return createActor(kind.machine, { snapshot: persisted as AnyMachineSnapshot }).getSnapshot() as AnyMachineSnapshot;
}
