import type { Cluster } from '../actors/cluster.js';
import { STREAM_MAX_BACKLOG_BYTES, type Drained } from '../lib/backlog.js';
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

export type StreamTransport = 'sse' | 'websocket';

/** One open stream (SSE response or WebSocket) on this node. */
export interface StreamSink {
  readonly transport: StreamTransport;
  /** writes one `event: notification` frame; returns its size in bytes */
  send(seq: number, data: StreamData): number;
  heartbeat(): void;
  /** ends the stream behind what is queued (graceful shutdown) */
  close(): void;
  /** drops the connection at once with what is queued (a client past the backlog bound) */
  cut(): void;
  /** bytes queued and not yet written to the socket */
  backlog(): number;
  /** resolves once the queue has drained, the connection closed, or `timeoutMs` passed with the client reading nothing */
  drained(timeoutMs: number): Promise<Drained>;
}

/** A replay pauses for the client to read once this much is queued (it is not cut for its own replay). */
const REPLAY_HIGH_WATER = 256 * 1024;

class Connection {
  /** events that arrived live while the backlog was being replayed */
  pending: StreamEvent[] | undefined = [];
  /** dropped for its backlog (or a failed write): nothing more is written */
  gone = false;
  constructor(readonly reader: Reader, readonly sink: StreamSink, private readonly onCut: (c: Connection, backlog: number) => void) {}

  deliver(ev: StreamEvent): void {
    if (this.pending) {
      this.pending.push(ev);
      return;
    }
    this.write((sink) => sink.send(ev.seq, ev.data));
  }

  /**
   * One write; a client whose unsent backlog then passes the bound is cut at once (it resumes
   * with Last-Event-ID from the last event it read). A single frame larger than the bound, with
   * nothing else unsent, is let through (else no client could ever get past it). False once the
   * connection is gone.
   */
  write(f: (sink: StreamSink) => number | void): boolean {
    if (this.gone) return false;
    try {
      const bytes = f(this.sink) ?? 0;
      const backlog = this.sink.backlog();
      if (backlog <= STREAM_MAX_BACKLOG_BYTES || backlog <= bytes) return true;
      this.drop();
      this.onCut(this, backlog);
    } catch {
      this.drop();
    }
    return false;
  }

  drop(): void {
    this.gone = true;
    this.sink.cut();
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
  private readonly cut = (c: Connection, backlog: number) => {
    this.log.info({ transport: c.sink.transport, backlog }, 'notification stream cut: unsent backlog over the bound');
    this.onCut(c.sink.transport);
  };

  /** `onCut` is called for each stream cut for its backlog (the metric) */
  constructor(private readonly cluster: Cluster, private readonly heartbeatMs: number, private readonly log: Logger, private readonly onCut: (transport: StreamTransport) => void) {
    this.off = cluster.on<StreamEvent>(STREAM_TOPIC, (ev) => this.dispatch(ev));
  }

  get size(): number {
    return this.all.size;
  }

  start(): void {
    this.timer = setInterval(() => {
      for (const c of this.all) c.write((sink) => sink.heartbeat());
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
    const c = new Connection(reader, sink, this.cut);
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
      // the replay goes at the client's pace: it waits for the client to read (live events are
      // held meanwhile); a client that reads nothing for a heartbeat period is cut
      for (let open = true; open; ) {
        const missed = await replay(cursor);
        for (const m of missed) {
          cursor = m.seq;
          replayed.add(m.seq);
          open = c.write((s) => s.send(m.seq, m.data));
          if (open && sink.backlog() > REPLAY_HIGH_WATER) {
            const outcome = await sink.drained(this.heartbeatMs);
            if (outcome === 'stalled' && !c.gone) {
              const backlog = sink.backlog();
              c.drop();
              this.cut(c, backlog);
            }
            open = outcome === 'drained' && !c.gone;
          }
          if (!open) break;
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
