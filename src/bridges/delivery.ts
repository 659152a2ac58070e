/**
 * A rule's delivery proper: the sink messages built from what the rule read (`where`, `select`,
 * envelope, format) and their publish, resolved once the sink acknowledged them all. The rule's
 * loop (worker.ts) reads, keeps the position and the counts; this part holds no position, so it
 * runs in the delivery thread (deliveryThread.ts) as well as inline.
 */
import { setImmediate as nextTurn } from 'node:timers/promises';
import { BATCH_CONTENT_TYPE, BATCH_MAX_BYTES, BATCH_MAX_EVENTS, batchId, batchRanges, Envelopes, EVENT_TYPES, fieldsOf, HEAD_START, passes, pick, pointRanges, type HeadParts, type Kind, type Where } from './envelope.js';
import { OWN_MEMORY, type PackedMemory } from '../broker/telemetryHistory.js';
import { BufferPool } from './bufferPool.js';
import { openSink, type Sink, type SinkMessage, type SinkSettings } from './sinks.js';

/** What a delivery needs of its rule (plain data: it crosses to the delivery thread). */
export interface DeliveryRule {
  id: string;
  /**
   * the delivering loop's own key (its sink connection and envelopes are kept under it): a rule
   * leased again gets a new loop while the old one may still be closing
   */
  runner: string;
  accountId: string;
  format: 'event' | 'batch';
  where: Where | null;
  select: string[] | null;
  /** the bridge's subject prefix */
  prefix: string;
  /** the bridge's sink; `key` changes when the bridge does (its sink is then opened again) */
  sink: { key: string; settings: SinkSettings };
}

/** One event of a device log or the domain events, as read. */
export interface RawEvent {
  kind: Kind;
  thingId: string;
  id: string;
  type: string;
  time: string;
  /** the payload as JSON text (spliced into the envelope as it is) */
  payload: string;
  /** the payload already parsed (domain events), else parsed here when `where` or `select` needs it */
  parsed?: Record<string, unknown>;
  commandId?: string | null;
}

/**
 * A telemetry history row (a thing's messages of one ingest batch): its points, `[[epoch ms, {payload}], ...]`
 * as UTF-8 JSON text, are bytes `start` to `end` of the input's `points`.
 */
export interface RawTelemetryRow {
  tx: string;
  thingId: string;
  /** how many points the row holds */
  messages: number;
  start: number;
  end: number;
}

/**
 * What a delivery builds from. Telemetry comes as bytes read from the log undecoded, in one buffer
 * that owns its memory, so that it crosses to the delivery thread as a transfer, not a copy.
 */
export type DeliveryInput = { telemetry: { rows: RawTelemetryRow[]; points: Uint8Array } } | { events: RawEvent[] };

/** A publish the sink refused or did not acknowledge: `events` were not delivered (the caller retries). */
export class DeliveryError extends Error {
  constructor(message: string, readonly events: number) {
    super(message);
    this.name = 'DeliveryError';
  }
}

export interface Delivery {
  /** Where a read's packed points go (TelemetryLog.readPacked): buffers with memory of their own. */
  readonly packed: PackedMemory;
  /** Gets ready for deliveries (the thread starts and loads its modules: seconds of CPU under tsx, better before the data comes). */
  warm(): void;
  /** Builds the rule's messages and publishes them: how many events went (after `where`); rejects with DeliveryError. */
  deliver(rule: DeliveryRule, input: DeliveryInput): Promise<number>;
  /** Closes a rule's loop's sink (`runner`: DeliveryRule.runner; the loop stopped on this node). */
  close(runner: string): Promise<void>;
  /** Closes every sink. */
  stop(): Promise<void>;
}

/**
 * events built before the event loop runs again (inline, the broker's reads and PUBACKs share the
 * loop: a read of 1,000 rows builds up to 5,000 events, tens of milliseconds in one piece otherwise)
 */
const SLICE_EVENTS = 256;

const errorText = (err: unknown) => (err instanceof Error ? err.message : String(err)).slice(0, 500);

/** Deliveries made in the calling thread, each rule with its envelopes and its sink connection. */
export class InlineDelivery implements Delivery {
  /** by DeliveryRule.runner */
  private readonly rules = new Map<string, { envelopes: Envelopes; sink?: { key: string; sink: Sink } }>();
  /** the messages' bodies, each delivery's buffer used again once its publish settled (the sinks copy what they send) */
  private readonly bodies = new BufferPool();

  warm(): void {}

  readonly packed = OWN_MEMORY;

  async deliver(rule: DeliveryRule, input: DeliveryInput): Promise<number> {
    const state = this.stateOf(rule);
    let body: Buffer | undefined;
    const { messages, events } = await this.build(rule, state.envelopes, input, (bytes) => (body = this.bodies.take(bytes)));
    try {
      if (events === 0) return 0;
      if (state.sink?.key !== rule.sink.key) {
        await state.sink?.sink.close().catch(() => {});
        state.sink = { key: rule.sink.key, sink: openSink(rule.sink.settings) };
      }
      await state.sink.sink.publish(messages);
    } catch (err) {
      throw new DeliveryError(errorText(err), events);
    } finally {
      if (body) this.bodies.give(body.buffer as ArrayBuffer);
    }
    return events;
  }

  async close(runner: string): Promise<void> {
    const state = this.rules.get(runner);
    this.rules.delete(runner);
    await state?.sink?.sink.close().catch(() => {});
  }

  async stop(): Promise<void> {
    await Promise.all([...this.rules.keys()].map((id) => this.close(id)));
  }

  private stateOf(rule: DeliveryRule) {
    let state = this.rules.get(rule.runner);
    if (!state) this.rules.set(rule.runner, (state = { envelopes: new Envelopes(rule.accountId, rule.id) }));
    return state;
  }

  /** The sink messages, and how many events they hold (a batch holds several). */
  private async build(rule: DeliveryRule, envelopes: Envelopes, input: DeliveryInput, allocate: (bytes: number) => Buffer): Promise<{ messages: SinkMessage[]; events: number }> {
    const events: EventPart[] = [];
    const filtered = Boolean(rule.where?.payload || rule.select);
    // one subject string for a thing's consecutive events (the sink tests a subject once, not per message)
    let last = { thingId: '', kind: '', subject: '' };
    const subjectOf = (kind: Kind, thingId: string) => {
      if (thingId !== last.thingId || kind !== last.kind) last = { thingId, kind, subject: `${rule.prefix}.${thingId}.${kind}` };
      return last.subject;
    };
    /** data: the payload's UTF-8 bytes as sent, or its text */
    const add = (kind: Kind, thingId: string, id: string, type: string, time: string, data: Uint8Array | string, parsed?: Record<string, unknown>, commandId?: string | null) => {
      if (filtered) {
        const value = parsed ?? fieldsOf(JSON.parse(typeof data === 'string' ? data : Buffer.from(data.buffer, data.byteOffset, data.byteLength).toString('utf8')));
        if (!passes(rule.where?.payload, value)) return;
        if (rule.select) data = pick(rule.select, value);
      }
      const head = (commandId ? undefined : envelopes.headParts(kind, type, thingId, id, time)) ?? envelopes.head(kind, type, thingId, id, time, commandId);
      events.push({ subject: subjectOf(kind, thingId), id: `${rule.id}:${id}`, head, data });
    };
    let built = 0;
    if ('telemetry' in input) {
      const { rows, points } = input.telemetry;
      const bytes = Buffer.from(points.buffer, points.byteOffset, points.byteLength);
      for (const row of rows) {
        // the row's text as latin1 (one character per byte): the points' positions are byte offsets, and
        // their payloads go into the envelopes as the bytes the device sent, never decoded
        const ranges = pointRanges(bytes.toString('latin1', row.start, row.end));
        ranges.forEach((p, i) => add('telemetry', row.thingId, `${row.tx}-${row.thingId}-${i}`, EVENT_TYPES.telemetry, envelopes.time(p.at), bytes.subarray(row.start + p.start, row.start + p.end)));
        built += ranges.length;
        if (built >= SLICE_EVENTS) {
          built = 0;
          await nextTurn();
        }
      }
    } else {
      for (const e of input.events) add(e.kind, e.thingId, e.id, e.type, e.time, e.payload, e.parsed, e.commandId);
    }
    return { messages: encode(events, rule.format, BATCH_MAX_EVENTS, BATCH_MAX_BYTES, allocate), events: events.length };
  }
}

/** An event before encoding: its envelope up to the data (text, or in parts: Envelopes.headParts), and the data. */
export interface EventPart {
  subject: string;
  id: string;
  head: string | HeadParts;
  data: Uint8Array | string;
}

const headBytes = (h: string | HeadParts) => (typeof h === 'string' ? Buffer.byteLength(h) : HEAD_START.length + h.id.length + h.fixed.head.length + h.time.length + h.fixed.tail.length);

/**
 * The events' indexes with each subject's events together, in their order, the subjects in the order they first
 * come. A read is in commit order, so one thing's rows are apart (at 48-byte payloads a row held about three
 * messages, and batches of runs were about three events long: a NATS message costs as much whatever its size).
 * Events of different things are not ordered relative to each other anyway (different subjects).
 */
function bySubject(events: { subject: string }[]): number[] {
  const groups = new Map<string, number[]>();
  for (let i = 0; i < events.length; i++) {
    const g = groups.get(events[i].subject);
    if (g) g.push(i);
    else groups.set(events[i].subject, [i]);
  }
  return [...groups.values()].flat();
}

/**
 * The sink messages of a delivery's events, their bodies written into one buffer: each event's
 * envelope head, its data's bytes copied as they are, `}`; in `batch` format each subject's events
 * (one thing's, in order) as JSON arrays (bySubject, batchRanges, batchId). One copy of each payload, no string per message (the strings
 * of a delivery of 1 KiB payloads were a fifth of the delivery thread's time in garbage collection).
 */
export function encode(events: EventPart[], format: DeliveryRule['format'], maxEvents = BATCH_MAX_EVENTS, maxBytes = BATCH_MAX_BYTES, allocate: (bytes: number) => Buffer = (bytes) => Buffer.allocUnsafe(bytes)): SinkMessage[] {
  const sizes = new Array<number>(events.length);
  let total = 0;
  for (let i = 0; i < events.length; i++) {
    const e = events[i];
    sizes[i] = headBytes(e.head) + (typeof e.data === 'string' ? Buffer.byteLength(e.data) : e.data.length) + 1;
    total += sizes[i] + 2; // a batch's comma or brackets at most
  }
  const out = allocate(total);
  let at = 0;
  const write = (e: EventPart) => {
    const h = e.head;
    if (typeof h === 'string') at += out.write(h, at);
    else {
      out.set(HEAD_START, at);
      at += HEAD_START.length;
      at += out.write(h.id, at, 'latin1');
      out.set(h.fixed.head, at);
      at += h.fixed.head.length;
      at += out.write(h.time, at, 'latin1');
      out.set(h.fixed.tail, at);
      at += h.fixed.tail.length;
    }
    if (typeof e.data === 'string') at += out.write(e.data, at);
    else {
      out.set(e.data, at);
      at += e.data.length;
    }
    out[at++] = 0x7d; // }
  };
  if (format === 'event') {
    return events.map((e) => {
      const from = at;
      write(e);
      return { subject: e.subject, id: e.id, body: out.subarray(from, at) };
    });
  }
  const order = bySubject(events);
  return batchRanges(order.map((i) => events[i]), (i) => sizes[order[i]], maxEvents, maxBytes).map(([i, j]) => {
    const from = at;
    out[at++] = 0x5b; // [
    for (let k = i; k < j; k++) {
      if (k > i) out[at++] = 0x2c; // ,
      write(events[order[k]]);
    }
    out[at++] = 0x5d; // ]
    const first = events[order[i]];
    return { subject: first.subject, id: batchId(first.id, j - i), contentType: BATCH_CONTENT_TYPE, body: out.subarray(from, at) };
  });
}
