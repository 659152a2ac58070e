/**
 * A bulk job's request body, read as it arrives: never held whole (issue 37). The body is the
 * job's JSON document `{ partner_id, correlation_id, mode, warehouse_id, resource, items: [...] }`
 * in any key order. A byte scanner finds where each item begins and ends; each item alone is
 * parsed (secure-json-parse, as the HTTP input guard parses whole bodies), written to a spool
 * file as one line and hashed. What stays in memory is one item (at most ITEM_MAX_BYTES), the
 * envelope's fields and a spool buffer, whatever the body's size.
 *
 * The rules are the HTTP input guard's for every JSON body (src/http/inputGuard.ts), applied per
 * value: nesting deeper than MAX_DEPTH, JSON that does not parse, bytes that are not UTF-8 and
 * strings holding NUL or a lone surrogate are 400s naming the field (`body.items.3.sku: ...`),
 * then the envelope is validated by the route's schema (400 `Validation failed`). An item
 * larger than ITEM_MAX_BYTES is not parsed: it is kept as a REJECTED item (ITEM_TOO_LARGE), the
 * others go on.
 */
import { isUtf8 } from 'node:buffer';
import crypto from 'node:crypto';
import fs from 'node:fs/promises';
import path from 'node:path';
import { setImmediate as nextTurn } from 'node:timers/promises';
import sjson from 'secure-json-parse';
import { invalid } from '../lib/errors.js';
import { badCharacter, fieldPath, findRefusedText } from '../lib/text.js';
import { sourceIdOf } from './resources.js';
import { jobBody, type JobBody } from './schemas.js';

/** Deepest nesting of a job body, as for every JSON body (the HTTP input guard's JSON_MAX_DEPTH). */
export const MAX_DEPTH = 64;
/** Largest item, in bytes of its JSON text; a larger one is REJECTED (ITEM_TOO_LARGE) unread. */
export const ITEM_MAX_BYTES = 64 * 1024;
/** Largest value of another field of the body (the envelope's fields are at most 200 characters). */
const FIELD_MAX_BYTES = 64 * 1024;
const KEY_MAX_BYTES = 1024;
/** Spooled lines are written when this much text waits. */
const FLUSH_BYTES = 256 * 1024;

export type JobEnvelope = Omit<JobBody, 'items'>;

/** An item refused as it was read: kept as a placeholder so that item numbers stay those of the request. */
export interface IntakeError {
  index: number;
  code: string;
  reason: string;
}

export interface JobUpload {
  /** the id the job gets if it is created (drawn before the body is read: the spool holds it) */
  jobId: string;
  envelope: JobEnvelope;
  /** items in the request (all of them, also beyond the item limit) */
  items: number;
  /** SHA-256 of the envelope and the items as sent (their JSON bytes), for idempotency */
  hash: string;
  intakeErrors: IntakeError[];
  /**
   * The spooled items as text, in blocks of whole rows of at most `maxBytes` (or one row, when
   * it is longer): a row is a line of fields separated by 0x02, `job_id, seq, source_id, item`
   * (an empty source_id: none). Neither 0x02 nor a line break can occur in a source_id
   * (printable ASCII) or in the JSON text of an item (JSON strings hold control characters only
   * escaped; line breaks between tokens are made spaces), so nothing needs quoting.
   */
  blocks(maxBytes: number): AsyncGenerator<string>;
  /** Removes the spool file. */
  discard(): Promise<void>;
}

/** The field separator of the spool's rows (see JobUpload.blocks). */
export const SPOOL_DELIMITER = '\x02';

/** The body is larger than the job limit (the route answers 413). */
export class BodyTooLarge extends Error {
  constructor(readonly limit: number) {
    super(`request body exceeds the limit of ${limit} bytes`);
  }
}

const malformed = (detail: string) => invalid(`request body is not valid JSON: ${detail}`, { title: 'Malformed JSON' });
const invalidText = (detail: string) => invalid(detail, { title: 'Invalid characters' });

const QUOTE = 0x22, BACKSLASH = 0x5c, COMMA = 0x2c, COLON = 0x3a;
const LBRACE = 0x7b, RBRACE = 0x7d, LBRACKET = 0x5b, RBRACKET = 0x5d;
const isSpace = (b: number) => b === 0x20 || b === 0x0a || b === 0x0d || b === 0x09;

/** What a captured value is: its size cap, nesting above it, and where it goes. */
const ROOT = 0, KEY = 1, FIELD = 2, ITEM = 3;
const CAPS = [FIELD_MAX_BYTES, KEY_MAX_BYTES, FIELD_MAX_BYTES, ITEM_MAX_BYTES];
const DEPTH_ABOVE = [0, 1, 1, 2];

/**
 * One JSON value being read, maybe across chunks: finds its end by tracking strings (and their
 * escapes) and brackets, and keeps its bytes while they are within its cap. Its text is checked
 * only by the parser afterwards (a value over its cap is never parsed).
 */
class Capture {
  size = 0;
  /** the value's bytes once complete; null when over its cap */
  bytes: Buffer | null = null;
  private parts: Buffer[] = [];
  private over = false;
  private started = false;
  private scalar = false;
  private inString = false;
  private escape = false;
  private readonly closers: number[] = [];

  constructor(readonly kind: number) {}

  /** Reads `buf` from `start`: the index just after the value, or -1 when the value goes on in the next chunk. */
  feed(buf: Buffer, start: number): number {
    if (!this.started) {
      this.started = true;
      const b = buf[start];
      // numbers and literals end at the first delimiter (what is between, the parser judges)
      this.scalar = b !== QUOTE && b !== LBRACE && b !== LBRACKET;
    }
    // the per-byte loop works on locals (this loop is most of the reading time)
    const closers = this.closers;
    const scalar = this.scalar;
    let inString = this.inString;
    let escape = this.escape;
    // the next backslash at or after i (-1: none in this chunk); -2: not searched yet
    let backslash = -2;
    for (let i = start; i < buf.length; i++) {
      const b = buf[i];
      if (inString) {
        if (escape) {
          escape = false;
          continue;
        }
        // inside a string: jump to its closing quote unless an escape comes first (native search)
        const quote = buf.indexOf(QUOTE, i);
        if (backslash !== -1 && backslash < i) backslash = buf.indexOf(BACKSLASH, i);
        if (backslash !== -1 && (quote === -1 || backslash < quote)) {
          i = backslash; // the loop's i++ moves to the escaped character, skipped above
          escape = true;
          continue;
        }
        if (quote === -1) break; // the string goes on in the next chunk
        i = quote;
        inString = false;
        if (closers.length === 0) return this.close(buf, start, i + 1);
      } else if (scalar) {
        if (isSpace(b) || b === COMMA || b === RBRACKET || b === RBRACE) return this.close(buf, start, i);
      } else if (b === QUOTE) inString = true;
      else if (b === LBRACE || b === LBRACKET) {
        if (DEPTH_ABOVE[this.kind] + closers.length + 1 > MAX_DEPTH) throw invalid(`request body is nested deeper than ${MAX_DEPTH} levels`, { title: 'Malformed JSON' });
        closers.push(b === LBRACE ? RBRACE : RBRACKET);
      } else if (b === RBRACE || b === RBRACKET) {
        if (closers.pop() !== b) throw malformed(`unexpected '${String.fromCharCode(b)}'`);
        if (closers.length === 0) return this.close(buf, start, i + 1);
      }
    }
    this.inString = inString;
    this.escape = escape;
    this.keep(buf.subarray(start));
    return -1;
  }

  /** The input ended: a number or literal ends with it, anything else is cut short. */
  endOfInput(): void {
    if (!this.scalar) throw malformed('Unexpected end of JSON input');
    this.close(Buffer.alloc(0), 0, 0);
  }

  private keep(part: Buffer): void {
    this.size += part.length;
    if (this.over) return;
    if (this.size > CAPS[this.kind]) {
      this.over = true;
      this.parts = [];
    } else this.parts.push(Buffer.from(part)); // a copy: the chunk is not held for one value
  }

  private close(buf: Buffer, start: number, end: number): number {
    const last = buf.subarray(start, end);
    this.size += last.length;
    if (!this.over && this.size <= CAPS[this.kind]) this.bytes = this.parts.length ? Buffer.concat([...this.parts, last]) : last;
    this.parts = [];
    return end;
  }
}

/** Bytes of one JSON value to its value, refused as the HTTP input guard refuses a whole body. */
function decode(bytes: Buffer, where: string): unknown {
  const utf8 = isUtf8(bytes);
  // not UTF-8: parsed byte for byte so that the bad string can be named
  const text = bytes.toString(utf8 ? 'utf8' : 'latin1');
  let value: unknown;
  try {
    value = sjson.parse(text, { protoAction: 'error', constructorAction: 'error' });
  } catch (err) {
    throw malformed(`${(err as Error).message} (in ${where})`);
  }
  if (!utf8) {
    const check = (s: string) => (isUtf8(Buffer.from(s, 'latin1')) ? undefined : 'is not valid UTF-8');
    throw invalidText(findRefusedText(value, where, check) ?? `${where}: is not valid UTF-8`);
  }
  // NUL and lone surrogates get past JSON.parse only as \u escapes
  if (text.includes('\\u')) {
    const bad = findRefusedText(value, where);
    if (bad) throw invalidText(bad);
  }
  return value;
}

const BEGIN = 0, KEY_OR_END = 1, NEXT_KEY = 2, AFTER_KEY = 3, VALUE = 4, AFTER_VALUE = 5, ITEM_OR_END = 6, NEXT_ITEM = 7, AFTER_ITEM = 8, DONE = 9;

/**
 * The job body's structure: a top-level object whose `items` member is an array; every other
 * member (known or not) and every item is a Capture. Items go to `onItem` as they complete.
 */
export class JobBodyScanner {
  /** the top-level members other than the items array */
  readonly fields = new Map<string, unknown>();
  /** a top-level value that is not an object (the schema refuses it) */
  root: { value: unknown } | undefined;
  itemsSeen = false;
  items = 0;
  private state = BEGIN;
  private key = '';
  private capture: Capture | undefined;
  private offset = 0;

  /** `onItem` gets each item's value and JSON bytes (a part of a chunk, or a copy), or null bytes for one over ITEM_MAX_BYTES. */
  constructor(private readonly onItem: (index: number, value: unknown, bytes: Buffer | null, size: number) => void) {}

  push(buf: Buffer): void {
    let i = 0;
    // a UTF-8 byte order mark before the document is skipped (as TextDecoder does for whole bodies)
    if (this.offset === 0 && buf[0] === 0xef && buf[1] === 0xbb && buf[2] === 0xbf) i = 3;
    while (i < buf.length) {
      if (this.capture) {
        const end = this.capture.feed(buf, i);
        if (end === -1) break;
        i = end;
        this.complete(this.capture);
        continue;
      }
      const b = buf[i];
      if (isSpace(b)) {
        i++;
        continue;
      }
      switch (this.state) {
        case BEGIN:
          if (b === LBRACE) this.state = KEY_OR_END;
          else {
            this.capture = new Capture(ROOT);
            continue;
          }
          break;
        case KEY_OR_END:
        case NEXT_KEY:
          if (b === QUOTE) {
            this.capture = new Capture(KEY);
            continue;
          }
          if (b !== RBRACE || this.state === NEXT_KEY) throw this.unexpected(b, i, 'a property name');
          this.state = DONE;
          break;
        case AFTER_KEY:
          if (b !== COLON) throw this.unexpected(b, i, "':'");
          this.state = VALUE;
          break;
        case VALUE:
          if (this.key === 'items' && b === LBRACKET) {
            if (this.itemsSeen || this.fields.has('items')) throw invalid('body.items: given twice', { title: 'Validation failed' });
            this.itemsSeen = true;
            this.state = ITEM_OR_END;
            break;
          }
          this.capture = new Capture(FIELD);
          continue;
        case ITEM_OR_END:
        case NEXT_ITEM:
          if (b === RBRACKET && this.state === ITEM_OR_END) {
            this.state = AFTER_VALUE;
            break;
          }
          this.capture = new Capture(ITEM);
          continue;
        case AFTER_ITEM:
          if (b === COMMA) this.state = NEXT_ITEM;
          else if (b === RBRACKET) this.state = AFTER_VALUE;
          else throw this.unexpected(b, i, "',' or ']' after an item");
          break;
        case AFTER_VALUE:
          if (b === COMMA) this.state = NEXT_KEY;
          else if (b === RBRACE) this.state = DONE;
          else throw this.unexpected(b, i, "',' or '}' after a property value");
          break;
        default:
          throw this.unexpected(b, i, 'nothing after the JSON document');
      }
      i++;
    }
    this.offset += buf.length;
  }

  /** The body ended: it must have been one complete document. */
  end(): void {
    if (this.capture) {
      this.capture.endOfInput();
      this.complete(this.capture);
    }
    if (this.state !== DONE) throw malformed('Unexpected end of JSON input');
  }

  private unexpected(b: number, i: number, expected: string): Error {
    return malformed(`unexpected ${JSON.stringify(String.fromCharCode(b))} at byte ${this.offset + i}; expected ${expected}`);
  }

  private complete(c: Capture): void {
    this.capture = undefined;
    switch (c.kind) {
      case ROOT:
        if (!c.bytes) throw invalid('body: must be a JSON object holding the job', { title: 'Validation failed' });
        this.root = { value: decode(c.bytes, 'body') };
        this.state = DONE;
        return;
      case KEY:
        if (!c.bytes) throw invalid(`body: a field name is longer than ${KEY_MAX_BYTES} bytes`, { title: 'Validation failed' });
        this.key = this.fieldName(c.bytes);
        this.state = AFTER_KEY;
        return;
      case FIELD: {
        const where = fieldPath('body', this.key);
        if (!c.bytes) throw invalid(`${where}: is larger than ${FIELD_MAX_BYTES} bytes`, { title: 'Validation failed' });
        const value = decode(c.bytes, where);
        // what secure-json-parse refuses in a whole body
        if (this.key === 'constructor' && value !== null && typeof value === 'object' && Object.hasOwn(value, 'prototype')) throw malformed('Object contains forbidden prototype property');
        if (this.key === 'items' && this.itemsSeen) throw invalid('body.items: given twice', { title: 'Validation failed' });
        this.fields.set(this.key, value);
        this.state = AFTER_VALUE;
        return;
      }
      default: {
        const index = this.items++;
        this.onItem(index, c.bytes && decode(c.bytes, `body.items.${index}`), c.bytes, c.size);
        this.state = AFTER_ITEM;
      }
    }
  }

  private fieldName(bytes: Buffer): string {
    const utf8 = isUtf8(bytes);
    let key: unknown;
    try {
      key = JSON.parse(bytes.toString(utf8 ? 'utf8' : 'latin1'));
    } catch (err) {
      throw malformed(`${(err as Error).message} (in a field name)`);
    }
    const name = key as string;
    if (!utf8) throw invalidText(`${fieldPath('body', name)}: field name is not valid UTF-8`);
    const why = badCharacter(name);
    if (why) throw invalidText(`${fieldPath('body', name)}: field name ${why}`);
    if (name === '__proto__') throw malformed('Object contains forbidden prototype property');
    return name;
  }
}

/** The schema's verdict on the envelope, worded as the HTTP layer words validation errors. */
function envelopeOf(scanner: JobBodyScanner): JobEnvelope {
  const value = scanner.root ? scanner.root.value : { ...Object.fromEntries(scanner.fields), ...(scanner.itemsSeen ? { items: [] } : {}) };
  const parsed = jobBody.safeParse(value);
  if (!parsed.success) {
    const detail = parsed.error.issues
      .map((issue) => {
        const where = ['body', ...issue.path.map(String)].join('.');
        return issue.code === 'unrecognized_keys' ? `${where}: unknown field(s) ${issue.keys.join(', ')}` : `${where}: ${issue.message}`;
      })
      .join('; ');
    throw invalid(detail, { title: 'Validation failed' });
  }
  const { items: _items, ...envelope } = parsed.data;
  return envelope;
}

export interface ReadOptions {
  /** the body limit in bytes (more: BodyTooLarge) */
  limitBytes: number;
  /** items beyond this many are counted (for the 422) but not kept */
  maxItems: number;
  /** where the spool file goes */
  spoolDir: string;
}

/**
 * Reads a job body from `source` (the request stream), spooling its items to a file in
 * `spoolDir`. The caller must `discard()` the upload when done with it; on any error the spool
 * is removed here.
 */
export async function readJobUpload(source: AsyncIterable<Buffer | string>, o: ReadOptions): Promise<JobUpload> {
  await fs.mkdir(o.spoolDir, { recursive: true });
  const file = path.join(o.spoolDir, `ingest-job-${crypto.randomUUID()}.ndjson`);
  const out = await fs.open(file, 'wx', 0o600);
  const itemsHash = crypto.createHash('sha256');
  const intakeErrors: IntakeError[] = [];
  const jobId = crypto.randomUUID();
  const rowStart = Buffer.from(`${jobId}${SPOOL_DELIMITER}`);
  // parts of the spool waiting to be written, and the parts of them that identify the request (not the drawn job id)
  let pending: Buffer[] = [];
  let hashed: Buffer[] = [];
  let pendingBytes = 0;
  const spool = (head: string, item: Buffer) => {
    const h = Buffer.from(head);
    pending.push(rowStart, h, item, NEWLINE);
    hashed.push(h, item, NEWLINE);
    pendingBytes += rowStart.length + h.length + item.length + 1;
  };
  const flush = async () => {
    if (pending.length === 0) return;
    const text = Buffer.concat(pending, pendingBytes);
    itemsHash.update(Buffer.concat(hashed));
    pending = [];
    hashed = [];
    pendingBytes = 0;
    await out.write(text);
  };
  const scanner = new JobBodyScanner((index, value, bytes, size) => {
    if (index >= o.maxItems) return; // counted for the 422, not kept
    const seq = index + 1;
    if (!bytes) {
      intakeErrors.push({ index, code: 'ITEM_TOO_LARGE', reason: `the item has ${size} bytes of JSON; an item holds at most ${ITEM_MAX_BYTES}` });
      // a placeholder row (null source_id, JSON null); the size tells such requests apart
      spool(`${seq}${SPOOL_DELIMITER}${SPOOL_DELIMITER}`, Buffer.from('null'));
      hashed.push(Buffer.from(`(${size} bytes)`));
      return;
    }
    spool(`${seq}${SPOOL_DELIMITER}${sourceIdOf(value) ?? ''}${SPOOL_DELIMITER}`, oneLine(bytes));
  });
  try {
    let received = 0;
    for await (const chunk of source) {
      const buf = typeof chunk === 'string' ? Buffer.from(chunk) : chunk;
      received += buf.length;
      if (received > o.limitBytes) throw new BodyTooLarge(o.limitBytes);
      scanner.push(buf);
      if (pendingBytes >= FLUSH_BYTES) await flush();
      // one chunk per turn of the event loop: chunks that arrived together (up to megabytes
      // per socket) would otherwise be scanned in one go, and every other request wait for it
      await nextTurn();
    }
    if (received === 0) throw invalid('request body is empty; send a JSON document or no Content-Type', { title: 'Malformed JSON' });
    scanner.end();
    await flush();
    await out.close();
    const envelope = envelopeOf(scanner);
    const hash = crypto.hash('sha256', `${JSON.stringify([envelope.partner_id, envelope.correlation_id, envelope.mode, envelope.warehouse_id, envelope.resource, scanner.items])}\n${itemsHash.digest('hex')}`, 'hex');
    return {
      jobId,
      envelope,
      items: scanner.items,
      hash,
      intakeErrors,
      blocks: (maxBytes) => spooledBlocks(file, maxBytes),
      discard: () => fs.rm(file, { force: true }),
    };
  } catch (err) {
    await out.close().catch(() => undefined);
    await fs.rm(file, { force: true });
    throw err;
  }
}

const NEWLINE = Buffer.from('\n');

/**
 * An item's JSON on one line: line breaks can only be whitespace between its tokens (JSON
 * strings hold none raw), so they become spaces, in a copy (`bytes` may be part of a request
 * chunk, which is kept as it is until the spool is written: Node never reuses a chunk it emitted).
 */
function oneLine(bytes: Buffer): Buffer {
  if (bytes.indexOf(0x0a) === -1 && bytes.indexOf(0x0d) === -1) return bytes;
  const copy = Buffer.from(bytes);
  for (let i = 0; i < copy.length; i++) if (copy[i] === 0x0a || copy[i] === 0x0d) copy[i] = 0x20;
  return copy;
}

async function* spooledBlocks(file: string, maxBytes: number): AsyncGenerator<string> {
  const handle = await fs.open(file, 'r');
  try {
    let carry = Buffer.alloc(0);
    const buf = Buffer.alloc(maxBytes);
    for (;;) {
      const { bytesRead } = await handle.read(buf, 0, maxBytes, null);
      if (bytesRead === 0) break;
      const data = carry.length ? Buffer.concat([carry, buf.subarray(0, bytesRead)]) : buf.subarray(0, bytesRead);
      const end = data.lastIndexOf(0x0a) + 1;
      // no whole row yet (one longer than maxBytes): read on
      if (end === 0) {
        carry = Buffer.from(data);
        continue;
      }
      yield data.toString('utf8', 0, end);
      carry = Buffer.from(data.subarray(end));
    }
    if (carry.length) throw new Error('the spool file ends within a row');
  } finally {
    await handle.close();
  }
}
