import crypto from 'node:crypto';
import type { Gateway } from '../gateway.js';
import * as repo from './repo.js';

const INVALIDATE = 'iam.invalidate';
const ACK = 'iam.invalidate-ack';
/** A node is live when it heartbeated within this many seconds. */
const LIVE_WITHIN_S = 15;
const HEARTBEAT_MS = 5_000;
/** How long a revoking call waits for the other nodes' acknowledgements. */
const ACK_TIMEOUT_MS = 3_000;
/** Upper bound of any entry's age, whatever happens to invalidation messages. */
export const ENTRY_TTL_MS = 60_000;
const MAX_ENTRIES = 100_000;

/** `at`: wall time (an entry's age bounds staleness in real time; no lifecycle decision reads it). */
interface Entry<V> { value: V; at: number }

/**
 * Node-local caches of the IAM hot path (credentials by access key id, roles, assignments,
 * SCPs and capabilities per account), invalidated across nodes through `gw.cluster`.
 *
 * Guarantee (docs/decisions.md, IAM): a change that must take effect at once (deactivation,
 * revocation, deletion, capability/SCP/assignment change) is committed, then `invalidate(keys,
 * { wait: true })` drops the keys locally, broadcasts them and waits until every live node (heart-
 * beat in `iam_cache_nodes`) acknowledged having dropped them; only then does the API answer. So the
 * next request on any node misses the cache and reads the committed row. A loader that raced with
 * an invalidation does not store its (possibly stale) result: every invalidation bumps `epoch`.
 * Should a node miss a message (its notification channel broke) it still learns of it within one
 * heartbeat: every such invalidation bumps a generation counter in the database, which each node
 * reads with its heartbeat; a node that sees a generation it did not receive drops all its caches.
 * A node that cannot heartbeat drops all its caches; no entry lives longer than ENTRY_TTL_MS.
 */
export class IamCache {
  private epoch = 0;
  /** highest cache generation this node has applied (from messages or heartbeats) */
  private generation = 0;
  private readonly maps = new Map<string, Map<string, Entry<unknown>>>();
  private readonly pending = new Map<string, { waiting: Set<string>; done: () => void }>();
  private timer?: NodeJS.Timeout;

  constructor(private readonly gw: Pick<Gateway, 'sql' | 'cluster' | 'log'>) {
    gw.cluster.on<{ id: string; keys: string[]; from: string; generation?: number }>(INVALIDATE, async (msg) => {
      this.drop(msg.keys);
      if (msg.generation && msg.generation === this.generation + 1) this.generation = msg.generation;
      if (msg.from !== gw.cluster.nodeId) await gw.cluster.notify(ACK, { id: msg.id, node: gw.cluster.nodeId });
    });
    gw.cluster.on<{ id: string; node: string }>(ACK, (msg) => {
      const p = this.pending.get(msg.id);
      if (!p) return;
      p.waiting.delete(msg.node);
      if (p.waiting.size === 0) p.done();
    });
  }

  /** Registers this node as live before it serves any request (called from the domain's init). */
  async register(): Promise<void> {
    this.generation = await repo.heartbeat(this.gw.sql, this.gw.cluster.nodeId);
  }

  /** Heartbeat: marks this node live; drops every cache when a generation was missed. */
  async beat(): Promise<void> {
    try {
      const n = await repo.heartbeat(this.gw.sql, this.gw.cluster.nodeId);
      if (n > this.generation) {
        // a message may simply still be in flight; dropping everything is only a few cache misses
        this.clear();
        this.generation = n;
      }
    } catch (err) {
      this.gw.log.warn({ err }, 'iam: heartbeat failed; dropping all IAM caches');
      this.clear();
    }
  }

  async start(): Promise<void> {
    await this.beat();
    this.timer = setInterval(() => void this.beat(), HEARTBEAT_MS);
    this.timer.unref();
  }

  async stop(): Promise<void> {
    if (this.timer) clearInterval(this.timer);
    await repo.forgetNode(this.gw.sql, this.gw.cluster.nodeId).catch(() => {});
  }

  /** Cached value of `key` in map `name`, loading it on a miss. */
  async get<V>(name: string, key: string, load: () => Promise<V>): Promise<V> {
    let map = this.maps.get(name);
    if (!map) this.maps.set(name, (map = new Map()));
    const hit = map.get(key);
    const now = Date.now();
    if (hit && now - hit.at < ENTRY_TTL_MS) return hit.value as V;
    const epoch = this.epoch;
    const value = await load();
    if (this.epoch === epoch) {
      if (map.size >= MAX_ENTRIES) map.clear();
      map.set(key, { value, at: now });
    }
    return value;
  }

  /** Sets a value known to be current (the caller just wrote it). */
  set<V>(name: string, key: string, value: V): void {
    let map = this.maps.get(name);
    if (!map) this.maps.set(name, (map = new Map()));
    map.set(key, { value, at: Date.now() });
  }

  /** Peek without loading (undefined when absent or stale). */
  peek<V>(name: string, key: string): V | undefined {
    const hit = this.maps.get(name)?.get(key);
    return hit && Date.now() - hit.at < ENTRY_TTL_MS ? (hit.value as V) : undefined;
  }

  private drop(keys: string[]): void {
    this.epoch++;
    for (const k of keys) {
      const i = k.indexOf(':');
      this.maps.get(k.slice(0, i))?.delete(k.slice(i + 1));
    }
  }

  clear(): void {
    this.epoch++;
    for (const m of this.maps.values()) m.clear();
  }

  /**
   * Drops `keys` (`<map>:<key>`) on every node. With `wait`, resolves once every live node
   * acknowledged (or after ACK_TIMEOUT_MS, logging the nodes that did not answer).
   */
  async invalidate(keys: string[], opts: { wait: boolean }): Promise<void> {
    if (keys.length === 0) return;
    const id = crypto.randomUUID();
    if (!opts.wait) {
      await this.gw.cluster.broadcast(INVALIDATE, { id, keys, from: this.gw.cluster.nodeId });
      return;
    }
    const generation = await repo.bumpGeneration(this.gw.sql);
    const others = await repo.liveNodes(this.gw.sql, this.gw.cluster.nodeId, LIVE_WITHIN_S);
    const waiting = new Set(others);
    let timeout: NodeJS.Timeout | undefined;
    const acked = new Promise<void>((resolve) => {
      this.pending.set(id, { waiting, done: resolve });
      if (waiting.size === 0) resolve();
      timeout = setTimeout(() => {
        this.gw.log.warn({ nodes: [...waiting], keys }, 'iam: nodes did not acknowledge a cache invalidation in time');
        resolve();
      }, ACK_TIMEOUT_MS);
    });
    try {
      await this.gw.cluster.broadcast(INVALIDATE, { id, keys, from: this.gw.cluster.nodeId, generation });
      await acked;
    } finally {
      clearTimeout(timeout);
      this.pending.delete(id);
    }
  }
}
