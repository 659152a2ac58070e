import type { Cluster } from '../actors/cluster.js';
import type { Logger } from '../log.js';
import type { Reader } from './repo.js';
import type { StreamData } from './schemas.js';

export const STREAM_TOPIC = 'notifications.stream';

/** A stream event as broadcast to every node. */
export interface StreamEvent {
  seq: number;
  targetKind: 'user' | 'tenant';
  target: string;
  data: StreamData;
}

/** One open stream (SSE response or WebSocket) on this node. */
export interface StreamSink {
  /** writes one `event: notification` frame */
  send(seq: number, data: StreamData): void;
  heartbeat(): void;
  close(): void;
  /** bytes queued and not yet written to the socket */
  backlog(): number;
}

/** A slow client whose queue grows beyond this is disconnected (it reconnects with Last-Event-ID). */
const MAX_BACKLOG = 1024 * 1024;

class Connection {
  /** events that arrived live while the backlog was being replayed */
  pending: StreamEvent[] | undefined = [];
  constructor(readonly reader: Reader, readonly sink: StreamSink) {}

  deliver(ev: StreamEvent): void {
    if (this.pending) {
      this.pending.push(ev);
      return;
    }
    try {
      this.sink.send(ev.seq, ev.data);
      if (this.sink.backlog() > MAX_BACKLOG) this.sink.close();
    } catch {
      this.sink.close();
    }
  }
}

/**
 * This node's open notification streams, indexed by user and by account. Stream events reach
 * every node through `cluster.broadcast`; each node pushes to its own connections. One heartbeat
 * timer serves all connections.
 */
export class StreamHub {
  private readonly byKey = new Map<string, Set<Connection>>();
  private readonly all = new Set<Connection>();
  private timer?: NodeJS.Timeout;
  private readonly off: () => void;

  constructor(private readonly cluster: Cluster, private readonly heartbeatMs: number, private readonly log: Logger) {
    this.off = cluster.on<StreamEvent>(STREAM_TOPIC, (ev) => this.dispatch(ev));
  }

  get size(): number {
    return this.all.size;
  }

  start(): void {
    this.timer = setInterval(() => {
      for (const c of this.all) {
        try {
          c.sink.heartbeat();
        } catch (err) {
          this.log.debug({ err }, 'heartbeat failed');
        }
      }
    }, this.heartbeatMs);
    this.timer.unref();
  }

  /** Publishes a committed stream event to every node (this one first). */
  async publish(ev: StreamEvent): Promise<void> {
    try {
      await this.cluster.broadcast(STREAM_TOPIC, ev);
    } catch (err) {
      // the event is committed: clients of other nodes get it on their next (re)connect via Last-Event-ID
      this.log.error({ err, seq: ev.seq }, 'stream event broadcast failed');
    }
  }

  private dispatch(ev: StreamEvent): void {
    const set = this.byKey.get(`${ev.targetKind === 'user' ? 'u' : 't'}:${ev.target}`);
    if (!set) return;
    for (const c of set) c.deliver(ev);
  }

  /**
   * Registers a connection. Live events are buffered while `replay` (the missed events since
   * Last-Event-ID, read from the database) is sent, so nothing is lost or repeated.
   */
  async attach(reader: Reader, sink: StreamSink, since: number, replay: (since: number) => Promise<{ seq: number; data: StreamData }[]>): Promise<() => void> {
    const c = new Connection(reader, sink);
    const keys = [`u:${reader.sub}`, ...(reader.accountId ? [`t:${reader.accountId}`] : [])];
    for (const k of keys) {
      let set = this.byKey.get(k);
      if (!set) this.byKey.set(k, (set = new Set()));
      set.add(c);
    }
    this.all.add(c);
    const detach = () => {
      if (!this.all.delete(c)) return;
      for (const k of keys) {
        const set = this.byKey.get(k);
        set?.delete(c);
        if (set?.size === 0) this.byKey.delete(k);
      }
    };
    const replayed = new Set<number>();
    try {
      let cursor = since;
      for (;;) {
        const missed = await replay(cursor);
        for (const m of missed) {
          cursor = m.seq;
          replayed.add(m.seq);
          sink.send(m.seq, m.data);
        }
        if (missed.length < 1000) break;
      }
    } catch (err) {
      detach();
      throw err;
    }
    const pending = c.pending ?? [];
    c.pending = undefined;
    // live events are sent as they come (commit order); only those already replayed are skipped
    for (const ev of pending) if (!replayed.has(ev.seq)) c.deliver(ev);
    return detach;
  }

  /** Ends every open stream (graceful shutdown: before the HTTP server waits for its connections). */
  closeAll(): void {
    for (const c of [...this.all]) {
      try {
        c.sink.close();
      } catch {
        /* already gone */
      }
    }
    this.all.clear();
    this.byKey.clear();
  }

  stop(): void {
    if (this.timer) clearInterval(this.timer);
    this.off();
    this.closeAll();
  }
}
