import { Counter, Gauge, type Registry } from 'prom-client';
import type { DeviceMessageLog } from '../broker/deviceLog.js';
import type { TelemetryLog, TelemetryLogPackedRead } from '../broker/telemetryHistory.js';
import type { ThingSearch } from '../gateway.js';
import type { Clock } from '../lib/clock.js';
import type { Logger } from '../log.js';
import { DeliveryError, InlineDelivery, type Delivery, type DeliveryInput, type DeliveryRule, type RawEvent, type RawTelemetryRow } from './delivery.js';
import { ThreadDelivery } from './deliveryThread.js';
import { EVENT_TYPES, type Kind, type Where } from './envelope.js';
import { SOURCE_EVENTS, type BridgesRepo, type RuleRow } from './repo.js';
import { thingOfFilter, type BridgesService } from './service.js';

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
  /** build and publish on a thread of the process's own (deliveryThread.ts), not on the main thread */
  deliveryThread: boolean;
}

export const DEFAULT_WORKER: WorkerSettings = {
  leaseEveryMs: 2_000, leaseSeconds: 15, pollMs: 250, batchRows: 1_000, maxInFlight: 5_000, retryBaseMs: 500, retryMaxMs: 30_000, sinkTimeoutMs: 5_000, deliveryThread: true,
};

/** how long a rule's thing filter (where.thing) is kept before it is asked again */
const THING_FILTER_MS = 5_000;
const MAX_FILTERED_THINGS = 100_000;
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
  /** where the rules' messages are built and published */
  readonly delivery: Delivery;

  constructor(readonly d: {
    repo: BridgesRepo; service: BridgesService; telemetryLog: TelemetryLog; deviceLog: DeviceMessageLog; thingSearch: ThingSearch; clock: Clock; log: Logger;
    node: string; registry: Registry; settings: WorkerSettings;
  }) {
    this.m = metrics(d.registry);
    this.delivery = d.settings.deliveryThread ? new ThreadDelivery(d.log) : new InlineDelivery();
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
            this.delivery.warm();
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
    await this.delivery.stop();
    await this.d.repo.releaseLeases(this.d.node).catch(() => {});
  }
}

let runnerCount = 0;

class RuleRunner {
  private stopped = false;
  private loop?: Promise<void>;
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
  /**
   * The next telemetry read, asked while the sink acknowledges the current batch (the read is a
   * query, so one not used is only work lost): a rule catching up waits for PostgreSQL and its sink
   * at once instead of one after the other. Used only when the next read starts where it was asked.
   */
  private prefetch?: { tx: string; thingId: string | null; limit: number; read: Promise<TelemetryLogPackedRead | undefined> };

  /** this loop's key in the delivery (a rule leased again gets a new loop, with a sink of its own) */
  private readonly runnerKey: string;

  constructor(private readonly w: BridgeWorker, private row: RuleRow) {
    this.runnerKey = `${row.id}#${++runnerCount}`;
    // (not parseFrom: a rule created under older validation keeps running)
    this.thingId = row.source === 'telemetry' || row.source === 'twin' || row.source === 'commandReply' ? thingOfFilter(row.from_filter) : undefined;
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
    this.asDelivered = undefined; // the bridge is read again at the next delivery
  }

  async stop(): Promise<void> {
    this.stopped = true;
    this.wakeUp?.();
    await this.loop;
    await this.w.delivery.close(this.runnerKey);
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

  /**
   * The rule as a delivery needs it: its bridge's sink (opened again where the bridge changed) and
   * prefix. Kept until the rule is leased again (every lease renewal, and at once after a change on
   * this node: BridgesService wakes the worker) or a delivery fails, not read at every delivery.
   */
  private async deliveryRule(): Promise<DeliveryRule> {
    this.asDelivered ??= await this.readDeliveryRule();
    return this.asDelivered;
  }

  private asDelivered?: DeliveryRule;

  private async readDeliveryRule(): Promise<DeliveryRule> {
    const r = this.row;
    const bridge = await this.w.d.repo.bridgeById(r.bridge_id);
    if (!bridge) throw new Error(`bridge ${r.bridge_id} no longer exists`);
    const key = bridge.updated_at.toISOString();
    if (this.sink?.key !== key) {
      this.sink = { key, settings: { type: bridge.type, ...this.w.d.service.secretOf(bridge), exchange: bridge.exchange, timeoutMs: this.w.d.settings.sinkTimeoutMs } };
    }
    return {
      id: r.id, runner: this.runnerKey, accountId: r.account_id, format: r.format === 'batch' ? 'batch' : 'event', where: r.where_expr as Where | null, select: r.select_fields,
      prefix: bridge.subject_prefix, sink: this.sink,
    };
  }

  private sink?: DeliveryRule['sink'];

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
  private async readTelemetry(tx: string, thingId: string | null, limit: number): Promise<TelemetryLogPackedRead> {
    const ahead = this.prefetch;
    this.prefetch = undefined;
    if (ahead && ahead.tx === tx && ahead.thingId === thingId && ahead.limit === limit) {
      const read = await ahead.read;
      if (read) return read;
    }
    return this.w.d.telemetryLog.readPacked(this.row.account_id, { tx, thingId }, limit, this.w.delivery.packed);
  }

  /** One batch: read, filter, send, move the position. */
  private async once(): Promise<{ sent: number; more: boolean }> {
    const rule = await this.deliveryRule();
    const r = this.row;
    const things = await this.things();
    const wanted = (thingId: string) => (!this.thingId || thingId === this.thingId) && (!things || things.has(thingId));
    let input: DeliveryInput;
    let next: { xid: string; thing: string | null; seq: string | null };
    let more: boolean;
    if (r.source === 'telemetry') {
      const limit = this.rowsWanted;
      const read = await this.readTelemetry(r.pos_xid, r.pos_thing, limit);
      if (!read.last) return { sent: 0, more: false };
      // rows up to the in-flight budget, by their message counts (the points are split where they are built)
      const rows: RawTelemetryRow[] = [];
      let taken = 0;
      let count = 0;
      for (const row of read.rows) {
        if (!wanted(row.thingId)) {
          taken++;
          continue;
        }
        if (count > 0 && count + row.messages > this.w.d.settings.maxInFlight) break;
        rows.push(row);
        count += row.messages;
        taken++;
      }
      const whole = taken === read.rows.length;
      // past every row scanned (other accounts' too), or up to the last row the budget held
      const end = whole ? read.last : read.rows[taken - 1];
      next = { xid: end.tx, thing: end.thingId, seq: null };
      more = !whole || read.scanned === limit;
      this.rowsWanted = !whole ? Math.max(taken + 1, 4) : read.scanned === limit ? Math.min(limit * 2, this.w.d.settings.batchRows) : limit;
      if (rows.length === 0 && Date.now() - this.savedAt < SAVE_SKIPPED_MS) {
        // nothing of this rule's among them: the position moves in memory, written with the next delivery
        // (or within SAVE_SKIPPED_MS): a rule of a quiet account does not commit at every poll while others are busy
        this.row = { ...this.row, pos_xid: next.xid, pos_thing: next.thing, pos_seq: null };
        return { sent: 0, more };
      }
      input = { telemetry: { rows, points: read.points } };
    } else if (r.source === 'twin' || r.source === 'commandReply') {
      const kind: Kind = r.source;
      const limit = Math.min(this.w.d.settings.batchRows, this.w.d.settings.maxInFlight);
      const rows = await this.w.d.deviceLog.read(r.account_id, kind, { tx: r.pos_xid, seq: r.pos_seq ?? '0' }, limit);
      if (rows.length === 0) return { sent: 0, more: false };
      const events: RawEvent[] = [];
      for (const m of rows) {
        if (!wanted(m.thingId)) continue;
        events.push({ kind, thingId: m.thingId, id: `${kind === 'twin' ? 'tw' : 'cr'}-${m.seq}`, type: EVENT_TYPES[kind], time: m.at.toISOString(), payload: m.payload, commandId: m.correlation });
      }
      const last = rows[rows.length - 1];
      next = { xid: last.tx, thing: null, seq: last.seq };
      more = rows.length === limit;
      input = { events };
    } else {
      const kind: Kind = r.source;
      const limit = Math.min(this.w.d.settings.batchRows, this.w.d.settings.maxInFlight);
      const rows = await this.w.d.repo.events(r.account_id, SOURCE_EVENTS[r.source], r.pos_xid, r.pos_seq ?? '0', limit);
      if (rows.length === 0) return { sent: 0, more: false };
      const events: RawEvent[] = [];
      for (const e of rows) {
        if (things && !things.has(e.actor_id)) continue;
        const at = typeof e.payload.at === 'string' ? e.payload.at : e.created_at.toISOString();
        events.push({ kind, thingId: e.actor_id, id: `ev-${e.seq}`, type: EVENT_TYPES[e.type] ?? `io.gateway.${e.type}`, time: at, payload: JSON.stringify(e.payload), parsed: e.payload });
      }
      const last = rows[rows.length - 1];
      next = { xid: last.xid, thing: null, seq: last.seq };
      more = rows.length === limit;
      input = { events };
    }
    if (r.source === 'telemetry' && more) {
      const [tx, thingId, limit] = [next.xid, next.thing, this.rowsWanted];
      this.prefetch = { tx, thingId, limit, read: this.w.d.telemetryLog.readPacked(r.account_id, { tx, thingId }, limit, this.w.delivery.packed).catch(() => undefined) };
    }
    let events: number;
    try {
      events = await this.w.delivery.deliver(rule, input);
    } catch (err) {
      this.prefetch = undefined;
      this.asDelivered = undefined; // the bridge may have been fixed meanwhile
      const failed = err instanceof DeliveryError ? err.events : 0;
      this.w.m.failed.inc({ rule: r.id }, failed);
      await this.w.d.repo.countFailed(r.id, failed).catch(() => {});
      throw err;
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
