import { connect as natsConnect, type NatsConnection } from '@nats-io/transport-node';
import { jetstream, type JetStreamClient } from '@nats-io/jetstream';
import amqp from 'amqplib';

/** One message for a sink: where it goes (NATS subject / AMQP routing key), its id (for deduplication) and its body. */
export interface SinkMessage {
  subject: string;
  id: string;
  body: string;
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

const message = (err: unknown) => (err instanceof Error ? err.message : String(err));

/** NATS JetStream: acknowledged publishes, the message id as `Nats-Msg-Id` (the stream drops a duplicate within its window). */
class NatsSink implements Sink {
  private conn?: Promise<{ nc: NatsConnection; js: JetStreamClient }>;

  constructor(private readonly s: SinkSettings) {}

  private connection(): Promise<{ nc: NatsConnection; js: JetStreamClient }> {
    this.conn ??= (async () => {
      const u = new URL(this.s.url);
      const user = this.s.username ?? (u.username ? decodeURIComponent(u.username) : undefined);
      const pass = this.s.password ?? (u.password ? decodeURIComponent(u.password) : undefined);
      const nc = await natsConnect({
        servers: `${u.hostname}:${u.port || 4222}`,
        ...(this.s.token ? { token: this.s.token } : user !== undefined && pass === undefined ? { token: user } : user !== undefined ? { user, pass } : {}),
        timeout: this.s.timeoutMs, reconnect: true, maxReconnectAttempts: -1, reconnectTimeWait: 500, name: 'gateway-bridge',
      });
      return { nc, js: jetstream(nc, { timeout: this.s.timeoutMs }) };
    })();
    const pending = this.conn;
    pending.then(({ nc }) => void nc.closed().then(() => { if (this.conn === pending) this.conn = undefined; }), () => { if (this.conn === pending) this.conn = undefined; });
    return pending;
  }

  async publish(messages: SinkMessage[]): Promise<void> {
    const { js } = await this.connection();
    const acks = messages.map((m) => js.publish(m.subject, m.body, { msgID: m.id, timeout: this.s.timeoutMs }));
    const results = await Promise.allSettled(acks);
    const failed = results.find((r) => r.status === 'rejected');
    if (failed) throw new Error(`NATS JetStream refused: ${message((failed as PromiseRejectedResult).reason)}`);
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
      channel.publish(exchange, m.subject, Buffer.from(m.body), {
        persistent: true, messageId: m.id, contentType: 'application/cloudevents+json',
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
