/** the smallest buffer the pool hands out, and what it keeps at most */
const POOL_MIN_BYTES = 64 * 1024;
const POOL_MAX_BUFFERS = 16;

/**
 * Large buffers used again. A data bridge's deliveries move megabytes a second at 1 KiB payloads:
 * the reads' packed points (the delivery thread hands each back once its delivery settled,
 * transferred both ways, never copied) and the messages' bodies. A new buffer each time cost page
 * faults on fresh memory (64,000 a second in bench:bridges, 1 KiB, QoS 1) and the garbage
 * collections V8 starts as external memory grows (docs/benchmarks.md).
 */
export class BufferPool {
  private readonly free: ArrayBuffer[] = [];

  /** a view of `bytes` bytes of a buffer of its own: the smallest free one that holds them, else a new one */
  take(bytes: number): Buffer {
    let best = -1;
    for (let i = 0; i < this.free.length; i++) {
      if (this.free[i].byteLength >= bytes && (best < 0 || this.free[i].byteLength < this.free[best].byteLength)) best = i;
    }
    const memory = best >= 0 ? this.free.splice(best, 1)[0] : new ArrayBuffer(Math.max(POOL_MIN_BYTES, 2 ** Math.ceil(Math.log2(Math.max(bytes, 1)))));
    return Buffer.from(memory, 0, bytes);
  }

  give(memory: ArrayBuffer): void {
    if (memory.byteLength === 0) return; // detached
    if (this.free.length >= POOL_MAX_BUFFERS) {
      // keep the larger ones: a small one is cheap to make again
      const smallest = this.free.reduce((min, b, i) => (b.byteLength < this.free[min].byteLength ? i : min), 0);
      if (this.free[smallest].byteLength >= memory.byteLength) return;
      this.free.splice(smallest, 1);
    }
    this.free.push(memory);
  }

  get size(): number {
    return this.free.length;
  }
}
