/** Counters and latency samples of one simulator run. */
export class Stats {
  readonly counters = new Map<string, number>();
  readonly errors = new Map<string, number>();
  private readonly latencies = new Map<string, number[]>();

  count(name: string, n = 1): void {
    this.counters.set(name, (this.counters.get(name) ?? 0) + n);
  }

  get(name: string): number {
    return this.counters.get(name) ?? 0;
  }

  error(kind: string, err?: unknown): void {
    const key = err ? `${kind}: ${String((err as Error).message ?? err).slice(0, 120)}` : kind;
    this.errors.set(key, (this.errors.get(key) ?? 0) + 1);
  }

  sample(name: string, ms: number): void {
    let list = this.latencies.get(name);
    if (!list) this.latencies.set(name, (list = []));
    list.push(ms);
  }

  /** nearest-rank percentile, in ms (null without samples) */
  percentile(name: string, p: number): number | null {
    const list = [...(this.latencies.get(name) ?? [])].sort((a, b) => a - b);
    if (list.length === 0) return null;
    return Math.round(list[Math.min(list.length - 1, Math.ceil((p / 100) * list.length) - 1)] * 10) / 10;
  }

  get errorCount(): number {
    let n = 0;
    for (const v of this.errors.values()) n += v;
    return n;
  }
}
