import type { Sql } from '../db/client.js';
import type { Logger } from '../log.js';
import * as repo from './repo.js';

export interface IndexedEntry { model: string; sn: string; reason: string; added_by: string; added_at: Date }

const PAGE = 10_000;

/**
 * This node's copy of the active list for `check`, kept the way an edge keeps one: loaded whole,
 * then moved forward by replaying the change log from its seq (on every change event of any
 * node, after this node's own writes, and on a periodic tick in case a notification was lost).
 * A check then costs no database round trip. Enrollment does not use it: it asks Postgres.
 */
export class ListIndex {
  /** sn -> model -> entry (check looks a serial up across models) */
  private bySn = new Map<string, Map<string, IndexedEntry>>();
  private seq = -1;
  private running?: Promise<void>;
  private queued?: Promise<void>;

  constructor(private readonly d: { sql: Sql; log: Logger }) {}

  get loaded(): boolean {
    return this.seq >= 0;
  }

  get size(): number {
    let n = 0;
    for (const models of this.bySn.values()) n += models.size;
    return n;
  }

  /** The entry of a serial (the first by model), or of (model, sn); undefined before the first load. */
  lookup(sn: string, model?: string): IndexedEntry | null | undefined {
    if (!this.loaded) return undefined;
    const models = this.bySn.get(sn);
    if (!models) return null;
    if (model !== undefined) return models.get(model) ?? null;
    let first: IndexedEntry | null = null;
    for (const e of models.values()) if (!first || e.model < first.model) first = e;
    return first;
  }

  /**
   * Moves the copy to the log's head. Calls while one runs share a single follow-up, which
   * starts after it, so every change committed before the call is applied when it resolves.
   */
  catchUp(): Promise<void> {
    if (this.queued) return this.queued;
    if (this.running) {
      this.queued = this.running.catch(() => {}).then(() => {
        this.queued = undefined;
        return this.catchUp();
      });
      return this.queued;
    }
    this.running = this.step().finally(() => { this.running = undefined; });
    return this.running;
  }

  private async step(): Promise<void> {
    if (!this.loaded) return this.reload();
    for (;;) {
      const page = await repo.deltas(this.d.sql, this.seq, PAGE);
      // changes after our seq were pruned (a node that slept for days): start over
      if (this.seq < page.prunedThrough) return this.reload();
      for (const c of page.changes) this.apply(c);
      if (page.changes.length) this.seq = page.changes[page.changes.length - 1].seq;
      if (page.changes.length < PAGE) return;
    }
  }

  private async reload(): Promise<void> {
    const { seq, entries } = await repo.everything(this.d.sql);
    const bySn = new Map<string, Map<string, IndexedEntry>>();
    for (const e of entries) this.put(bySn, { model: e.model, sn: e.sn, reason: e.reason, added_by: e.added_by, added_at: e.added_at });
    this.bySn = bySn;
    this.seq = seq;
    this.d.log.debug({ seq, entries: entries.length }, 'identity-blacklist index loaded');
  }

  private apply(c: repo.ChangeRow): void {
    if (c.op === 'add') {
      this.put(this.bySn, { model: c.model, sn: c.sn, reason: c.reason ?? '', added_by: c.by, added_at: c.at });
    } else {
      const models = this.bySn.get(c.sn);
      models?.delete(c.model);
      if (models?.size === 0) this.bySn.delete(c.sn);
    }
  }

  private put(bySn: Map<string, Map<string, IndexedEntry>>, e: IndexedEntry): void {
    let models = bySn.get(e.sn);
    if (!models) bySn.set(e.sn, (models = new Map()));
    models.set(e.model, e);
  }
}
