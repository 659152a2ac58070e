import { Duplex } from 'node:stream';
import type { TLSSocket } from 'node:tls';
import type { Client } from 'aedes';
import { clientInternals, type ClientInternals, type KeepaliveTimer } from './aedesInternals.js';

/** A device PUBLISH decoded by the fast lane (the fields of mqtt-packet's packet the hooks read). */
export interface FastPublish {
  cmd: 'publish';
  topic: string;
  payload: Buffer;
  qos: 0 | 1;
  messageId: number | undefined;
  dup: boolean;
  retain: false;
}

/**
 * What the fast lane gives the device publishes it decodes to. `memo` is called when a connection's
 * topic changes (the lane reuses a topic's string while its bytes repeat): what `take` needs to
 * know of the topic, kept by the lane with it and passed to every `take` of the same topic (may be
 * changed there). `take` takes one decoded device publish: `false` leaves it to Aedes (nothing may
 * have been done yet), otherwise it was taken and the number is the PUBACK reason code for QoS 1
 * (0 = success). The packet's payload is a view of a buffer that is reused once `take` returns
 * (readIntoShared): whatever is kept must be copied.
 */
export interface LaneTaker<M> {
  memo(client: Client, topic: string): M;
  take(client: Client, packet: FastPublish, memo: M): number | false;
  /** after each decrypted record of the socket (taken or passed to Aedes): true to stop reading it until `resume` is called (what `take` feeds is full) */
  hold?(resume: () => void): boolean;
  /**
   * Durable acknowledgements: the PUBACKs of taken QoS 1 publishes wait until what `take` fed is
   * stored (`whenStored` calls `done(true)`; `done(false)`: not stored, the connection is closed
   * without them, so the device sends them again). `batch()` names the batch being filled: one
   * waiter per connection and batch, what comes meanwhile joins it.
   */
  durable?: { batch(): number; whenStored(client: Client, done: (stored: boolean) => void): void };
}

/**
 * The per-message path of a connected device's plain publishes, in front of Aedes: PUBLISH packets
 * at QoS 0 or 1 without retain and without MQTT 5 properties, complete in the bytes just received
 * and at most `maxPacketBytes`, are decoded here straight from the decrypted TLS record (the
 * payload is a view of it, no copy) and given to `taker.take`; the PUBACKs of one event-loop turn go
 * out in one write per connection (queueAcks). Everything else (CONNECT, SUBSCRIBE, retained or QoS 2 messages, properties, a
 * packet split across records, and whatever `take` declines) goes to mqtt-packet and Aedes
 * unchanged, in order: the fast lane stops at the first packet it does not take and passes the
 * rest on.
 *
 * Two entry points: each decrypted TLS record, read into a buffer all connections share
 * (readIntoShared; where Node's internals do not allow it, the socket's `push`), before Node's
 * stream would buffer it, emit 'readable' on the next tick and have Aedes read it back; taken only
 * while nothing is buffered or in Aedes' hands (so order holds); and mqtt-packet's `parse` (what
 * Aedes reads otherwise). Why: for a small publish, Node's stream plumbing, mqtt-packet's BufferList parse
 * and Aedes' generic pipeline (handler series, aedes-packet copy, emitter, a setImmediate per
 * PUBACK) cost more than the TLS record itself; docs/benchmarks.md has the before and after.
 */
export function attachFastLane<M>(socket: TLSSocket, client: Client, taker: LaneTaker<M>, maxPacketBytes: number): boolean {
  // Aedes' and mqtt-packet's internals (aedesInternals.ts, checked at broker start-up), typed once per connection
  const c = clientInternals(client);
  const parser = c._parser;
  if (typeof socket.push !== 'function') return false;
  const parse = parser.parse;
  const idle = () => c.connackSent && c.connected && parser._list.length === 0 && parser._stateCounter === 0 && !parser.error;

  let lastTopic = '';
  let lastTopicBytes = new Uint8Array(0);
  /** the taker's memo of lastTopic (undefined until the first topic) */
  let lastMemo: M | undefined;
  /** the sweep generation in which this connection's activity was last noted */
  let swept = 0;

  /** Takes the plain publishes at the start of `buf` (its first `end` bytes); returns how many bytes they used. */
  const consume = (buf: Buffer, end: number): number => {
    const v5 = c.version === 5;
    let pos = 0;
    while (pos < end) {
      const first = buf[pos];
      // PUBLISH (type 3) with QoS 0 or 1 and no retain: flags 0x0, 0x2, 0x8 (dup), 0xa (dup)
      if ((first & 0xf5) !== 0x30) break;
      const qos = ((first >> 1) & 3) as 0 | 1;
      // remaining length: a variable byte integer of at most 4 bytes
      let length = 0;
      let i = pos + 1;
      let shift = 0;
      let byte = 0x80;
      while (byte & 0x80) {
        if (i >= end || shift > 21) break;
        byte = buf[i++];
        // (a shift, not `2 ** shift`: V8 calls pow() for that, twice per 1 KiB message)
        length += (byte & 0x7f) << shift;
        shift += 7;
      }
      if (byte & 0x80) break;
      const packetEnd = i + length;
      if (packetEnd > end || packetEnd - pos > maxPacketBytes || i + 2 > packetEnd) break;
      const topicLength = (buf[i] << 8) | buf[i + 1];
      i += 2;
      if (i + topicLength > packetEnd) break;
      // a device publishes on a few topics: the last one's string is reused while the bytes match
      if (lastMemo === undefined || topicLength !== lastTopicBytes.length || !sameBytes(buf, i, lastTopicBytes)) {
        lastTopic = buf.toString('utf8', i, i + topicLength);
        lastTopicBytes = Uint8Array.prototype.slice.call(buf, i, i + topicLength);
        lastMemo = taker.memo(client, lastTopic);
      }
      const topic = lastTopic;
      i += topicLength;
      let messageId: number | undefined;
      if (qos === 1) {
        if (i + 2 > packetEnd) break;
        messageId = (buf[i] << 8) | buf[i + 1];
        i += 2;
      }
      // MQTT 5: only a publish without properties (property length 0)
      if (v5) {
        if (i >= packetEnd || buf[i] !== 0) break;
        i += 1;
      }
      const code = taker.take(client, { cmd: 'publish', topic, payload: buf.subarray(i, packetEnd), qos, messageId, dup: (first & 0x08) !== 0, retain: false }, lastMemo);
      if (code === false) break;
      pos = packetEnd;
      if (qos === 1 && durable) {
        const batch = durable.batch();
        if (storing === undefined || storingBatch !== batch) {
          const acks: number[] = (storing = []);
          storingBatch = batch;
          unanswered += 1;
          durable.whenStored(client, (stored) => ackStored(acks, stored));
        }
        storing.push(messageId!, code);
      } else if (qos === 1) {
        if (pendingAcks === undefined) {
          pendingAcks = [];
          queueAcks(flushAcks);
        }
        pendingAcks.push(messageId!, code);
      }
    }
    if (pos > 0) {
      // keep-alive: noted here, the timer refreshed by the next sweep (see sweepKeepalive)
      if (swept !== sweepGeneration) {
        swept = sweepGeneration;
        noteActivity(c);
        if (c._keepaliveTimer !== guarded) guardKeepalive();
      }
    }
    return pos;
  };

  /**
   * Aedes' keep-alive timer firing between a record and the sweep that would have refreshed it
   * (activity in its last KEEPALIVE_SWEEP_MS) refreshes it instead of ending the connection: the
   * connection is noted in the current generation then. Wrapped once per timer (`_onTimeout`,
   * the callback Node's timer calls).
   */
  let guarded: unknown = null;
  const guardKeepalive = (): void => {
    // `_onTimeout`: Node's own (the callback its timer calls), not Aedes'
    const timer = c._keepaliveTimer as (KeepaliveTimer & { _onTimeout?: unknown }) | null;
    guarded = timer;
    const fire = timer?._onTimeout;
    if (!timer || typeof fire !== 'function') return;
    timer._onTimeout = function keepaliveUnlessNoted(this: unknown, ...args: unknown[]) {
      if (swept === sweepGeneration && c._keepaliveTimer === timer) {
        timer.refresh();
        return undefined;
      }
      return fire.apply(this, args) as unknown;
    };
  };

  /** PUBACKs of taken publishes not written yet: [messageId, reasonCode, ...] (see queueAcks) */
  let pendingAcks: number[] | undefined;
  const writer = directWriter(socket);
  const durable = taker.durable;
  /**
   * With `durable`: the PUBACKs waiting for the batch `storingBatch` (being filled) to be stored;
   * what the lane takes next joins them unless something went to Aedes in between (whose
   * publishes wait behind them: the lane's later PUBACKs must too, PUBACKs go in order).
   */
  let storing: number[] | undefined;
  let storingBatch = -1;
  /** waiters not answered yet, and what waits for them (the socket's end) */
  let unanswered = 0;
  let afterAnswers: (() => void)[] = [];
  /**
   * A batch's PUBACKs, once it is stored: written at once, not at the end of the turn (an answer
   * of Aedes to a later publish of the device, which waited for the same batch, comes after them).
   */
  const ackStored = (acks: number[], stored: boolean): void => {
    if (storing === acks) storing = undefined;
    unanswered -= 1;
    // not stored: closed at once, without this PUBACK or any later one (the device sends them again)
    if (!stored) socket.destroy(new Error('messages not stored'));
    else if (acks.length > 0 && socket.writable && !socket.destroyed) {
      const data = pubacks(acks, c.version === 5);
      if (writer === undefined || !writer.write(data)) socket.write(data);
    }
    if (unanswered === 0 && afterAnswers.length > 0) {
      const after = afterAnswers;
      afterAnswers = [];
      for (const f of after) f();
    }
  };
  const flushAcks = (): void => {
    const acks = pendingAcks;
    if (acks === undefined) return;
    pendingAcks = undefined;
    if (!socket.writable) return;
    const data = pubacks(acks, c.version === 5);
    if (writer === undefined || !writer.write(data)) socket.write(data);
  };

  parser.parse = function fastParse(buf: Buffer): number {
    const used = idle() ? consume(buf, buf.length) : 0;
    if (used === buf.length) return 0;
    // what Aedes answers comes after the lane's PUBACKs
    flushAcks();
    storing = undefined;
    return parse.call(parser, used === 0 ? buf : buf.subarray(used));
  };

  // Backpressure (taker.hold): a socket whose read found the ingest full stops reading. Returning
  // false from push makes Node stop the handle (onStreamRead: readStop); `_read`, which the stream
  // calls to read on (when Aedes drains what was pushed), starts nothing while held; `resume`
  // starts the reads again.
  let held = false;
  const read = (socket as unknown as { _read(size: number): void })._read;
  (socket as unknown as { _read(size: number): void })._read = function heldRead(size: number) {
    if (!held) read.call(this, size);
  };
  const resume = (): void => {
    held = false;
    if (!socket.destroyed) read.call(socket, 0);
  };
  const readOn = (): boolean => {
    if (!held && taker.hold?.(resume) === true) held = true;
    return !held;
  };
  /**
   * One decrypted record (the first `end` bytes of `buf`): the lane takes the publishes it can, the
   * rest goes to Aedes through the stream, in order; false to stop reading the socket. `shared`:
   * `buf` is reused once this returns, so what goes to the stream is a copy.
   */
  const push = socket.push;
  const onRecord = (buf: Buffer, end: number, shared: boolean): boolean => {
    const used = socket.readableLength === 0 && c._parsingBatch === 0 && idle() ? consume(buf, end) : 0;
    if (used === end) return readOn();
    flushAcks();
    storing = undefined;
    const rest = shared ? copyOut(buf, used, end) : used === 0 ? buf : buf.subarray(used, end);
    const more = push.call(socket, rest);
    return readOn() && more;
  };
  socket.push = function fastPush(chunk: unknown, encoding?: BufferEncoding): boolean {
    if (Buffer.isBuffer(chunk)) return onRecord(chunk, chunk.length, false);
    // the end of the stream (null), or anything else Node pushes
    flushAcks();
    const more = push.call(socket, chunk, encoding);
    return (chunk === null || readOn()) && more;
  };
  if (readIntoShared(socket, (nread, buf) => onRecord(buf, nread, true))) {
    // in this mode `read` starts the socket's reads itself (not through `_read`): not while held
    const streamRead = socket.read;
    socket.read = function heldStreamRead(this: TLSSocket, size?: number) {
      return held ? Duplex.prototype.read.call(this, size) : streamRead.call(this, size);
    } as TLSSocket['read'];
  }
  // a connection closed in order (linger.ts: end after Aedes' destroy) still sends them, also those waiting to be stored
  const end = socket.end;
  socket.end = function endAfterAcks(this: TLSSocket, ...args: Parameters<TLSSocket['end']>) {
    if (unanswered > 0) {
      afterAnswers.push(() => socket.end(...args));
      return this;
    }
    flushAcks();
    // (after a direct PUBACK write's completion: TLSWrap takes one write at a time, the end's close_notify included)
    if (writer?.afterWrite(() => end.apply(this, args)) === true) return this;
    return end.apply(this, args);
  } as TLSSocket['end'];
  return true;
}

/**
 * No idle-timeout bookkeeping per TLS record on a socket without an idle timeout. Node arms a
 * server socket's handshake timer (`handshakeTimeout`, 120 s by default) and, once the handshake
 * is done, clears it with `setTimeout(0)`, which leaves the cleared Timeout in the socket's timeout
 * slot; and on every read and write the socket walks itself and its parent socket and refreshes
 * whatever timer is in their slots (`_unrefTimer`; for the cleared one, three calls that do
 * nothing). Here the cleared timer is replaced by null (the slot's state before any timeout was
 * set) and, when neither socket has a timeout, the socket's `_unrefTimer` is a no-op until
 * `socket.setTimeout` is called, which puts Node's own back first (so a timeout set later is
 * refreshed by traffic as usual). Returns whether `_unrefTimer` was replaced.
 */
export function skipIdleTimeoutBookkeeping(socket: TLSSocket): boolean {
  const slot = timeoutSlot ??= Object.getOwnPropertySymbols(socket).find((s) => s.description === 'timeout') ?? null;
  const s = socket as unknown as Record<symbol, unknown> & { _parent?: Record<symbol, unknown> | null; _unrefTimer?: () => void };
  if (slot === null || typeof s._unrefTimer !== 'function') return false;
  const timer = s[slot] as { _destroyed?: boolean } | null | undefined;
  if (timer && timer._destroyed === true) s[slot] = null;
  if (s[slot] || s._parent?.[slot]) return false;
  const unrefTimer = s._unrefTimer;
  const setTimeout = socket.setTimeout;
  s._unrefTimer = noUpdate;
  socket.setTimeout = function setTimeoutUpdated(this: TLSSocket, ...args: Parameters<TLSSocket['setTimeout']>) {
    s._unrefTimer = unrefTimer;
    socket.setTimeout = setTimeout;
    return setTimeout.apply(this, args);
  } as TLSSocket['setTimeout'];
  return true;
}

function noUpdate(): void {}

/** Node's own symbol of a socket's timeout slot (net.js kTimeout), found on the first socket */
let timeoutSlot: symbol | null | undefined;

/** Node's WriteWrap constructor (its stream_wrap binding), taken from the first write a socket makes (see directWriter) */
let WriteWrap: (new () => DirectWriteReq) | null | undefined;

interface DirectWriteReq { handle: unknown; oncomplete: (status: number) => void; async: boolean; bytes: number; buffer: Buffer | null }
interface TlsHandle { writeBuffer(req: DirectWriteReq, data: Buffer): number }
interface WritableInternals {
  _writableState?: { writing?: boolean; length?: number };
  _write(chunk: unknown, encoding: BufferEncoding, cb: (err?: Error | null) => void): void;
  _writev?(chunks: unknown[], cb: (err?: Error | null) => void): void;
  _handle?: unknown;
}

/**
 * PUBACKs written straight to the TLS socket's handle (TLSWrap's `writeBuffer`, what the socket's
 * `write` ends in) instead of through Node's Writable stream: with one message in flight per
 * device, each PUBACK is a write of its own, and the stream's bookkeeping around it (write,
 * writeOrBuffer, _write, the write request, the callback and the after-write tick) costs more than
 * the TLS record's encryption. Only when the stream is idle (no write of it in flight, nothing
 * buffered), so order holds; while a direct write is in flight (TLSWrap takes one write at a
 * time and its completion comes on the next event-loop turn) the stream's own writes wait for it
 * (`_write`/`_writev` are wrapped), and what the lane writes meanwhile goes through the stream.
 * Returns undefined (the lane writes through the stream) when the socket is not a TLS socket with
 * the expected internals; `write` returns false when the data must go through the stream.
 */
function directWriter(socket: TLSSocket): { write(data: Buffer): boolean; afterWrite(f: () => void): boolean } | undefined {
  const s = socket as unknown as WritableInternals;
  if (socket.encrypted !== true || typeof s._write !== 'function' || typeof s._writableState?.writing !== 'boolean') return undefined;
  /** a direct write is in flight (until its oncomplete) */
  let inFlight = false;
  /** what waits for the direct write in flight: the stream's write that came meanwhile, the socket's end */
  let deferred: (() => void)[] = [];
  const streamWrite = s._write;
  const streamWritev = s._writev;
  s._write = function writeAfterDirect(this: unknown, chunk, encoding, cb) {
    if (inFlight) deferred.push(() => streamWrite.call(this, chunk, encoding, cb));
    else streamWrite.call(this, chunk, encoding, cb);
  };
  if (typeof streamWritev === 'function') {
    s._writev = function writevAfterDirect(this: unknown, chunks, cb) {
      if (inFlight) deferred.push(() => streamWritev.call(this, chunks, cb));
      else streamWritev.call(this, chunks, cb);
    };
  }
  const oncomplete = function directWriteDone(this: DirectWriteReq, status: number): void {
    this.buffer = null;
    inFlight = false;
    const next = deferred;
    deferred = [];
    if (status < 0) {
      socket.destroy(Object.assign(new Error(`PUBACK write failed (${status})`), { errno: status }));
      return;
    }
    for (const f of next) f();
  };
  return {
    afterWrite(f: () => void): boolean {
      if (!inFlight) return false;
      deferred.push(f);
      return true;
    },
    write(data: Buffer): boolean {
      const state = s._writableState!;
      const handle = s._handle as TlsHandle | null | undefined;
      if (inFlight || state.writing || state.length !== 0 || socket.destroyed || !handle || typeof handle.writeBuffer !== 'function') return false;
      if (WriteWrap === undefined) {
        captureWriteWrap(handle);
        return false;
      }
      if (WriteWrap === null) return false;
      const req = new WriteWrap();
      req.handle = handle;
      req.oncomplete = oncomplete;
      req.async = false;
      req.bytes = 0;
      req.buffer = data;
      inFlight = true;
      const err = handle.writeBuffer(req, data);
      if (err !== 0) {
        inFlight = false;
        socket.destroy(Object.assign(new Error(`PUBACK write failed (${err})`), { errno: err }));
      }
      return true;
    },
  };
}

/** Notes the constructor of the request object of the handle's next `writeBuffer` (the stream's own write, which follows). */
function captureWriteWrap(handle: TlsHandle): void {
  const own = Object.prototype.hasOwnProperty.call(handle, 'writeBuffer');
  const original = handle.writeBuffer;
  handle.writeBuffer = function captureAndWrite(this: TlsHandle, req: DirectWriteReq, data: Buffer): number {
    if (own) handle.writeBuffer = original;
    else delete (handle as Partial<TlsHandle>).writeBuffer;
    const ctor = (req as { constructor?: unknown }).constructor;
    if (WriteWrap === undefined) WriteWrap = typeof ctor === 'function' && ctor !== Object ? ctor as new () => DirectWriteReq : null;
    return original.call(this, req, data);
  };
}

/** the buffer every connection's decrypted records are read into (Node decrypts at most 16 KiB per read) */
const sharedRecords = Buffer.alloc(16 * 1024);
/** net.js's symbols of a socket's `onread` buffer and callback, found on the first socket */
let onreadSlots: { buffer: symbol; callback: symbol } | null | undefined;

/**
 * Node's `onread` mode (the `onread` option of net.Socket and tls.connect, which a server's sockets
 * cannot be given) for a connected TLS socket: each decrypted record is copied into one buffer that
 * every connection shares and passed to `onRead(bytes, buffer)`, instead of into a new Buffer
 * (an ArrayBuffer with its own memory, which V8 tracks as external memory and collects: with small
 * records at tens of thousands per second, a large share of the broker's garbage collection). The
 * bytes are valid until `onRead` returns: the next record of any connection overwrites them, and
 * records only come from the event loop (a TLS socket reads synchronously only on an empty write,
 * which nothing the lane calls makes). Returning false stops the socket's reads, as a full stream
 * does. Returns false (nothing changed) when Node's internals are not the expected ones
 * (net.js kBuffer/kBufferCb, the handle's useUserBuffer; Node 20).
 */
function readIntoShared(socket: TLSSocket, onRead: (bytes: number, buffer: Buffer) => boolean): boolean {
  if (onreadSlots === undefined) {
    const symbols = Object.getOwnPropertySymbols(socket);
    const buffer = symbols.find((s) => s.description === 'kBuffer');
    const callback = symbols.find((s) => s.description === 'kBufferCb');
    onreadSlots = buffer && callback ? { buffer, callback } : null;
  }
  const s = socket as unknown as Record<symbol, unknown> & { _handle?: { useUserBuffer?: (b: Buffer) => void } | null };
  const handle = s._handle;
  if (onreadSlots === null || s[onreadSlots.buffer] !== null || typeof handle?.useUserBuffer !== 'function') return false;
  s[onreadSlots.buffer] = sharedRecords;
  s[onreadSlots.callback] = onRead;
  handle.useUserBuffer(sharedRecords);
  return true;
}

/** lanes with PUBACKs to write at the end of this event-loop turn */
let ackQueue: (() => void)[] = [];
let ackImmediate = false;

/**
 * The PUBACKs of a connection are written once per event-loop turn (setImmediate: after every TLS
 * record the turn's socket reads gave), not once per record: a device with several publishes in
 * flight sends them back to back, one TLS record each, and every write costs a TLS record and a
 * system call. Order holds: a connection's PUBACKs are written before anything of it goes to Aedes
 * (whose answers come after them) and before its socket is ended.
 */
function queueAcks(flush: () => void): void {
  ackQueue.push(flush);
  if (ackImmediate) return;
  ackImmediate = true;
  setImmediate(flushQueuedAcks);
}

function flushQueuedAcks(): void {
  ackImmediate = false;
  const queue = ackQueue;
  ackQueue = [];
  for (const flush of queue) flush();
}

/** how often the keep-alive timers of the connections the fast lane took packets from are refreshed */
export const KEEPALIVE_SWEEP_MS = 250;
/** incremented by every sweep: a connection is noted once per generation */
let sweepGeneration = 1;
/** the connections with fast-lane packets since the last sweep */
let noted: ClientInternals[] = [];
let sweeper: NodeJS.Timeout | undefined;

/**
 * MQTT keep-alive for the packets the fast lane takes, without a timer refresh per TLS record (a
 * libuv clock read and a move in the timer list, about 3% of the broker's CPU with small
 * messages): a connection's first record after a sweep notes it, and the sweep, every
 * KEEPALIVE_SWEEP_MS while there is fast-lane traffic, refreshes the keep-alive timer of each
 * connection noted (Aedes' own, `_keepaliveTimer`, which Aedes refreshes for the packets it
 * handles and clears on close). The refresh comes at most KEEPALIVE_SWEEP_MS after the activity,
 * never before it, and a timer that fires while its connection is noted but not yet swept is
 * refreshed instead (guardKeepalive): a silent client is disconnected 1.5 x keepalive after its
 * last packet (Aedes' timer), at most KEEPALIVE_SWEEP_MS later, never earlier, and a client with a
 * packet within 1.5 x keepalive is never cut. No traffic, no sweeps: the interval stops after one
 * sweep with nothing noted.
 */
function noteActivity(c: ClientInternals): void {
  noted.push(c);
  sweeper ??= setInterval(sweepKeepalive, KEEPALIVE_SWEEP_MS).unref();
}

function sweepKeepalive(): void {
  const clients = noted;
  sweepGeneration += 1;
  if (clients.length === 0) {
    clearInterval(sweeper);
    sweeper = undefined;
    return;
  }
  noted = [];
  for (const c of clients) if (c._keepaliveInterval > 0) c._keepaliveTimer?.refresh();
}

/** `buf[start, end)` in a Buffer of its own (from Node's pool when small: no ArrayBuffer of its own). */
function copyOut(buf: Buffer, start: number, end: number): Buffer {
  const out = Buffer.allocUnsafe(end - start);
  buf.copy(out, 0, start, end);
  return out;
}

/** Whether `buf` holds `bytes` at `at` (from the end: a device's topics differ in their last level). */
function sameBytes(buf: Buffer, at: number, bytes: Uint8Array): boolean {
  for (let k = bytes.length - 1; k >= 0; k--) if (buf[at + k] !== bytes[k]) return false;
  return true;
}

/** PUBACKs for `[messageId, reasonCode, ...]`; reason code 0 is implied by the short form (MQTT 5 3.4.2.1). */
function pubacks(acks: number[], v5: boolean): Buffer {
  let size = 0;
  for (let k = 1; k < acks.length; k += 2) size += v5 && acks[k] !== 0 ? 5 : 4;
  const out = Buffer.allocUnsafe(size);
  let o = 0;
  for (let k = 0; k < acks.length; k += 2) {
    const withCode = v5 && acks[k + 1] !== 0;
    out[o++] = 0x40;
    out[o++] = withCode ? 3 : 2;
    out[o++] = acks[k] >> 8;
    out[o++] = acks[k] & 0xff;
    if (withCode) out[o++] = acks[k + 1];
  }
  return out;
}
