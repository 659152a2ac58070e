/**
 * The CloudEvents 1.0 envelope of a delivery (JSON format), filters (`where`) and projections
 * (`select`) of a rule, and the reading of a telemetry history row's points without re-encoding
 * the payloads (docs/decisions.md, "Data bridges").
 */
import type { SinkMessage } from './sinks.js';

export type Kind = 'telemetry' | 'connectivity' | 'state' | 'twin' | 'commandReply';

export const EVENT_TYPES: Record<string, string> = {
  telemetry: 'io.gateway.device.telemetry',
  twin: 'io.gateway.device.twinReported',
  commandReply: 'io.gateway.device.commandReplied',
  'device.connected': 'io.gateway.device.connected',
  'device.disconnected': 'io.gateway.device.disconnected',
  'thing.stateChanged': 'io.gateway.thing.stateChanged',
  'thing.enrolled': 'io.gateway.thing.enrolled',
};

/** how many things' fixed envelope parts a rule keeps (then it starts over) */
const MAX_CACHED_THINGS = 10_000;

/**
 * The CloudEvents 1.0 envelopes (JSON format) of one rule:
 * `{"specversion":"1.0","id","source","type","time","subject","datacontenttype","account","kind","rule","commandid"?,"data"}`,
 * `data` spliced in as text (a telemetry payload keeps the device's bytes: number formats, key order;
 * `commandid`: a command reply's MQTT 5 correlation data). The parts fixed per thing, kind and type
 * (source, subject, account, rule) are encoded once and kept, and a time once per distinct millisecond
 * in a row, so an event costs its id, its time and its data (about half the CPU of encoding every field
 * each time).
 */
export class Envelopes {
  /** by thing, then event type (a rule reads one kind); `bytes`: the same as HeadParts' `fixed`, made when first asked */
  private readonly fixed = new Map<string, Map<string, { head: string; tail: string; bytes?: HeadParts['fixed'] }>>();
  private lastAt = NaN;
  private lastTime = '';
  /** the second of the last time formatted, and its text up to the milliseconds (`2026-01-01T00:00:00.`) */
  private lastSecond = NaN;
  private secondText = '';

  constructor(private readonly accountId: string, private readonly ruleId: string) {}

  of(kind: Kind, type: string, thingId: string, id: string, time: string, data: string, commandId?: string | null): string {
    return `${this.head(kind, type, thingId, id, time, commandId)}${data}}`;
  }

  /** The envelope up to its data: `{"specversion":"1.0",...,"data":` (the data and a closing `}` follow). */
  head(kind: Kind, type: string, thingId: string, id: string, time: string, commandId?: string | null): string {
    const parts = this.partsOf(kind, type, thingId);
    return `{"specversion":"1.0","id":${JSON.stringify(id)}${parts.head}${JSON.stringify(time)}${parts.tail}`
      + `${commandId ? `"commandid":${JSON.stringify(commandId)},` : ''}"data":`;
  }

  /**
   * The same head in parts that `encode` writes as bytes, without a string per event (the head's text, its
   * flattening and its UTF-8 length and encoding were a sixth of the delivery thread's time with 48-byte payloads):
   * `HEAD_START`, the id, `fixed.head`, the time, `fixed.tail`. Undefined where the id needs JSON escaping (then `head`).
   */
  headParts(kind: Kind, type: string, thingId: string, id: string, time: string): HeadParts | undefined {
    if (!PLAIN.test(id)) return undefined;
    const parts = this.partsOf(kind, type, thingId);
    parts.bytes ??= { head: Buffer.from(`"${parts.head}"`), tail: Buffer.from(`"${parts.tail}"data":`) };
    return { id, time, fixed: parts.bytes };
  }

  private partsOf(kind: Kind, type: string, thingId: string) {
    let ofThing = this.fixed.get(thingId);
    if (!ofThing) {
      if (this.fixed.size >= MAX_CACHED_THINGS) this.fixed.clear();
      this.fixed.set(thingId, (ofThing = new Map()));
    }
    let parts = ofThing.get(type);
    if (!parts) {
      parts = {
        head: `,"source":${JSON.stringify(`/accounts/${this.accountId}/things/${thingId}`)},"type":${JSON.stringify(type)},"time":`,
        tail: `,"subject":${JSON.stringify(thingId)},"datacontenttype":"application/json","account":${JSON.stringify(this.accountId)},"kind":"${kind}","rule":${JSON.stringify(this.ruleId)},`,
      };
      ofThing.set(type, parts);
    }
    return parts;
  }

  /** An epoch-millisecond time as ISO 8601 (points of one ingest batch share their milliseconds). */
  time(at: number): string {
    if (at !== this.lastAt) {
      this.lastAt = at;
      // the milliseconds of one second appended to its text, formatted once (toISOString was 5% of a
      // delivery's CPU when every point had its own millisecond)
      const second = Math.floor(at / 1000);
      if (second !== this.lastSecond || !Number.isSafeInteger(at)) {
        const text = new Date(at).toISOString();
        this.lastSecond = Number.isSafeInteger(at) ? second : NaN;
        this.secondText = text.slice(0, -4);
        this.lastTime = text;
      } else {
        const ms = at - second * 1000;
        this.lastTime = `${this.secondText}${ms < 10 ? '00' : ms < 100 ? '0' : ''}${ms}Z`;
      }
    }
    return this.lastTime;
  }
}

/** printable ASCII without `"` and `\`: text that JSON writes as it is, one byte a character */
const PLAIN = /^[\x20\x21\x23-\x5b\x5d-\x7e]*$/;

/** An envelope's head in parts (Envelopes.headParts): `HEAD_START` + id + `fixed.head` + time + `fixed.tail`, all ASCII. */
export interface HeadParts {
  id: string;
  /** ISO 8601 (ASCII) */
  time: string;
  /** `"` + the fixed part before the time + `"`, and `"` + the fixed part after it + `"data":`, as bytes */
  fixed: { head: Buffer; tail: Buffer };
}
export const HEAD_START = Buffer.from('{"specversion":"1.0","id":"');

export const BATCH_CONTENT_TYPE = 'application/cloudevents-batch+json';
/** A batch message holds at most this many events and about this many bytes of them (NATS's default max_payload is 1 MiB). */
export const BATCH_MAX_EVENTS = 1_000;
export const BATCH_MAX_BYTES = 256 * 1024;

/**
 * A batch's id: its first event's and its count. A redelivery that splits the same way repeats the
 * id, and the sink's deduplication (JetStream's Nats-Msg-Id) drops it; one that reads more or fewer
 * rows (its read size adapts) makes other batches with other ids, delivered again rather than
 * dropped. (The first id alone would let a longer batch be dropped as a repeat of a shorter one sent
 * before a failure: its further events lost.)
 */
export const batchId = (firstId: string, events: number) => `${firstId}:batch:${events}`;

/**
 * A rule's `batch` format: consecutive events of one subject (one thing and kind) make one message,
 * a JSON array of their envelopes (CloudEvents' batched format), in order, within the limits above
 * (`encode` puts each subject's events of a delivery together first). The batches as index ranges
 * [first, end) of the events (`size`: an event's bytes).
 */
export function batchRanges(events: { subject: string }[], size: (i: number) => number, maxEvents = BATCH_MAX_EVENTS, maxBytes = BATCH_MAX_BYTES): [number, number][] {
  const out: [number, number][] = [];
  let i = 0;
  while (i < events.length) {
    const subject = events[i].subject;
    let j = i + 1;
    let bytes = size(i);
    while (j < events.length && j - i < maxEvents && events[j].subject === subject && bytes + size(j) + 1 <= maxBytes) {
      bytes += size(j) + 1;
      j++;
    }
    out.push([i, j]);
    i = j;
  }
  return out;
}

/**
 * The points of a history row, `[[epoch ms, {values}], ...]` as stored: each point's time and where
 * its payload's text starts and ends. A string is passed with `indexOf` to its closing quote (the
 * next one after an even run of backslashes), not character by character: a 1 KiB payload's strings
 * cost 0.2 µs instead of 2.9. On the bytes of the UTF-8 text decoded as latin1 (one character per
 * byte) the positions are byte offsets: the characters it looks for are ASCII, and no byte of a
 * multi-byte character is ASCII.
 */
export function pointRanges(text: string): { at: number; start: number; end: number }[] {
  const out: { at: number; start: number; end: number }[] = [];
  let depth = 0;
  let pointStart = -1;
  let objectStart = -1;
  for (let i = 0; i < text.length; i++) {
    const c = text.charCodeAt(i);
    if (c === 34 /* " */) {
      for (;;) {
        i = text.indexOf('"', i + 1);
        if (i < 0) return out;
        let b = i - 1;
        while (text.charCodeAt(b) === 92 /* \ */) b--;
        if ((i - 1 - b) % 2 === 0) break;
      }
    } else if (c === 91 /* [ */ || c === 123 /* { */) {
      depth++;
      if (depth === 2 && c === 91) pointStart = i + 1;
      else if (depth === 3 && c === 123) objectStart = i;
    } else if (c === 93 /* ] */ || c === 125 /* } */) {
      if (depth === 3 && c === 125 && objectStart >= 0) {
        const at = Number(text.slice(pointStart, text.indexOf(',', pointStart)));
        out.push({ at, start: objectStart, end: i + 1 });
        objectStart = -1;
      }
      depth--;
    }
  }
  return out;
}

/** A comparison on one payload field: a bare value is `eq`. */
export type FieldTest = { eq?: unknown; ne?: unknown; gt?: number; gte?: number; lt?: number; lte?: number; exists?: boolean; in?: unknown[] };
export interface Where {
  /** top-level payload fields (telemetry values, or the event's fields) */
  payload?: Record<string, FieldTest | string | number | boolean | null>;
  /** the thing's attributes: model (`vid:pid` or model id), tags (all of them), lifecycle states (any of them) */
  thing?: { model?: string; tags?: string[]; state?: string[] };
}

const same = (a: unknown, b: unknown) => JSON.stringify(a) === JSON.stringify(b);

/** The payload's top-level fields: none when it is not a JSON object (a command reply may be any JSON value). */
export function fieldsOf(value: unknown): Record<string, unknown> {
  return value !== null && typeof value === 'object' && !Array.isArray(value) ? (value as Record<string, unknown>) : {};
}

/** Does a parsed payload pass the rule's payload tests? */
export function passes(where: Where['payload'], value: Record<string, unknown>): boolean {
  if (!where) return true;
  for (const [field, test] of Object.entries(where)) {
    const v = value[field];
    if (test === null || typeof test !== 'object') {
      if (!same(v, test)) return false;
      continue;
    }
    if (test.exists !== undefined && (v !== undefined) !== test.exists) return false;
    if ('eq' in test && !same(v, test.eq)) return false;
    if ('ne' in test && same(v, test.ne)) return false;
    if (test.in !== undefined && !test.in.some((x) => same(v, x))) return false;
    if (test.gt !== undefined && !(typeof v === 'number' && v > test.gt)) return false;
    if (test.gte !== undefined && !(typeof v === 'number' && v >= test.gte)) return false;
    if (test.lt !== undefined && !(typeof v === 'number' && v < test.lt)) return false;
    if (test.lte !== undefined && !(typeof v === 'number' && v <= test.lte)) return false;
  }
  return true;
}

/** The selected top-level fields (those present), as JSON text. */
export function pick(fields: string[], value: Record<string, unknown>): string {
  const out: Record<string, unknown> = {};
  for (const f of fields) if (f in value) out[f] = value[f];
  return JSON.stringify(out);
}
