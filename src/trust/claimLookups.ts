import type { Db } from '../db/client.js';
import { repo, type ClaimContextRow } from './repo.js';

type Lookup = Parameters<typeof repo.claimContexts>[1][number];

const MAX_BATCH = 64;
/** lookups in flight per node: a lone claim is looked up at once, claims arriving meanwhile wait for one */
const MAX_IN_FLIGHT = 2;

/**
 * The claim query (secret, group state, model, earlier enrollment) of concurrent claims in one
 * statement: one statement per claim was a round trip, a planned query and a socket write each on
 * the enrollment path (issue 36 item 2). A lone claim is asked at once, as before. When a shared
 * statement fails, each of its claims is asked alone, so a bad claim fails alone.
 */
export class ClaimLookups {
  private queue: { item: Lookup; resolve(row: ClaimContextRow): void; reject(err: unknown): void }[] = [];
  private inFlight = 0;

  constructor(private readonly db: Db) {}

  lookup(item: Lookup): Promise<ClaimContextRow> {
    return new Promise((resolve, reject) => {
      this.queue.push({ item, resolve, reject });
      if (this.inFlight < MAX_IN_FLIGHT) void this.drain();
    });
  }

  private async drain(): Promise<void> {
    this.inFlight += 1;
    try {
      while (this.queue.length) {
        const batch = this.queue.splice(0, MAX_BATCH);
        try {
          const rows = await repo.claimContexts(this.db, batch.map((b) => b.item));
          batch.forEach((b, i) => b.resolve(rows[i]));
        } catch (err) {
          if (batch.length === 1) batch[0].reject(err);
          else await Promise.all(batch.map((b) => repo.claimContexts(this.db, [b.item]).then(([row]) => b.resolve(row), b.reject)));
        }
      }
    } finally {
      this.inFlight -= 1;
    }
  }
}
