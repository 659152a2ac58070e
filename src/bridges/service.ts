import crypto from 'node:crypto';
import type { ActorKind, ActorStore, UnitOfWork } from '../actors/store.js';
import type { DeviceMessageLog } from '../broker/deviceLog.js';
import type { TelemetryLog } from '../broker/telemetryHistory.js';
import type { Sql } from '../db/client.js';
import type { Clock } from '../lib/clock.js';
import { conflict, DomainError, invalid, notFound } from '../lib/errors.js';
import type { Logger } from '../log.js';
import type { Sealer } from '../pki/sealer.js';
import { bridgeRuleMachine, type BridgeRuleEvent } from '../../machines/bridgeRule.js';
import type { Where } from './envelope.js';
import type { BridgesRepo, BridgeRow, RuleRow } from './repo.js';
import { SOURCE_EVENTS } from './repo.js';
import type { BridgeCreate, BridgePatch, RuleCreate, RulePatch } from './schemas.js';

export const bridgeRuleKind: ActorKind<typeof bridgeRuleMachine> = {
  type: 'bridgeRule',
  machine: bridgeRuleMachine,
  accountOf: (c) => c.accountId,
  projection: {
    table: 'bridge_rules',
    columns: ['status', 'failing_since', 'last_error', 'last_error_at'],
    project: (s, state) => ({ status: state, failing_since: s.context.failingSince, last_error: s.context.lastError, last_error_at: s.context.lastErrorAt }),
  },
};

export interface Caller { sub: string; accountId: string }

/** The sealed part of a bridge: what its client needs in clear. */
export interface BridgeSecret { url: string; username?: string; password?: string; token?: string }

export type Source = 'telemetry' | 'connectivity' | 'state' | 'twin' | 'commandReply';
/** the sources read from the broker's device message log (deviceLog.ts) */
export const DEVICE_LOG_SOURCES: ReadonlySet<Source> = new Set<Source>(['twin', 'commandReply']);
const MAX_SEQ = '9223372036854775807';
const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;
/** the device topics a rule reads, each from its durable log */
const READABLE: { suffix: string; source: Source }[] = [
  { suffix: 'telemetry', source: 'telemetry' },
  { suffix: 'twin/reported', source: 'twin' },
  { suffix: 'commands/response', source: 'commandReply' },
];
/** device topics the gateway keeps no log of: a rule cannot resume over them (docs/decisions.md) */
const NOT_DURABLE = ['heartbeat', 'ota/status', 'certificate/renew'];
const SUPPORTED = 'devices/+/telemetry, devices/+/twin/reported, devices/+/commands/response (+ or one thing id as the second level), $events/connectivity, $events/state';

/** Does MQTT filter `filter` (levels) match topic `topic` (levels)? */
function matches(filter: string[], topic: string[]): boolean {
  for (let i = 0; i < filter.length; i++) {
    if (filter[i] === '#') return true;
    if (i >= topic.length) return false;
    if (filter[i] !== '+' && filter[i] !== topic[i]) return false;
  }
  return filter.length === topic.length;
}

/** The thing a device-topic filter names (its second level), if it names one. */
export function thingOfFilter(from: string): string | undefined {
  const thing = from.split('/')[1];
  return thing !== undefined && UUID.test(thing) ? thing.toLowerCase() : undefined;
}

/**
 * What a rule's `from` reads: one source, the device topic filter matching exactly one of the
 * device-published topics the gateway logs (telemetry, twin reports, command replies), or an event
 * kind. Otherwise 400 naming `from`: a filter over several topics (a rule reads one log), over
 * heartbeats (use $events/connectivity) or over a topic kept in no log.
 */
export function parseFrom(from: string): { source: Source; thingId?: string } {
  if (from === '$events/connectivity') return { source: 'connectivity' };
  if (from === '$events/state') return { source: 'state' };
  if (from.startsWith('$')) throw invalid(`from: ${JSON.stringify(from)} is not an event kind; use $events/connectivity or $events/state`);
  const levels = from.split('/');
  levels.forEach((l, i) => {
    if ((l.includes('#') && (l !== '#' || i !== levels.length - 1)) || (l.includes('+') && l !== '+')) {
      throw invalid(`from: ${JSON.stringify(from)} is not a valid MQTT topic filter ('#' only as the last level, '+' only as a whole level)`);
    }
  });
  if (levels[0] !== 'devices' && levels[0] !== '#') throw invalid(`from: ${JSON.stringify(from)} must be a topic filter under devices/+/... or an event kind; supported: ${SUPPORTED}`);
  const thing = levels[1];
  if (thing !== undefined && thing !== '+' && thing !== '#' && !UUID.test(thing)) throw invalid(`from: the second level must be + or a thing id, not ${JSON.stringify(thing)}`);
  const sample = ['devices', UUID.test(thing ?? '') ? thing : '00000000-0000-0000-0000-000000000000'];
  const covers = (suffix: string) => matches(levels, [...sample, ...suffix.split('/')]);
  const readable = READABLE.filter((r) => covers(r.suffix));
  const unlogged = NOT_DURABLE.filter(covers);
  if (readable.length === 1 && unlogged.length === 0) return { source: readable[0].source, thingId: thingOfFilter(from) };
  if (readable.length > 1 || (readable.length === 1 && unlogged.length > 0)) {
    const topics = [...readable.map((r) => r.suffix), ...unlogged];
    throw invalid(`from: ${JSON.stringify(from)} matches several device topics (${topics.join(', ')}); a rule reads one, each from its own durable log: create a rule per topic (${SUPPORTED})`);
  }
  if (unlogged.includes('heartbeat')) {
    throw invalid(`from: ${JSON.stringify(from)} matches heartbeat only: heartbeats are kept as the device's last seen time, not as messages, so a rule could not deliver them at least once; use $events/connectivity (connects and disconnects, durable) for liveness`);
  }
  if (unlogged.length) {
    throw invalid(`from: ${JSON.stringify(from)} matches ${unlogged.join(', ')} only: the gateway keeps no durable log of those topics, so a rule could not deliver them at least once; supported: ${SUPPORTED}`);
  }
  throw invalid(`from: ${JSON.stringify(from)} matches no device topic a rule can read; supported: ${SUPPORTED}`);
}

const unknownBridge = (id: string) => notFound(`bridge ${id} not found`);
const unknownRule = (id: string) => notFound(`rule ${id} not found`);

/** The URL as shown: no user or password. */
function shownUrl(url: URL): string {
  const u = new URL(url.toString());
  u.username = '';
  u.password = '';
  return u.toString();
}

function checkUrl(type: 'nats' | 'amqp', url: string): URL {
  let u: URL;
  try {
    u = new URL(url);
  } catch {
    throw invalid(`url: ${JSON.stringify(url.slice(0, 80))} is not a URL`);
  }
  const ok = type === 'nats' ? u.protocol === 'nats:' : u.protocol === 'amqp:' || u.protocol === 'amqps:';
  if (!ok) throw invalid(`url: a ${type} bridge takes ${type === 'nats' ? 'nats://host:port' : 'amqp://host:port or amqps://host:port'}, not ${u.protocol}//`);
  if (!u.hostname) throw invalid('url: names no host');
  return u;
}

export interface BridgeView {
  id: string; name: string; type: 'nats' | 'amqp'; url: string; subject_prefix: string; exchange: string | null; has_credentials: boolean; created_at: string; updated_at: string;
}

export interface RuleView {
  id: string; name: string; from: string; source: Source; bridge_id: string; where: Where | null; select: string[] | null; format: 'event' | 'batch';
  status: 'ENABLED' | 'DISABLED' | 'FAILING'; failing_since: string | null; last_error: string | null; last_error_at: string | null;
  delivered: number; failed: number; last_delivered_at: string | null; lag: { messages: number; seconds: number }; created_at: string; updated_at: string;
}

const iso = (d: Date | null) => (d ? d.toISOString() : null);

/** Bridges (sinks) and rules of an account: create, read, change, delete. Deliveries: worker.ts. */
export class BridgesService {
  constructor(private readonly d: {
    sql: Sql; repo: BridgesRepo; actors: ActorStore; clock: Clock; log: Logger; sealer: Sealer; telemetryLog: TelemetryLog; deviceLog: DeviceMessageLog;
    failingAfterMs: number; telemetryHistory: boolean; onChange: () => void;
  }) {}

  // --- bridges

  async createBridge(caller: Caller, input: BridgeCreate): Promise<BridgeView> {
    const url = checkUrl(input.type, input.url);
    if (input.type === 'nats' && input.exchange !== undefined) throw invalid('exchange: only an amqp bridge publishes to an exchange');
    if (input.type === 'amqp' && input.token !== undefined) throw invalid('token: only a nats bridge takes a token');
    const id = crypto.randomUUID();
    const at = this.d.clock.now();
    const secret: BridgeSecret = { url: input.url, username: input.username, password: input.password, token: input.token };
    try {
      await this.d.repo.insertBridge({
        id, account_id: caller.accountId, name: input.name, type: input.type, url: shownUrl(url), secret_sealed: this.d.sealer.seal(JSON.stringify(secret)),
        subject_prefix: input.subject_prefix, exchange: input.type === 'amqp' ? input.exchange ?? 'amq.topic' : null,
      }, at);
    } catch (err) {
      if ((err as { code?: string }).code === '23505') throw conflict(`name: a bridge named ${JSON.stringify(input.name)} exists in this account`);
      throw err;
    }
    this.d.log.info({ bridgeId: id, accountId: caller.accountId, type: input.type, by: caller.sub }, 'bridge created');
    return this.getBridge(caller, id);
  }

  async getBridge(caller: Caller, id: string): Promise<BridgeView> {
    const row = await this.d.repo.bridge(caller.accountId, id);
    if (!row) throw unknownBridge(id);
    return this.bridgeView(row);
  }

  async listBridges(caller: Caller): Promise<BridgeView[]> {
    return (await this.d.repo.bridges(caller.accountId)).map((r) => this.bridgeView(r));
  }

  async patchBridge(caller: Caller, id: string, input: BridgePatch): Promise<BridgeView> {
    const row = await this.d.repo.bridge(caller.accountId, id);
    if (!row) throw unknownBridge(id);
    const secret = this.secretOf(row);
    const next: BridgeSecret = {
      url: input.url ?? secret.url,
      username: input.username ?? secret.username, password: input.password ?? secret.password, token: input.token ?? secret.token,
    };
    const url = checkUrl(row.type, next.url);
    if (row.type === 'nats' && input.exchange !== undefined) throw invalid('exchange: only an amqp bridge publishes to an exchange');
    try {
      await this.d.repo.updateBridge(id, {
        name: input.name ?? row.name, url: shownUrl(url), secret_sealed: this.d.sealer.seal(JSON.stringify(next)),
        subject_prefix: input.subject_prefix ?? row.subject_prefix, exchange: input.exchange ?? row.exchange,
      }, this.d.clock.now());
    } catch (err) {
      if ((err as { code?: string }).code === '23505') throw conflict(`name: a bridge named ${JSON.stringify(input.name)} exists in this account`);
      throw err;
    }
    this.d.onChange();
    return this.getBridge(caller, id);
  }

  async deleteBridge(caller: Caller, id: string): Promise<void> {
    const row = await this.d.repo.bridge(caller.accountId, id);
    if (!row) throw unknownBridge(id);
    const rules = await this.d.repo.rulesOfBridge(id);
    if (rules > 0) throw conflict(`bridge ${id} is used by ${rules} rule(s): delete them first`);
    await this.d.repo.deleteBridge(id);
    this.d.onChange();
  }

  /** The bridge's credentials and URL in clear (the worker opens its sink with them). */
  secretOf(row: BridgeRow): BridgeSecret {
    return JSON.parse(this.d.sealer.open(row.secret_sealed)) as BridgeSecret;
  }

  private bridgeView(r: BridgeRow): BridgeView {
    const s = this.secretOf(r);
    let inUrl = false;
    try {
      const u = new URL(s.url);
      inUrl = u.username !== '' || u.password !== '';
    } catch { /* checked at creation */ }
    return {
      id: r.id, name: r.name, type: r.type, url: r.url, subject_prefix: r.subject_prefix, exchange: r.exchange,
      has_credentials: inUrl || s.username !== undefined || s.password !== undefined || s.token !== undefined,
      created_at: r.created_at.toISOString(), updated_at: r.updated_at.toISOString(),
    };
  }

  // --- rules

  async createRule(caller: Caller, input: RuleCreate): Promise<RuleView> {
    const { source } = parseFrom(input.from);
    if (source === 'telemetry' && !this.d.telemetryHistory) throw conflict('from: telemetry history is off on this gateway (TELEMETRY_HISTORY=false): a telemetry rule has no durable log to read');
    const bridge = await this.d.repo.bridge(caller.accountId, input.bridge_id);
    if (!bridge) throw invalid(`bridge_id: no bridge ${input.bridge_id} in this account`);
    const id = crypto.randomUUID();
    const at = this.d.clock.now();
    // deliveries start with what is written after this point (the log before it is not replayed)
    let pos: { xid: string; thing: string | null; seq: string | null };
    if (source === 'telemetry') {
      const head = await this.d.telemetryLog.head();
      pos = { xid: head.tx, thing: head.thingId, seq: null };
    } else if (DEVICE_LOG_SOURCES.has(source)) {
      const head = await this.d.deviceLog.head();
      pos = { xid: head.tx, thing: null, seq: head.seq };
    } else {
      pos = { xid: (BigInt(await this.d.repo.horizon()) - 1n).toString(), thing: null, seq: MAX_SEQ };
    }
    try {
      await this.d.actors.run(async (uow) => {
        await this.d.repo.insertRule(uow.sql, {
          id, account_id: caller.accountId, bridge_id: bridge.id, name: input.name, from_filter: input.from, source,
          where_expr: input.where ?? null, select_fields: input.select ?? null, format: input.format, pos_xid: pos.xid, pos_thing: pos.thing, pos_seq: pos.seq, created_by: caller.sub,
        }, at);
        await uow.create(bridgeRuleKind, id, { id, accountId: caller.accountId, name: input.name, failingAfterMs: this.d.failingAfterMs, createdAt: at.toISOString() });
        if (!input.enabled) await this.step(uow, id, { type: 'DISABLE', at: at.toISOString(), by: caller.sub });
      });
    } catch (err) {
      if ((err as { code?: string }).code === '23505') throw conflict(`name: a rule named ${JSON.stringify(input.name)} exists in this account`);
      throw err;
    }
    this.d.log.info({ ruleId: id, accountId: caller.accountId, source, bridgeId: bridge.id, by: caller.sub }, 'bridge rule created');
    this.d.onChange();
    return this.getRule(caller, id);
  }

  async getRule(caller: Caller, id: string): Promise<RuleView> {
    const row = await this.d.repo.rule(caller.accountId, id);
    if (!row) throw unknownRule(id);
    return this.ruleView(row);
  }

  async listRules(caller: Caller): Promise<RuleView[]> {
    return Promise.all((await this.d.repo.rules(caller.accountId)).map((r) => this.ruleView(r)));
  }

  async patchRule(caller: Caller, id: string, input: RulePatch): Promise<RuleView> {
    const row = await this.d.repo.rule(caller.accountId, id);
    if (!row) throw unknownRule(id);
    const at = this.d.clock.now().toISOString();
    try {
      await this.d.actors.run(async (uow) => {
        if (input.name !== undefined || input.where !== undefined || input.select !== undefined || input.format !== undefined) {
          await this.step(uow, id, { type: 'UPDATE', at, by: caller.sub });
          await this.d.repo.updateRule(uow.sql, id, {
            name: input.name ?? row.name,
            where_expr: input.where === undefined ? row.where_expr ?? null : input.where,
            select_fields: input.select === undefined ? row.select_fields : input.select,
            format: input.format ?? row.format,
          }, new Date(at));
        }
        if (input.enabled !== undefined) await this.step(uow, id, { type: input.enabled ? 'ENABLE' : 'DISABLE', at, by: caller.sub });
      });
    } catch (err) {
      if ((err as { code?: string }).code === '23505') throw conflict(`name: a rule named ${JSON.stringify(input.name)} exists in this account`);
      throw err;
    }
    this.d.onChange();
    return this.getRule(caller, id);
  }

  async deleteRule(caller: Caller, id: string): Promise<void> {
    const row = await this.d.repo.rule(caller.accountId, id);
    if (!row) throw unknownRule(id);
    await this.d.actors.run(async (uow) => {
      await this.step(uow, id, { type: 'DELETE', at: this.d.clock.now().toISOString(), by: caller.sub });
      await this.d.repo.deleteRule(uow.sql, id);
      await uow.delete(bridgeRuleKind, id);
    });
    this.d.onChange();
  }

  /** A delivery outcome from the worker (a deleted rule has nothing left to record). */
  async outcome(id: string, event: Extract<BridgeRuleEvent, { type: 'DELIVERED' | 'DELIVERY_FAILED' }>): Promise<string | undefined> {
    try {
      return await this.d.actors.run(async (uow) => {
        const r = await uow.trySend(bridgeRuleKind, id, event);
        if (!('refused' in r) && r.state === 'FAILING' && event.type === 'DELIVERY_FAILED' && r.events.some((e) => e.type === 'rule.failing')) {
          this.d.log.warn({ ruleId: id, error: event.error }, 'bridge rule failing: its sink refused every delivery for too long');
        }
        return r.state;
      });
    } catch (err) {
      if (err instanceof DomainError && err.kind === 'not_found') return undefined;
      throw err;
    }
  }

  /** Lag of a rule: messages written and not yet acknowledged, and the oldest one's age. */
  async lag(row: RuleRow): Promise<{ messages: number; seconds: number }> {
    const b = row.source === 'telemetry'
      ? await this.d.telemetryLog.behind(row.account_id, { tx: row.pos_xid, thingId: row.pos_thing })
      : row.source === 'twin' || row.source === 'commandReply'
        ? await this.d.deviceLog.behind(row.account_id, row.source, { tx: row.pos_xid, seq: row.pos_seq ?? MAX_SEQ })
        : await this.d.repo.eventsBehind(row.account_id, SOURCE_EVENTS[row.source], row.pos_xid, row.pos_seq ?? MAX_SEQ);
    const seconds = b.oldest ? Math.max(0, (this.d.clock.now().getTime() - b.oldest.getTime()) / 1000) : 0;
    return { messages: b.messages, seconds: Math.round(seconds * 1000) / 1000 };
  }

  private async ruleView(r: RuleRow): Promise<RuleView> {
    return {
      id: r.id, name: r.name, from: r.from_filter, source: r.source, bridge_id: r.bridge_id, where: (r.where_expr as Where | null) ?? null, select: r.select_fields, format: r.format,
      status: r.status as RuleView['status'], failing_since: iso(r.failing_since), last_error: r.last_error, last_error_at: iso(r.last_error_at),
      delivered: Number(r.delivered), failed: Number(r.failed), last_delivered_at: iso(r.last_delivered_at), lag: await this.lag(r),
      created_at: r.created_at.toISOString(), updated_at: r.updated_at.toISOString(),
    };
  }

  private async step(uow: UnitOfWork, id: string, event: BridgeRuleEvent): Promise<void> {
    const r = await uow.trySend(bridgeRuleKind, id, event);
    if ('refused' in r) throw conflict(`rule ${id} is ${r.state}: ${event.type} is not accepted`);
  }
}
