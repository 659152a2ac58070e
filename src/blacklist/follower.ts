import type { DomainBus } from '../actors/cluster.js';
import type { Logger } from '../log.js';
import { Listening } from '../lib/listening.js';
import type { ListIndex } from './listIndex.js';
import type { SnapshotStore } from './snapshot.js';
import { TICK_MS } from './service.js';

/**
 * Keeps this node's copies (the list index, the signed snapshot) following every node's changes:
 * at each change event (domain events reach each node once) and, without one, every tick (a lost
 * NOTIFY leaves a copy behind for one tick at most).
 */
export class BlacklistFollower {
  private readonly changes: Listening<unknown>;
  private tick?: NodeJS.Timeout;

  constructor(private readonly d: { bus: DomainBus; log: Logger; index: ListIndex; snapshots: SnapshotStore }) {
    this.changes = new Listening(d.bus, ['blacklist.added', 'blacklist.removed'], () => this.catchUp());
  }

  async start(): Promise<void> {
    this.changes.start();
    this.tick = setInterval(() => {
      this.catchUp();
      this.d.snapshots.recheck().catch(this.fail('snapshot recheck'));
    }, TICK_MS).unref();
    await this.d.index.catchUp().catch(this.fail('index load'));
    // a first snapshot (or one behind the log, or signed by a retired key) before edges ask
    await this.d.snapshots.ensureFresh().catch(this.fail('snapshot build'));
  }

  stop(): void {
    clearInterval(this.tick);
    this.changes.stop();
  }

  private catchUp(): void {
    this.d.index.catchUp().catch(this.fail('index catch-up'));
  }

  private fail(what: string) {
    return (err: unknown) => this.d.log.error({ err }, `identity blacklist: ${what} failed; retried within a minute`);
  }
}
