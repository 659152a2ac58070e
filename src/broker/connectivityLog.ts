import type { Logger } from '../log.js';

/** a device's session began or ended on this node (`at`: epoch ms, when the broker saw it) */
export interface ConnectivityChange {
  state: 'connected' | 'disconnected';
  thingId: string;
  sessionId: string;
  /** MQTT protocol version (connects) */
  protocolVersion?: number;
  at: number;
}

/** how long a change waits for others to share its writes */
const BATCH_MS = 100;
/** changes that trigger a write before the timer */
const MAX_BATCH = 1_000;

/**
 * The connect bookkeeping taken off the handshake path: the broker's connect and disconnect hooks
 * only append here; the changes are written in batches (every BATCH_MS, or at MAX_BATCH, and
 * while a batch is being written the next one gathers), so a connect storm costs a few
 * statements per batch instead of several round trips per device.
 *
 * Order: batches are written one after the other, in the order the changes arrived, and a batch
 * is cut into chunks in which each thing appears at most once (`chunks`), written in order too;
 * so a device's connect is always written before its disconnect, and a quick disconnect and
 * reconnect of one device keeps its order.
 */
export class ConnectivityLog {
  private queue: ConnectivityChange[] = [];
  private timer?: NodeJS.Timeout;
  private writing: Promise<void> = Promise.resolve();
  /** per thing: its changes not written yet (queued or being written) */
  private readonly unwritten = new Map<string, number>();

  /** `write` gets one chunk (each thing once); its failure is logged and the next chunk goes on */
  constructor(private readonly write: (chunk: ConnectivityChange[]) => Promise<void>, private readonly log: Logger) {}

  add(change: ConnectivityChange): void {
    this.queue.push(change);
    this.unwritten.set(change.thingId, (this.unwritten.get(change.thingId) ?? 0) + 1);
    if (this.queue.length >= MAX_BATCH) void this.flush();
    else if (!this.timer) {
      this.timer = setTimeout(() => void this.flush(), BATCH_MS);
      this.timer.unref();
    }
  }

  /** Writes what is queued (after the batches before it); resolves when written. */
  flush(): Promise<void> {
    clearTimeout(this.timer);
    this.timer = undefined;
    this.writing = this.writing.then(async () => {
      // taken when the previous batch is done: what arrived meanwhile shares this one
      const batch = this.queue;
      this.queue = [];
      for (const chunk of chunks(batch)) {
        try {
          await this.write(chunk);
        } catch (err) {
          this.log.error({ err, changes: chunk.length }, 'device connectivity changes not recorded');
        }
        for (const { thingId } of chunk) {
          const left = this.unwritten.get(thingId)! - 1;
          if (left) this.unwritten.set(thingId, left);
          else this.unwritten.delete(thingId);
        }
      }
    });
    return this.writing;
  }

  /**
   * Resolves once the changes of this thing seen so far are written: a read of its connectivity
   * on this node (e.g. a command right after the device connected) sees its latest connect.
   */
  async written(thingId: string): Promise<void> {
    if (this.unwritten.has(thingId)) await this.flush();
  }
}

/** Consecutive runs of the changes in which no thing appears twice (order kept). */
export function chunks(changes: ConnectivityChange[]): ConnectivityChange[][] {
  const out: ConnectivityChange[][] = [];
  let current: ConnectivityChange[] = [];
  let things = new Set<string>();
  for (const change of changes) {
    if (things.has(change.thingId)) {
      out.push(current);
      current = [];
      things = new Set();
    }
    current.push(change);
    things.add(change.thingId);
  }
  if (current.length) out.push(current);
  return out;
}
