import { FlattenedSign } from 'jose';
import type { Cluster } from '../actors/cluster.js';
import type { Sql } from '../db/client.js';
import type { Logger } from '../log.js';
import type { Clock } from '../lib/clock.js';
import type { Es256Keys } from '../pki/keys.js';
import { iso } from '../lib/encoding.js';
import { deltaCursor } from './cursor.js';
import * as repo from './repo.js';

/** Cluster topic: a newer snapshot is stored (payload `{ seq }`); other nodes drop their copy. */
export const SNAPSHOT_TOPIC = 'blacklist.snapshot-changed';
/** JWS `typ` of a snapshot: verifiers check it, so no other token of ours passes for one. */
export const SNAPSHOT_TYP = 'identity-blacklist-snapshot+json';

export interface SnapshotEntry { model: string; sn: string; reason: string; added_at: string }

/** The signed payload: the whole active list and the delta cursor it reflects. */
export interface SnapshotPayload {
  cursor: string;
  seq: number;
  generated_at: string;
  count: number;
  entries: SnapshotEntry[];
}

interface Served { seq: number; jws: string }

/**
 * The latest signed snapshot. Built when the list changes (after the change commits, and by the
 * sweep when a node died before building), stored in Postgres so every node serves the same one,
 * cached per node and dropped when another node announces a newer one. Never built per request.
 */
export class SnapshotStore {
  private cached?: Served;
  /** bumped by every announcement: a load that started before one must not be cached */
  private generation = 0;
  private loading?: Promise<Served | undefined>;
  private running?: Promise<void>;
  private queued?: Promise<void>;
  /** when the last build ended and how long it took (the spacing of builds) */
  private last = { endedAt: 0, ms: 0 };

  constructor(private readonly d: { sql: Sql; keys: Es256Keys; cluster: Cluster; clock: Clock; log: Logger }) {
    d.cluster.on<{ seq: number }>(SNAPSHOT_TOPIC, ({ seq }) => {
      this.generation += 1;
      if (!this.cached || seq >= this.cached.seq) this.cached = undefined;
    });
  }

  /** The snapshot to serve (flattened JWS JSON), or undefined while none was built. */
  async current(): Promise<Served | undefined> {
    if (this.cached) return this.cached;
    this.loading ??= this.load().finally(() => { this.loading = undefined; });
    return this.loading;
  }

  /** Drops this node's copy when the stored snapshot is another one (a lost announcement). */
  async recheck(): Promise<void> {
    const state = await repo.snapshotState(this.d.sql);
    if (this.cached && state?.seq !== this.cached.seq) {
      this.generation += 1;
      this.cached = undefined;
    }
  }

  private async load(): Promise<Served | undefined> {
    const generation = this.generation;
    const row = await repo.snapshot(this.d.sql);
    if (!row) return undefined;
    const served = { seq: row.seq, jws: row.jws };
    if (generation === this.generation) this.cached = served;
    return served;
  }

  /**
   * Builds and stores a snapshot of the list as it is now. Calls while a build runs share one
   * follow-up build (it starts after the running one, so it sees every change committed before
   * the call); a burst of changes costs two builds, not one each. A build starts no sooner than
   * its predecessor's duration after that one ended, so one caller changing entries in a loop
   * keeps a node busy building for at most half of the time, whatever the size of the list.
   */
  rebuild(): Promise<void> {
    if (this.queued) return this.queued;
    if (this.running) {
      this.queued = this.running.catch(() => {}).then(() => {
        this.queued = undefined;
        return this.rebuild();
      });
      return this.queued;
    }
    this.running = this.build().finally(() => { this.running = undefined; });
    return this.running;
  }

  /** Rebuilds when the stored snapshot is missing, behind the change log, or signed by a retired key. */
  async ensureFresh(): Promise<void> {
    const [state, latest] = await Promise.all([repo.snapshotState(this.d.sql), repo.latestSeq(this.d.sql)]);
    if (!state || state.seq < latest || state.kid !== this.d.keys.kid) await this.rebuild();
  }

  private async build(): Promise<void> {
    const wait = this.last.endedAt + this.last.ms - Date.now();
    if (wait > 0) await new Promise((resolve) => setTimeout(resolve, wait));
    const started = Date.now();
    try {
      await this.buildNow(started);
    } finally {
      this.last = { endedAt: Date.now(), ms: Date.now() - started };
    }
  }

  private async buildNow(started: number): Promise<void> {
    const { seq, entries } = await repo.everything(this.d.sql);
    const payload: SnapshotPayload = {
      cursor: deltaCursor(seq),
      seq,
      generated_at: this.d.clock.now().toISOString(),
      count: entries.length,
      entries: entries.map((e) => ({ model: e.model, sn: e.sn, reason: e.reason, added_at: iso(e.added_at) })),
    };
    const signed = await new FlattenedSign(Buffer.from(JSON.stringify(payload)))
      .setProtectedHeader({ alg: 'ES256', kid: this.d.keys.kid, typ: SNAPSHOT_TYP })
      .sign(this.d.keys.privateKey);
    const jws = JSON.stringify(signed);
    const stored = await repo.storeSnapshot(this.d.sql, { seq, kid: this.d.keys.kid, entries: entries.length, jws, built_at: payload.generated_at });
    if (!stored) return; // another node stored a newer one meanwhile
    this.generation += 1;
    this.cached = { seq, jws };
    await this.d.cluster.notify(SNAPSHOT_TOPIC, { seq });
    this.d.log.info({ seq, entries: entries.length, bytes: jws.length, ms: Date.now() - started }, 'identity-blacklist snapshot built');
  }
}
