import { setImmediate as nextTurn } from 'node:timers/promises';
import { Counter, Gauge, type Registry } from 'prom-client';
import type { DeviceMessageLog } from '../broker/deviceLog.js';
import type { TelemetryLog, TelemetryLogRead } from '../broker/telemetryHistory.js';
import type { ThingSearch } from '../gateway.js';
import type { Clock } from '../lib/clock.js';
import type { Logger } from '../log.js';
import { Envelopes, EVENT_TYPES, fieldsOf, passes, pick, splitPoints, toBatches, type Kind, type Where } from './envelope.js';
import { SOURCE_EVENTS, type BridgesRepo, type RuleRow } from './repo.js';
import { thingOfFilter, type BridgesService } from './service.js';
import { openSink, type Sink, type SinkMessage } from './sinks.js';

export interface WorkerSettings {
  /** how often the node takes and renews its leases of rules */
  leaseEveryMs: number;
  /** a lease not renewed for this long goes to another node */
  leaseSeconds: number;
  /** an idle rule looks for new data this often */
  pollMs: number;
  /** history rows read per batch at most (fewer when they hold many messages, see RuleRunner.rowsWanted), and messages at most in flight per rule (its own budget) */
  batchRows: number;
  maxInFlight: number;
  retryBaseMs: number;
  retryMaxMs: number;
  sinkTimeoutMs: number;
}

export const DEFAULT_WORKER: WorkerSettings = {
  leaseEveryMs: 2_000, leaseSeconds: 15, pollMs: 250, batchRows: 1_000, maxInFlight: 5_000, retryBaseMs: 500, retryMaxMs: 30_000, sinkTimeoutMs: 5_000,
};

/** how long a rule's thing filter (where.thing) is kept before it is asked again */
const THING_FILTER_MS = 5_000;
const MAX_FILTERED_THINGS = 100_000;
/**
 * events a rule builds before it lets the event loop run (the broker's reads and PUBACKs): a read of
 * 1,000 rows builds up to maxInFlight events, tens of milliseconds in one piece otherwise
 */
const SLICE_EVENTS = 256;
/** a position moved only past other accounts' telemetry is written at most this often (a crash re-reads those rows, harmlessly) */
const SAVE_SKIPPED_MS = 5_000;

interface Metrics {
  delivered: Counter<'rule'>;
  failed: Counter<'rule'>;
  lagMessages: Gauge<'rule'>;
  lagSeconds: Gauge<'rule'>;
}

function metrics(registry: Registry): Metrics {
  return {
    delivered: new Counter({ name: 'bridge_rule_delivered_total', help: 'Messages a data bridge rule\'s sink acknowledged (this node)', labelNames: ['rule'], registers: [registry] }),
    failed: new Counter({ name: 'bridge_rule_failed_total', help: 'Messages of refused or unacknowledged deliveries of a rule (this node; retried)', labelNames: ['rule'], registers: [registry] }),
    lagMessages: new Gauge({ name: 'bridge_rule_lag_messages', help: 'Messages written and not yet acknowledged by a rule\'s sink (rules this node delivers)', labelNames: ['rule'], registers: [registry] }),
    lagSeconds: new Gauge({ name: 'bridge_rule_lag_seconds', help: 'Age of the oldest message a rule has not delivered yet (rules this node delivers)', labelNames: ['rule'], registers: [registry] }),
  };
}

const errorText = (err: unknown) => (err instanceof Error ? err.message : String(err)).slice(0, 500);

/**
 * Delivers the rules this node leases (one node per rule in a cluster), each in a loop of its own
 * with its own sink connection, position and in-flight budget: a slow or refusing sink holds only
 * its rule back. A loop reads its account's log after the rule's durable position, sends the batch,
 * and moves the position once the sink acknowledged all of it (at least once; a crash between the
 * two sends the batch again).
 */
export class BridgeWorker {
  private readonly runners = new Map<string, RuleRunner>();
  private timer?: NodeJS.Timeout;
  private stopped = true;
  private ticking?: Promise<void>;
  readonly m: Metrics;

  constructor(readonly d: {
    repo: BridgesRepo; service: BridgesService; telemetryLog: TelemetryLog; deviceLog: DeviceMessageLog; thingSearch: ThingSearch; clock: Clock; log: Logger;
    node: string; registry: Registry; settings: WorkerSettings;
  }) {
    this.m = metrics(d.registry);
  }

  start(): void {
    this.stopped = false;
    this.wake();
  }

  /** Takes leases now (a rule created, changed or deleted). */
  wake(): void {
    if (this.stopped) return;
    // one tick at a time: a tick that started before the change would stop the runner a newer tick
    // started (its lease list lacks the new rule), and every overlapping tick left a timer chain of its own
    if (this.running) {
      this.again = true;
      return;
    }
    clearTimeout(this.timer);
    this.timer = setTimeout(() => void this.tick(), 0);
  }

  private running = false;
  /** a wake came while a tick ran: tick again at once after it */
  private again = false;

  private async tick(): Promise<void> {
    if (this.stopped || this.running) return;
    this.running = true;
    this.again = false;
    const run = (async () => {
      try {
        const rows = await this.d.repo.lease(this.d.node, this.d.settings.leaseSeconds);
        const held = new Set(rows.map((r) => r.id));
        for (const [id, runner] of this.runners) {
          if (!held.has(id)) {
            this.runners.delete(id);
            void runner.stop();
          }
        }
        for (const row of rows) {
          const runner = this.runners.get(row.id);
          if (runner && !runner.done) runner.update(row);
          else {
            const r = new RuleRunner(this, row);
            this.runners.set(row.id, r);
            r.start();
          }
        }
      } catch (err) {
        this.d.log.error({ err }, 'bridge rules not leased');
      }
    })();
    this.ticking = run;
    await run;
    this.running = false;
    if (!this.stopped) {
      clearTimeout(this.timer);
      this.timer = setTimeout(() => void this.tick(), this.again ? 0 : this.d.settings.leaseEveryMs);
      this.timer.unref();
    }
  }

  async stop(): Promise<void> {
    this.stopped = true;
    clearTimeout(this.timer);
    await this.ticking;
    await Promise.all([...this.runners.values()].map((r) => r.stop()));
    this.runners.clear();
    await this.d.repo.releaseLeases(this.d.node).catch(() => {});
  }
}

class RuleRunner {
  private stopped = false;
  private loop?: Promise<void>;
  private sink?: { sink: Sink; bridgeKey: string };
  private wakeUp?: () => void;
  private thingFilter?: { at: number; ids: Set<string> };
  private readonly thingId?: string;
  private lagAt = 0;
  /**
   * history rows asked per read: a row holds one thing's messages of one ingest batch (one to
   * thousands), so the read adapts to what the last batch could send (reading rows that do not fit
   * the in-flight budget would read their text from PostgreSQL again and again)
   */
  private rowsWanted = 64;
  /** when the position was last written (see SAVE_SKIPPED_MS) */
  private savedAt = 0;
  private readonly envelopes: Envelopes;
  /**
   * The next telemetry read, asked while the sink acknowledges the current batch (the read is a
   * query, so one not used is only work lost): a rule catching up waits for PostgreSQL and its sink
   * at once instead of one after the other. Used only when the next read starts where it was asked.
   */
  private prefetch?: { tx: string; thingId: string | null; limit: number; read: Promise<TelemetryLogRead | undefined> };

  constructor(private readonly w: BridgeWorker, private row: RuleRow) {
    // (not parseFrom: a rule created under older validation keeps running)
    this.thingId = row.source === 'telemetry' || row.source === 'twin' || row.source === 'commandReply' ? thingOfFilter(row.from_filter) : undefined;
    this.envelopes = new Envelopes(row.account_id, row.id);
  }

  start(): void {
    this.loop = this.run();
  }

  /** stopped (lost its lease, or its rule is gone): replaced at the next lease */
  get done(): boolean {
    return this.stopped;
  }

  /** The rule as leased again: its filters may have changed (the position is the loop's own). */
  update(row: RuleRow): void {
    const where = JSON.stringify(row.where_expr);
    if (where !== JSON.stringify(this.row.where_expr)) this.thingFilter = undefined;
    this.row = { ...row, pos_xid: this.row.pos_xid, pos_thing: this.row.pos_thing, pos_seq: this.row.pos_seq };
  }

  async stop(): Promise<void> {
    this.stopped = true;
    this.wakeUp?.();
    await this.loop;
    await this.sink?.sink.close();
    this.sink = undefined;
    for (const g of [this.w.m.lagMessages, this.w.m.lagSeconds]) g.remove({ rule: this.row.id });
  }

  private sleep(ms: number): Promise<void> {
    return new Promise((resolve) => {
      const t = setTimeout(done, ms);
      function done() {
        clearTimeout(t);
        resolve();
      }
      this.wakeUp = done;
    });
  }

  private async run(): Promise<void> {
    const { settings, log } = this.w.d;
    let retryMs = settings.retryBaseMs;
    let inFailure = this.row.failing_since !== null;
    while (!this.stopped) {
      try {
        const { sent, more } = await this.once();
        if (inFailure) {
          inFailure = false;
          await this.w.d.service.outcome(this.row.id, { type: 'DELIVERED', at: this.w.d.clock.now().toISOString() });
        }
        retryMs = settings.retryBaseMs;
        await this.measureLag(false);
        if (!more && !this.stopped) await this.sleep(settings.pollMs);
        void sent;
      } catch (err) {
        if (this.stopped) break;
        const error = errorText(err);
        log.warn({ ruleId: this.row.id, err: error }, 'bridge delivery refused; retried');
        inFailure = true;
        try {
          const state = await this.w.d.service.outcome(this.row.id, { type: 'DELIVERY_FAILED', at: this.w.d.clock.now().toISOString(), error });
          if (state === undefined) break; // deleted
          await this.measureLag(false);
        } catch (e) {
          log.error({ err: e, ruleId: this.row.id }, 'bridge rule outcome not recorded');
        }
        await this.sleep(retryMs);
        retryMs = Math.min(retryMs * 2, settings.retryMaxMs);
      }
    }
  }

  /** Lag on /metrics, asked at most once a second. */
  private async measureLag(force: boolean): Promise<void> {
    const now = Date.now();
    if (!force && now - this.lagAt < 2_000) return;
    this.lagAt = now;
    try {
      const lag = await this.w.d.service.lag(this.row);
      this.w.m.lagMessages.set({ rule: this.row.id }, lag.messages);
      this.w.m.lagSeconds.set({ rule: this.row.id }, lag.seconds);
    } catch { /* next time */ }
  }

  private async openSink(): Promise<Sink> {
    const bridge = await this.w.d.repo.bridgeById(this.row.bridge_id);
    if (!bridge) throw new Error(`bridge ${this.row.bridge_id} no longer exists`);
    const key = bridge.updated_at.toISOString();
    if (this.sink && this.sink.bridgeKey === key) return this.sink.sink;
    await this.sink?.sink.close();
    const secret = this.w.d.service.secretOf(bridge);
    const sink = openSink({ type: bridge.type, ...secret, exchange: bridge.exchange, timeoutMs: this.w.d.settings.sinkTimeoutMs });
    this.sink = { sink, bridgeKey: key };
    this.prefix = bridge.subject_prefix;
    return sink;
  }

  private prefix = '';

  /** Things passing where.thing (undefined: no thing filter). */
  private async things(): Promise<Set<string> | undefined> {
    const q = (this.row.where_expr as Where | null)?.thing;
    if (!q || (!q.model && !q.tags?.length && !q.state?.length)) return undefined;
    const now = Date.now();
    if (this.thingFilter && now - this.thingFilter.at < THING_FILTER_MS) return this.thingFilter.ids;
    const ids = await this.w.d.thingSearch.ids(this.row.account_id, { model: q.model, tags: q.tags, state: q.state }, MAX_FILTERED_THINGS);
    this.thingFilter = { at: now, ids: new Set(ids.map((i) => i.toLowerCase())) };
    return this.thingFilter.ids;
  }

  /** The rule's telemetry after a position: the read asked ahead when it starts there, else a new one. */
  private async readTelemetry(tx: string, thingId: string | null, limit: number): Promise<TelemetryLogRead> {
    const ahead = this.prefetch;
    this.prefetch = undefined;
    if (ahead && ahead.tx === tx && ahead.thingId === thingId && ahead.limit === limit) {
      const read = await ahead.read;
      if (read) return read;
    }
    return this.w.d.telemetryLog.read(this.row.account_id, { tx, thingId }, limit);
  }

  /** One batch: read, filter, send, move the position. */
  private async once(): Promise<{ sent: number; more: boolean }> {
    const sink = await this.openSink();
    const r = this.row;
    const where = r.where_expr as Where | null;
    const select = r.select_fields;
    const things = await this.things();
    const messages: SinkMessage[] = [];
    let next: { xid: string; thing: string | null; seq: string | null };
    let more: boolean;
    const add = (kind: Kind, thingId: string, id: string, type: string, time: string, payload: string, parsed?: Record<string, unknown>, commandId?: string | null) => {
      if (things && !things.has(thingId)) return;
      let data = payload;
      if (where?.payload || select) {
        const value = parsed ?? fieldsOf(JSON.parse(payload));
        if (!passes(where?.payload, value)) return;
        if (select) data = pick(select, value);
      }
      messages.push({
        subject: `${this.prefix}.${thingId}.${kind}`, id: `${r.id}:${id}`,
        body: this.envelopes.of(kind, type, thingId, id, time, data, commandId),
      });
    };
    if (r.source === 'telemetry') {
      const limit = this.rowsWanted;
      const read = await this.readTelemetry(r.pos_xid, r.pos_thing, limit);
      if (!read.last) return { sent: 0, more: false };
      let taken = 0;
      let count = 0;
      let sliceStart = 0;
      for (const row of read.rows) {
        if (this.thingId && row.thingId !== this.thingId) {
          taken++;
          continue;
        }
        const points = splitPoints(row.points);
        if (count > 0 && count + points.length > this.w.d.settings.maxInFlight) break;
        points.forEach((p, i) => add('telemetry', row.thingId, `${row.tx}-${row.thingId}-${i}`, EVENT_TYPES.telemetry, this.envelopes.time(p.at), p.json));
        count += points.length;
        taken++;
        if (messages.length - sliceStart >= SLICE_EVENTS) {
          sliceStart = messages.length;
          await nextTurn();
        }
      }
      const whole = taken === read.rows.length;
      // past every row scanned (other accounts' too), or up to the last row the budget held
      const end = whole ? read.last : read.rows[taken - 1];
      next = { xid: end.tx, thing: end.thingId, seq: null };
      more = !whole || read.scanned === limit;
      this.rowsWanted = !whole ? Math.max(taken + 1, 4) : read.scanned === limit ? Math.min(limit * 2, this.w.d.settings.batchRows) : limit;
      if (messages.length === 0 && Date.now() - this.savedAt < SAVE_SKIPPED_MS) {
        // nothing of this rule's among them: the position moves in memory, written with the next delivery
        // (or within SAVE_SKIPPED_MS): a rule of a quiet account does not commit at every poll while others are busy
        this.row = { ...this.row, pos_xid: next.xid, pos_thing: next.thing, pos_seq: null };
        return { sent: 0, more };
      }
    } else if (r.source === 'twin' || r.source === 'commandReply') {
      const kind: Kind = r.source;
      const limit = Math.min(this.w.d.settings.batchRows, this.w.d.settings.maxInFlight);
      const rows = await this.w.d.deviceLog.read(r.account_id, kind, { tx: r.pos_xid, seq: r.pos_seq ?? '0' }, limit);
      if (rows.length === 0) return { sent: 0, more: false };
      for (const m of rows) {
        if (this.thingId && m.thingId !== this.thingId) continue;
        add(kind, m.thingId, `${kind === 'twin' ? 'tw' : 'cr'}-${m.seq}`, EVENT_TYPES[kind], m.at.toISOString(), m.payload, undefined, m.correlation);
      }
      const last = rows[rows.length - 1];
      next = { xid: last.tx, thing: null, seq: last.seq };
      more = rows.length === limit;
    } else {
      const kind: Kind = r.source;
      const events = await this.w.d.repo.events(r.account_id, SOURCE_EVENTS[r.source], r.pos_xid, r.pos_seq ?? '0', Math.min(this.w.d.settings.batchRows, this.w.d.settings.maxInFlight));
      if (events.length === 0) return { sent: 0, more: false };
      for (const e of events) {
        const at = typeof e.payload.at === 'string' ? e.payload.at : e.created_at.toISOString();
        add(kind, e.actor_id, `ev-${e.seq}`, EVENT_TYPES[e.type] ?? `io.gateway.${e.type}`, at, JSON.stringify(e.payload), e.payload);
      }
      const last = events[events.length - 1];
      next = { xid: last.xid, thing: null, seq: last.seq };
      more = events.length === Math.min(this.w.d.settings.batchRows, this.w.d.settings.maxInFlight);
    }
    const events = messages.length;
    if (r.source === 'telemetry' && more) {
      const [tx, thingId, limit] = [next.xid, next.thing, this.rowsWanted];
      this.prefetch = { tx, thingId, limit, read: this.w.d.telemetryLog.read(r.account_id, { tx, thingId }, limit).catch(() => undefined) };
    }
    if (events > 0) {
      try {
        await sink.publish(r.format === 'batch' ? toBatches(messages) : messages);
      } catch (err) {
        this.prefetch = undefined;
        this.w.m.failed.inc({ rule: r.id }, events);
        await this.w.d.repo.countFailed(r.id, events).catch(() => {});
        throw err;
      }
    }
    const held = await this.w.d.repo.advance(r.id, this.w.d.node, next, events);
    if (!held) {
      // another node took the rule (this one paused past its lease): it resends from the position
      this.stopped = true;
      return { sent: 0, more: false };
    }
    this.row = { ...this.row, pos_xid: next.xid, pos_thing: next.thing, pos_seq: next.seq };
    this.savedAt = Date.now();
    this.w.m.delivered.inc({ rule: r.id }, events);
    return { sent: events, more };
  }
}
