/**
 * The telemetry history rows this node wrote last, kept in memory for the readers of the log that
 * follow its head (a data bridge's telemetry rule, TelemetryLog.readPacked). Such a reader still
 * takes the rows, their order and its position from PostgreSQL, but the rows' points, the bulk of
 * what it reads, from here: PostgreSQL then neither decompresses nor sends them, and the gateway
 * does not receive them again (docs/decisions.md, "A rule at the head reads its points from memory").
 *
 * A row is added only after its transaction committed, under the transaction's id, with the bytes
 * the history holds (`[[epoch ms,{values}],...]` as the ingest wrote them). What is not here (rows of
 * other nodes, rows older than the memory holds, rows too large) is read from PostgreSQL as before:
 * this is a cache, never the record. Rows are kept only while a reader has read within FOLLOW_MS,
 * so an ingest without such readers pays nothing.
 */

/** rows are kept this long after a reader last read the log */
const FOLLOW_MS = 30_000;
/** memory is taken in slabs of this size, used in a ring: the oldest slab's rows go when a new one is needed */
const SLAB_BYTES = 8 * 1024 * 1024;
/**
 * a row larger than this is not kept (it is read from PostgreSQL). A row is one thing's messages of one
 * ingest batch: a batch of QoS 0 messages at 1 KiB can hold 700 KB of each of 50 devices (bench:bridges).
 */
const MAX_ROW_BYTES = SLAB_BYTES / 2;
/**
 * rows a slab holds at most, whatever their size: the index costs heap per row (V8 marks it at every full collection),
 * and 256 MiB of 48-byte rows would be 1.8 million of them; 16,384 a slab is 524,288 in 256 MiB, over half a minute of
 * bench:bridges' busiest ingest
 */
const SLAB_ROWS = 16_384;

interface Slab {
  buf: Buffer;
  /** the transactions with rows in it, to forget them when it is used again */
  txs: string[];
  /** rows written in it (at most SLAB_ROWS) */
  rows: number;
  /** the highest transaction of its rows */
  newest?: string;
}

/**
 * One transaction's rows: by thing, the row's number; `where` holds per row its slab's index, start and end.
 * Indexed per transaction rather than per row: a key string and an object per row, kept until the ring came round,
 * were moved to V8's old generation at every row and marked at every full collection (docs/benchmarks.md).
 */
interface TxRows {
  rows: Map<string, number>;
  /** (a typed array: no pointers for the collector to follow) */
  where: Int32Array;
}

export class RecentHistory {
  private readonly slabs: Slab[] = [];
  private readonly maxSlabs: number;
  /** the slab being written, and where in it */
  private current = -1;
  private used = 0;
  /** by transaction (decimal xid8 text) */
  private readonly txs = new Map<string, TxRows>();
  private rowCount = 0;
  private lastRead = -Infinity;
  /** history writes under way (see `track`) */
  private readonly writing = new Set<Promise<void>>();
  /**
   * while rows are kept: the position from which they are (decimal xid8 text). The position of the
   * reader whose read started the keeping; raised past the rows of a slab used again.
   */
  private floor?: string;

  /** `maxBytes`: the memory it may use (rounded up to a slab); 0 keeps nothing */
  constructor(maxBytes: number, private readonly now: () => number = Date.now) {
    this.maxSlabs = maxBytes > 0 ? Math.max(2, Math.ceil(maxBytes / SLAB_BYTES)) : 0;
  }

  /** A reader read the log after transaction `tx`: rows are kept from now until FOLLOW_MS after its last read. */
  touch(tx: string): void {
    if (this.maxSlabs === 0) return;
    this.lastRead = this.now();
    this.floor ??= tx;
  }

  /** Whether rows are wanted now (a reader read within FOLLOW_MS); when none has for that long the memory is given back. */
  get wanted(): boolean {
    if (this.maxSlabs === 0) return false;
    if (this.now() - this.lastRead < FOLLOW_MS) return true;
    if (this.slabs.length > 0) this.clear();
    return false;
  }

  /**
   * Whether a read after transaction `tx` may find its rows here: rows have been kept since it. (Some
   * may still be missing: another node's, a row too large, or one that committed behind the position
   * at which keeping began; the reader reads those from PostgreSQL.)
   */
  covers(tx: string): boolean {
    return this.floor !== undefined && compareTx(tx, this.floor) >= 0;
  }

  /**
   * Keeps a committed row: `length` bytes of points that `write` puts at `target[at]`. Rows of one
   * transaction come in its order; transactions as they committed.
   */
  add(tx: string, thingId: string, length: number, write: (target: Buffer, at: number) => void): void {
    if (length > MAX_ROW_BYTES) return;
    if (this.current < 0 || this.used + length > SLAB_BYTES || this.slabs[this.current].rows >= SLAB_ROWS) this.nextSlab();
    const slab = this.slabs[this.current];
    write(slab.buf, this.used);
    let t = this.txs.get(tx);
    if (!t) this.txs.set(tx, (t = { rows: new Map(), where: new Int32Array(3 * 8) }));
    // (a transaction whose rows run over into the next slab is listed in both, and forgotten whole with the first)
    if (slab.txs.at(-1) !== tx) slab.txs.push(tx);
    let i = t.rows.get(thingId);
    if (i === undefined) {
      i = t.rows.size;
      t.rows.set(thingId, i);
      this.rowCount++;
      if (3 * i + 3 > t.where.length) {
        const grown = new Int32Array(t.where.length * 2);
        grown.set(t.where);
        t.where = grown;
      }
    }
    t.where[3 * i] = this.current;
    t.where[3 * i + 1] = this.used;
    t.where[3 * i + 2] = this.used + length;
    slab.rows++;
    this.used += length;
    if (slab.newest === undefined || compareTx(tx, slab.newest) > 0) slab.newest = tx;
  }

  /** A row's points (a view of memory used again later: copy it before the next `add`), or undefined. */
  get(tx: string, thingId: string): Buffer | undefined {
    const t = this.txs.get(tx);
    const i = t?.rows.get(thingId);
    if (i === undefined) return undefined;
    const w = t!.where;
    return this.slabs[w[3 * i]].buf.subarray(w[3 * i + 1], w[3 * i + 2]);
  }

  /**
   * A history write under way on this node, settled once its rows are added (or it failed). Its rows
   * are visible to a reader as soon as PostgreSQL committed them, which can be before this node hears
   * of the commit: a reader that misses rows waits for the writes under way when it read (`settled`).
   */
  track(write: Promise<unknown>): void {
    const settled = write.then(() => {}, () => {});
    this.writing.add(settled);
    void settled.then(() => this.writing.delete(settled));
  }

  /** Settles when the writes under way now have (see `track`). */
  settled(): Promise<void> {
    return this.writing.size === 0 ? Promise.resolve() : Promise.all(this.writing).then(() => {});
  }

  /** rows kept (tests, metrics) */
  get size(): number {
    return this.rowCount;
  }

  private nextSlab(): void {
    this.current = (this.current + 1) % this.maxSlabs;
    this.used = 0;
    let slab = this.slabs[this.current];
    if (!slab) {
      slab = { buf: Buffer.allocUnsafeSlow(SLAB_BYTES), txs: [], rows: 0 };
      this.slabs[this.current] = slab;
      return;
    }
    for (const tx of slab.txs) {
      const t = this.txs.get(tx);
      if (!t) continue;
      this.rowCount -= t.rows.size;
      this.txs.delete(tx);
    }
    slab.txs = [];
    slab.rows = 0;
    // its rows are gone: a reader at or before them would miss them
    if (slab.newest !== undefined && (this.floor === undefined || compareTx(slab.newest, this.floor) > 0)) this.floor = slab.newest;
    slab.newest = undefined;
  }

  private clear(): void {
    this.slabs.length = 0;
    this.txs.clear();
    this.rowCount = 0;
    this.current = -1;
    this.used = 0;
    this.floor = undefined;
  }
}

/** Compares two xid8 values given as decimal text (without leading zeros). */
export function compareTx(a: string, b: string): number {
  if (a.length !== b.length) return a.length - b.length;
  return a < b ? -1 : a > b ? 1 : 0;
}
