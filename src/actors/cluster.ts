import { EventEmitter } from 'node:events';
import type { Sql } from '../db/client.js';
import type { Logger } from '../log.js';

const CHANNEL = 'gateway_cluster';
/** pg_notify payloads must stay under 8000 bytes; bigger messages travel by reference. */
const MAX_INLINE = 7000;

export interface ClusterMessage<T = unknown> { topic: string; node: string; payload: T }
type Handler<T = unknown> = (payload: T, fromNode: string) => void | Promise<void>;

/**
 * Node-to-node broadcast over Postgres LISTEN/NOTIFY (always available, transactional: a NOTIFY
 * sent inside a transaction is delivered only if it commits). `broadcast` runs the local handlers
 * first (awaited) and then notifies the other nodes; a node ignores its own notifications.
 * Used for domain events, cache invalidation and node-local actions (disconnect, SSE push).
 */
export class Cluster {
  private readonly handlers = new Map<string, Set<Handler>>();
  private listening?: { unlisten(): Promise<void> };

  constructor(private readonly sql: Sql, readonly nodeId: string, private readonly log: Logger) {}

  async start(): Promise<void> {
    this.listening = await this.sql.listen(CHANNEL, (raw) => {
      void this.receive(raw);
    });
  }

  async stop(): Promise<void> {
    await this.listening?.unlisten().catch(() => {});
    this.listening = undefined;
  }

  on<T>(topic: string, handler: Handler<T>): () => void {
    let set = this.handlers.get(topic);
    if (!set) this.handlers.set(topic, (set = new Set()));
    set.add(handler as Handler);
    return () => set!.delete(handler as Handler);
  }

  /** Delivers to this node's handlers, then to every other node. Pass `db` to send on commit. */
  async broadcast<T>(topic: string, payload: T, db: { unsafe: Sql['unsafe'] } = this.sql): Promise<void> {
    await this.deliver(topic, payload, this.nodeId);
    await this.notify(topic, payload, db);
  }

  /** Only to the other nodes (the caller already acted locally). */
  async notify<T>(topic: string, payload: T, db: { unsafe: Sql['unsafe'] } = this.sql): Promise<void> {
    let text = JSON.stringify({ topic, node: this.nodeId, payload } satisfies ClusterMessage<T>);
    if (Buffer.byteLength(text) > MAX_INLINE) {
      const [row] = await (db as Sql).unsafe<{ id: string }[]>('insert into cluster_messages (body) values ($1) returning id', [text]);
      text = JSON.stringify({ ref: row.id });
    }
    await (db as Sql).unsafe('select pg_notify($1, $2)', [CHANNEL, text]);
  }

  /**
   * Like `notify` for many payloads of one topic, in one statement (the connect bookkeeping sends a
   * batch of device events at once); an oversized payload still travels by reference.
   */
  async notifyMany<T>(topic: string, payloads: T[], db: { unsafe: Sql['unsafe'] } = this.sql): Promise<void> {
    const texts: string[] = [];
    for (const payload of payloads) {
      const text = JSON.stringify({ topic, node: this.nodeId, payload } satisfies ClusterMessage<T>);
      if (Buffer.byteLength(text) > MAX_INLINE) await this.notify(topic, payload, db);
      else texts.push(text);
    }
    if (texts.length === 0) return;
    await (db as Sql).unsafe('select pg_notify($1, t) from unnest($2::text[]) with ordinality as x(t, n) order by n', [CHANNEL, texts as never]);
  }

  private async receive(raw: string): Promise<void> {
    try {
      let msg = JSON.parse(raw) as ClusterMessage | { ref: string };
      if ('ref' in msg) {
        const [row] = await this.sql<{ body: string }[]>`select body from cluster_messages where id = ${msg.ref}`;
        if (!row) return;
        msg = JSON.parse(row.body) as ClusterMessage;
      }
      if (msg.node === this.nodeId) return;
      await this.deliver(msg.topic, msg.payload, msg.node);
    } catch (err) {
      this.log.error({ err }, 'cluster message could not be handled');
    }
  }

  private async deliver(topic: string, payload: unknown, from: string): Promise<void> {
    const set = this.handlers.get(topic);
    if (!set) return;
    for (const h of [...set]) {
      try {
        await h(payload, from);
      } catch (err) {
        this.log.error({ err, topic }, 'cluster handler failed');
      }
    }
  }
}

/** In-process bus of committed domain events (every node gets every event once). */
export class DomainBus extends EventEmitter {
  constructor() {
    super();
    this.setMaxListeners(0);
  }
}
