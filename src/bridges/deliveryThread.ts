import { Worker } from 'node:worker_threads';
import type { Logger } from '../log.js';
import type { PackedMemory } from '../broker/telemetryHistory.js';
import { BufferPool } from './bufferPool.js';
import { DeliveryError, type Delivery, type DeliveryInput, type DeliveryRule } from './delivery.js';

export type ThreadRequest =
  | { op: 'deliver'; id: number; rule: DeliveryRule; input: DeliveryInput }
  | { op: 'close'; id: number; runner: string }
  | { op: 'stop'; id: number };
/** `points`: a delivery's packed points' memory, handed back for the next read (BufferPool) */
export type ThreadReply = ({ id: number; ok: true; value: number } | { id: number; ok: false; error: string; events?: number }) & { points?: ArrayBuffer };

/**
 * Deliveries made on a thread of their own (docs/decisions.md, "A rule's delivery on a thread of
 * its own"): building a rule's envelopes and batches and talking to its sink cost about as much
 * main-thread CPU per message as the broker's whole intake, and on the main thread every
 * millisecond of it held the devices' reads and PUBACKs back. The main thread still reads the log
 * and moves the positions; it hands over the rows' bytes undecoded, transferred (not copied: a
 * structured copy of the rows as strings cost the main thread 8% of its time at 1 KiB payloads). One thread per
 * process for all rules; a thread that dies fails what it had in hand (the rules retry) and the next
 * delivery starts a new one.
 */
export class ThreadDelivery implements Delivery {
  private worker?: Worker;
  private readonly pending = new Map<number, { resolve: (n: number) => void; reject: (err: Error) => void; events: number }>();
  private nextId = 1;
  readonly pool = new BufferPool();

  constructor(private readonly log: Logger) {}

  warm(): void {
    this.thread();
  }

  readonly packed: PackedMemory = { take: (bytes) => this.pool.take(bytes), give: (buffer) => this.pool.give(buffer.buffer as ArrayBuffer) };

  deliver(rule: DeliveryRule, input: DeliveryInput): Promise<number> {
    // what counts as failed if the thread ends before it answers (it answers with the events built otherwise)
    const events = 'events' in input ? input.events.length : input.telemetry.rows.reduce((n, r) => n + r.messages, 0);
    // the telemetry's bytes move to the thread (detached here)
    return this.ask({ op: 'deliver', id: this.nextId++, rule, input }, events, 'telemetry' in input ? [input.telemetry.points.buffer as ArrayBuffer] : []);
  }

  async close(runner: string): Promise<void> {
    if (this.worker) await this.ask({ op: 'close', id: this.nextId++, runner }, 0).catch(() => {});
  }

  async stop(): Promise<void> {
    const w = this.worker;
    if (!w) return;
    await this.ask({ op: 'stop', id: this.nextId++ }, 0).catch(() => {});
    this.worker = undefined;
    await w.terminate();
  }

  private ask(request: ThreadRequest, events: number, transfer: ArrayBuffer[] = []): Promise<number> {
    return new Promise((resolve, reject) => {
      this.pending.set(request.id, { resolve, reject, events });
      this.thread().postMessage(request, transfer);
    });
  }

  private thread(): Worker {
    if (this.worker) return this.worker;
    // the module beside this one, as this one runs: TypeScript (tsx, the test runner) or the compiled build
    const ext = import.meta.url.endsWith('.ts') ? 'ts' : 'js';
    const w = new Worker(new URL('./deliveryThreadEntry.mjs', import.meta.url), {
      name: 'bridge-delivery', workerData: { module: new URL(`./deliveryThreadMain.${ext}`, import.meta.url).href },
    });
    w.unref(); // the process ends without waiting for it (stop() ends it in order)
    w.on('message', (m: ThreadReply) => {
      if (m.points) this.pool.give(m.points);
      const p = this.pending.get(m.id);
      if (!p) return;
      this.pending.delete(m.id);
      if (m.ok) p.resolve(m.value);
      else p.reject(new DeliveryError(m.error, m.events ?? p.events));
    });
    w.on('error', (err) => this.log.error({ err }, 'bridge delivery thread failed'));
    w.on('exit', (code) => {
      if (this.worker === w) this.worker = undefined;
      for (const [id, p] of this.pending) {
        this.pending.delete(id);
        p.reject(new DeliveryError(`the delivery thread ended (exit code ${code})`, p.events));
      }
    });
    this.worker = w;
    return w;
  }
}
