import type { DomainBus } from '../actors/cluster.js';
import type { StoredEvent } from '../actors/store.js';
import { STREAM_MAX_BACKLOG_BYTES } from '../lib/backlog.js';

/** One connectivity change as a stream client receives it. */
export interface ConnectivityChange {
  type: 'connectivity';
  thingId: string;
  connected: boolean;
  at: string;
}

/** One open connectivity stream on this node (a WebSocket). */
export interface ConnectivitySink {
  send(message: ConnectivityChange): void;
  ping(): void;
  /** ends the stream with a close frame (graceful shutdown) */
  close(): void;
  /** drops the connection at once with what is queued (a client past the backlog bound) */
  cut(): void;
  /** bytes queued and not yet written to the socket */
  backlog(): number;
}

const EVENTS = ['device.connected', 'device.disconnected'] as const;

interface Listener { sink: ConnectivitySink; thingId?: string; gone?: boolean }

/**
 * Live connected/disconnected changes of an account's things. Fed by the broker's own domain
 * events (`device.connected`/`device.disconnected`, written at every connect and disconnect), which
 * reach `gw.bus` on every node: a stream on any node sees the devices of every node.
 */
export class ConnectivityHub {
  private readonly byAccount = new Map<string, Set<Listener>>();
  private timer?: NodeJS.Timeout;
  private readonly handler = (ev: StoredEvent) => this.dispatch(ev);
  /** `onCut` is called for each stream cut for its backlog (the metric) */
  constructor(private readonly bus: DomainBus, private readonly heartbeatMs: number, private readonly onCut: () => void) {}

  get size(): number {
    let n = 0;
    for (const set of this.byAccount.values()) n += set.size;
    return n;
  }

  start(): void {
    for (const type of EVENTS) this.bus.on(type, this.handler);
    this.timer = setInterval(() => this.each((l) => this.write(l, (sink) => sink.ping())), this.heartbeatMs);
    this.timer.unref();
  }

  /** Sends the account's changes (of one thing when `thingId` is given) to `sink`; returns the detach. */
  attach(accountId: string, sink: ConnectivitySink, thingId?: string): () => void {
    let set = this.byAccount.get(accountId);
    if (!set) this.byAccount.set(accountId, (set = new Set()));
    const listener = { sink, thingId };
    set.add(listener);
    return () => {
      set.delete(listener);
      if (set.size === 0 && this.byAccount.get(accountId) === set) this.byAccount.delete(accountId);
    };
  }

  private dispatch(ev: StoredEvent): void {
    const set = ev.accountId ? this.byAccount.get(ev.accountId) : undefined;
    if (!set) return;
    const thingId = String(ev.payload.thingId ?? ev.actorId);
    const message: ConnectivityChange = { type: 'connectivity', thingId, connected: ev.type === 'device.connected', at: String(ev.payload.at ?? ev.createdAt) };
    for (const l of set) {
      if (l.thingId !== undefined && l.thingId !== thingId) continue;
      this.write(l, (sink) => sink.send(message));
    }
  }

  /**
   * One write; a client whose unsent backlog then passes the bound is cut at once, not closed
   * behind it (it reconnects and reads its page's data again). Its close handler detaches it.
   */
  private write(l: Listener, f: (sink: ConnectivitySink) => void): void {
    if (l.gone) return;
    try {
      f(l.sink);
      if (l.sink.backlog() <= STREAM_MAX_BACKLOG_BYTES) return;
      l.gone = true;
      l.sink.cut();
      this.onCut();
    } catch {
      l.gone = true;
      l.sink.cut();
    }
  }

  private each(f: (l: Listener) => void): void {
    for (const set of this.byAccount.values()) {
      for (const l of set) {
        try {
          f(l);
        } catch {
          /* the socket is gone; its close handler detaches it */
        }
      }
    }
  }

  /** Ends every open stream (graceful shutdown: before the HTTP server waits for its connections). */
  closeAll(): void {
    this.each((l) => l.sink.close());
    this.byAccount.clear();
  }

  stop(): void {
    for (const type of EVENTS) this.bus.off(type, this.handler);
    if (this.timer) clearInterval(this.timer);
    this.closeAll();
  }
}
