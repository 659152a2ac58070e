import { connect as natsConnect, createInbox, headers, type Msg, type NatsConnection } from '@nats-io/transport-node';
import { setImmediate as nextTurn } from 'node:timers/promises';
import amqp from 'amqplib';
import { BufferPool } from './bufferPool.js';

/** One message for a sink: where it goes (NATS subject / AMQP routing key), its id (for deduplication) and its body. */
export interface SinkMessage {
  subject: string;
  id: string;
  /** text, or its UTF-8 bytes */
  body: string | Uint8Array;
  /** AMQP's content type (default application/cloudevents+json: one event) */
  contentType?: string;
}

/**
 * A place rules deliver to. `publish` resolves once the sink acknowledged every message (JetStream
 * publish acks, AMQP publisher confirms) and throws if any was not: the caller then sends the
 * batch again (at least once). Messages go in the order given over one connection.
 */
export interface Sink {
  publish(messages: SinkMessage[]): Promise<void>;
  close(): Promise<void>;
}

/** What a bridge's sink is opened with (the sealed part is opened by the caller). */
export interface SinkSettings {
  type: 'nats' | 'amqp';
  /** the full URL, credentials included */
  url: string;
  username?: string;
  password?: string;
  token?: string;
  exchange?: string | null;
  /** per publish (ack or confirm) */
  timeoutMs: number;
}

export function openSink(s: SinkSettings): Sink {
  return s.type === 'nats' ? new NatsSink(s) : new AmqpSink(s);
}

/** messages a sink sends before it lets the event loop run (a batch of thousands would hold the broker's reads and PUBACKs back for tens of milliseconds) */
const SLICE_MESSAGES = 256;

const message = (err: unknown) => (err instanceof Error ? err.message : String(err));

/**
 * NATS JetStream: every message is an acknowledged publish (the stream answers each with a PubAck
 * on its reply subject), sent pipelined on one connection with the message id as `Nats-Msg-Id` (the
 * stream drops a duplicate within its window). The replies come to one wildcard inbox subscription
 * per connection, counted per batch: the client's `js.publish` does the same per message with a
 * request of its own (a promise, a timer and a subscription entry each), about 5 times the CPU
 * (docs/decisions.md, "Data bridges").
 */
class NatsSink implements Sink {
  private conn?: Promise<{ nc: NatsConnection; inbox: string }>;
  private batches = new Map<number, { pending: number; resolve: () => void; reject: (err: Error) => void }>();
  private nextBatch = 0;
  /**
   * the frames' memory, used again once every message it holds was acknowledged (the server got those bytes, so the
   * socket holds them no more); a slice's frames are about 128 KiB at 48-byte payloads, and a new buffer each time was
   * mapped, faulted in and unmapped again: a fifth of the delivery thread's time (docs/benchmarks.md)
   */
  private readonly frameMemory = new BufferPool();

  constructor(private readonly s: SinkSettings) {}

  private connection(): Promise<{ nc: NatsConnection; inbox: string }> {
    this.conn ??= (async () => {
      const u = new URL(this.s.url);
      const user = this.s.username ?? (u.username ? decodeURIComponent(u.username) : undefined);
      const pass = this.s.password ?? (u.password ? decodeURIComponent(u.password) : undefined);
      const nc = await natsConnect({
        servers: `${u.hostname}:${u.port || 4222}`,
        ...(this.s.token ? { token: this.s.token } : user !== undefined && pass === undefined ? { token: user } : user !== undefined ? { user, pass } : {}),
        timeout: this.s.timeoutMs, reconnect: true, maxReconnectAttempts: -1, reconnectTimeWait: 500, name: 'gateway-bridge',
      });
      const inbox = createInbox();
      nc.subscribe(`${inbox}.>`, { callback: (_err, m) => this.reply(m.subject.slice(inbox.length + 1), m) });
      return { nc, inbox };
    })();
    const pending = this.conn;
    const drop = () => {
      if (this.conn !== pending) return;
      this.conn = undefined;
      this.failAll(new Error('NATS connection closed'));
    };
    pending.then(({ nc }) => void nc.closed().then(drop), drop);
    return pending;
  }

  /** A PubAck (or a refusal) of message `<batch>.<index>`. */
  private reply(token: string, m: Msg): void {
    const batch = this.batches.get(Number(token.slice(0, token.indexOf('.'))));
    if (!batch) return; // a batch given up (timed out): sent again by the caller
    let error: string | undefined;
    if (m.headers?.hasError) error = `${m.headers.code} ${m.headers.description || 'no stream for the subject'}`;
    else if (startsWith(m.data, PUB_ACK_START)) {
      // a PubAck: `{"stream":...,"seq":...}` (nats-server writes an error's `"error"` first): not parsed
    } else {
      try {
        const ack = JSON.parse(decoder.decode(m.data)) as { error?: { code?: number; description?: string }; seq?: number };
        if (ack.error) error = `${ack.error.code ?? ''} ${ack.error.description ?? 'refused'}`;
        else if (typeof ack.seq !== 'number') error = 'not a PubAck';
      } catch {
        error = 'not a PubAck';
      }
    }
    if (error) batch.reject(new Error(error));
    else if (--batch.pending === 0) batch.resolve();
  }

  private failAll(err: Error): void {
    for (const b of this.batches.values()) b.reject(err);
  }

  async publish(messages: SinkMessage[]): Promise<void> {
    if (messages.length === 0) return;
    const { nc, inbox } = await this.connection();
    const id = this.nextBatch++;
    let timer: NodeJS.Timeout | undefined;
    const acked = new Promise<void>((resolve, reject) => {
      this.batches.set(id, { pending: messages.length, resolve, reject });
      timer = setTimeout(() => reject(new Error(`no PubAck within ${this.s.timeoutMs} ms`)), this.s.timeoutMs);
    });
    const sent: Buffer[] = [];
    try {
      const protocol = protocolOf(nc);
      const allocate = (bytes: number) => {
        const b = this.frameMemory.take(bytes);
        sent.push(b);
        return b;
      };
      for (let i = 0; i < messages.length; i += SLICE_MESSAGES) {
        if (i > 0) await Promise.race([nextTurn(), acked]);
        if (nc.isClosed()) throw new Error('NATS connection closed');
        if (protocol) protocol.sendCommand(frames(messages, i, Math.min(messages.length, i + SLICE_MESSAGES), `${inbox}.${id}.`, protocol.info?.max_payload ?? DEFAULT_MAX_PAYLOAD, allocate));
        else {
          for (let k = i; k < Math.min(messages.length, i + SLICE_MESSAGES); k++) {
            const m = messages[k];
            const h = headers();
            h.set('Nats-Msg-Id', m.id);
            nc.publish(m.subject, typeof m.body === 'string' ? Buffer.from(m.body) : m.body, { headers: h, reply: `${inbox}.${id}.${k}` });
          }
        }
      }
      await acked;
      // only now: a batch that failed may still be queued for writing (its memory is left to the collector)
      for (const b of sent) this.frameMemory.give(b.buffer as ArrayBuffer);
    } catch (err) {
      throw new Error(`NATS JetStream refused: ${message(err)}`);
    } finally {
      clearTimeout(timer);
      this.batches.delete(id);
    }
  }

  async close(): Promise<void> {
    const conn = this.conn;
    this.conn = undefined;
    if (!conn) return;
    try {
      await (await conn).nc.close();
    } catch { /* never connected */ }
  }
}

const decoder = new TextDecoder();

/** how a JetStream PubAck starts; a refusal starts `{"error":` (nats-server's JSPubAckResponse: the error, then the PubAck's fields) */
const PUB_ACK_START = Buffer.from('{"stream":');
const startsWith = (data: Uint8Array, prefix: Uint8Array) => {
  if (data.length < prefix.length) return false;
  for (let i = 0; i < prefix.length; i++) if (data[i] !== prefix[i]) return false;
  return true;
};

/** NATS's default max_payload, when the server's INFO is not at hand */
const DEFAULT_MAX_PAYLOAD = 1024 * 1024;

/** The part of the client's protocol handler a publish goes through (nats-core's ProtocolHandler: `publish` ends in `sendCommand`). */
interface ProtocolSend {
  sendCommand(cmd: Uint8Array): void;
  info?: { max_payload?: number; headers?: boolean };
}

/** The connection's protocol handler, when it is the one this code was written for (else undefined: `nc.publish` per message). */
export function protocolOf(nc: NatsConnection): ProtocolSend | undefined {
  const protocol = (nc as unknown as { protocol?: Partial<ProtocolSend> }).protocol;
  return typeof protocol?.sendCommand === 'function' && protocol.info?.headers !== false ? (protocol as ProtocolSend) : undefined;
}

const SUBJECT_SPACE = /\s/;
const LINE_BREAK = /[\r\n]/;

/**
 * Messages `from` to `to` as NATS protocol frames in one buffer, each what the client's `publish` sends for it with
 * the message id as its `Nats-Msg-Id` and `<replyPrefix><index>` as its reply subject:
 * `HPUB <subject> <reply> <header bytes> <total bytes>\r\nNATS/1.0\r\nNats-Msg-Id: <id>\r\n\r\n<body>\r\n`.
 * The client builds a headers object, two encoded strings and four buffers per message and then joins them (a
 * third of the delivery thread's time with one event per message, docs/benchmarks.md); here each frame's text
 * is one string written into the buffer, and its body copied after it.
 */
export function frames(messages: SinkMessage[], from: number, to: number, replyPrefix: string, maxPayload: number, allocate: (bytes: number) => Buffer = Buffer.allocUnsafeSlow): Buffer {
  const heads: string[] = [];
  const bodies: Uint8Array[] = [];
  let size = 0;
  // a delivery's consecutive messages share their subject string: tested once
  let checked: string | undefined;
  for (let i = from; i < to; i++) {
    const m = messages[i];
    if (m.subject !== checked) {
      if (m.subject.length === 0 || SUBJECT_SPACE.test(m.subject)) throw new Error(`not a NATS subject: ${JSON.stringify(m.subject)}`);
      checked = m.subject;
    }
    if (LINE_BREAK.test(m.id)) throw new Error('a message id cannot hold a line break');
    const body = typeof m.body === 'string' ? Buffer.from(m.body) : m.body;
    const header = `NATS/1.0\r\nNats-Msg-Id: ${m.id}\r\n\r\n`;
    const headerBytes = Buffer.byteLength(header);
    const total = headerBytes + body.length;
    if (total > maxPayload) throw new Error(`a message of ${total} bytes is over the server's max_payload (${maxPayload})`);
    const line = `HPUB ${m.subject} ${replyPrefix}${i} ${headerBytes} ${total}\r\n`;
    heads.push(line + header);
    bodies.push(body);
    size += Buffer.byteLength(line) + total + 2;
  }
  const out = allocate(size);
  let at = 0;
  for (let k = 0; k < heads.length; k++) {
    at += out.write(heads[k], at);
    out.set(bodies[k], at);
    at += bodies[k].length;
    out[at++] = 0x0d; // \r
    out[at++] = 0x0a; // \n
  }
  return out;
}

/** RabbitMQ: persistent messages to the bridge's exchange on a confirm channel, routing key = subject. */
class AmqpSink implements Sink {
  private conn?: Promise<{ connection: amqp.ChannelModel; channel: amqp.ConfirmChannel }>;

  constructor(private readonly s: SinkSettings) {}

  private connection() {
    this.conn ??= (async () => {
      const u = new URL(this.s.url);
      if (this.s.username !== undefined) u.username = encodeURIComponent(this.s.username);
      if (this.s.password !== undefined) u.password = encodeURIComponent(this.s.password);
      const connection = await amqp.connect(u.toString(), { timeout: this.s.timeoutMs });
      const channel = await connection.createConfirmChannel();
      return { connection, channel };
    })();
    const pending = this.conn;
    const drop = () => { if (this.conn === pending) this.conn = undefined; };
    pending.then(({ connection, channel }) => {
      // a refused publish (no such exchange) closes the channel: the next attempt opens a new one
      connection.on('error', () => {}); connection.on('close', drop);
      channel.on('error', () => {}); channel.on('close', () => { drop(); void connection.close().catch(() => {}); });
    }, drop);
    return pending;
  }

  async publish(messages: SinkMessage[]): Promise<void> {
    const { channel } = await this.connection();
    const exchange = this.s.exchange ?? 'amq.topic';
    const confirms = messages.map((m) => new Promise<void>((resolve, reject) => {
      channel.publish(exchange, m.subject, typeof m.body === 'string' ? Buffer.from(m.body) : Buffer.from(m.body.buffer, m.body.byteOffset, m.body.byteLength), {
        persistent: true, messageId: m.id, contentType: m.contentType ?? 'application/cloudevents+json',
      }, (err) => (err ? reject(err instanceof Error ? err : new Error('nacked')) : resolve()));
    }));
    let timer: NodeJS.Timeout | undefined;
    const timeout = new Promise<never>((_, reject) => { timer = setTimeout(() => reject(new Error(`no confirm within ${this.s.timeoutMs} ms`)), this.s.timeoutMs); });
    const closed = new Promise<never>((_, reject) => channel.once('close', () => reject(new Error('channel closed'))));
    try {
      await Promise.race([Promise.all(confirms), timeout, closed]);
    } catch (err) {
      throw new Error(`RabbitMQ refused: ${message(err)}`);
    } finally {
      clearTimeout(timer);
    }
  }

  async close(): Promise<void> {
    const conn = this.conn;
    this.conn = undefined;
    if (!conn) return;
    try {
      await (await conn).connection.close();
    } catch { /* gone already */ }
  }
}
