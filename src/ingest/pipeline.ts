import crypto from 'node:crypto';
import type { Db, Tx } from '../db/client.js';
import * as repo from './repo.js';
import { resources, schemaReason, sourceIdOf, type Item, type ResourceName, type RuleFailure } from './resources.js';

export type ItemStatus = 'ACCEPTED' | 'REPLAY' | 'QUARANTINED' | 'REJECTED';

export interface ItemResult {
  /** position in the request's items (from 0) */
  index: number;
  source_id: string | null;
  status: ItemStatus;
  source_version?: number;
  /** ACCEPTED: the record's id (stable across versions); REPLAY: the stored record's */
  internal_id?: string;
  /** QUARANTINED and REJECTED: a machine-readable code and a readable reason; REPLAY: why */
  code?: string;
  reason?: string;
  quarantine_id?: string;
}

export interface Origin {
  correlationId: string;
  jobId?: string;
}

interface Valid {
  index: number;
  item: Item;
  rule?: RuleFailure;
}

/**
 * Processes items of one (partner, warehouse, resource) in the caller's transaction, as if one
 * after the other in their order: schema (REJECTED), then version against the stored record
 * (REPLAY when not newer), then business rules (QUARANTINED, held), else ACCEPTED. Only the
 * newest accepted version of each source_id is written, by one upsert; a concurrent request
 * that stored an equal or newer version first turns ours into REPLAY. `force` (quarantine
 * release) skips the business rules. No item's failure stops the others.
 */
export async function processItems(db: Db, scope: repo.Scope & { resource: ResourceName }, origin: Origin, raw: readonly unknown[], opts: { firstIndex?: number; force?: boolean } = {}): Promise<ItemResult[]> {
  const def = resources[scope.resource];
  const firstIndex = opts.firstIndex ?? 0;
  const results: ItemResult[] = new Array(raw.length);
  const valid: Valid[] = [];
  raw.forEach((value, i) => {
    const index = firstIndex + i;
    const parsed = def.schema.safeParse(value);
    if (!parsed.success) {
      const sid = (value as { source_id?: unknown } | null)?.source_id;
      results[i] = { index, source_id: typeof sid === 'string' ? sid : null, status: 'REJECTED', code: 'SCHEMA', reason: schemaReason(parsed.error) };
      return;
    }
    valid.push({ index, item: parsed.data, rule: opts.force ? undefined : def.rules(parsed.data) });
  });

  const ids = [...new Set(valid.map((v) => v.item.source_id))];
  const stored = new Map((await repo.currentVersions(db, scope, ids)).map((e) => [e.source_id, e]));
  const current = new Map<string, { version: number; internalId: string }>();
  for (const [id, e] of stored) current.set(id, { version: e.source_version, internalId: e.internal_id });

  const winners = new Map<string, repo.RecordWrite>();
  const held: repo.QuarantineWrite[] = [];
  for (const v of valid) {
    const { source_id, source_version } = v.item;
    const at = current.get(source_id);
    const base = { index: v.index, source_id, source_version };
    const slot = v.index - firstIndex;
    if (at && source_version <= at.version) {
      results[slot] = {
        ...base, status: 'REPLAY', internal_id: at.internalId,
        ...(source_version < at.version ? { code: 'STALE', reason: `a newer source_version (${at.version}) is stored` } : {}),
      };
      continue;
    }
    if (v.rule) {
      const id = crypto.randomUUID();
      held.push({ id, source_id, source_version, item: v.item, ...v.rule });
      results[slot] = { ...base, status: 'QUARANTINED', quarantine_id: id, ...v.rule };
      continue;
    }
    const internalId = at?.internalId ?? crypto.randomUUID();
    current.set(source_id, { version: source_version, internalId });
    winners.set(source_id, { internal_id: internalId, source_id, source_version, data: v.item });
    results[slot] = { ...base, status: 'ACCEPTED', internal_id: internalId };
  }

  const rows = [...winners.values()].sort((a, b) => (a.source_id < b.source_id ? -1 : a.source_id > b.source_id ? 1 : 0));
  const written = new Map((await repo.upsertRecords(db, scope, rows)).map((r) => [r.source_id, r.internal_id]));
  for (const r of results) {
    if (r.status !== 'ACCEPTED') continue;
    const id = written.get(r.source_id!);
    if (id) r.internal_id = id;
    else {
      // a concurrent request stored this version or a newer one after we read: nothing of ours changed it
      r.status = 'REPLAY';
      delete r.internal_id;
      r.code = 'CONCURRENT';
      r.reason = 'a concurrent request stored this or a newer source_version first';
    }
  }
  await repo.insertQuarantine(db, scope, origin, held);
  return results;
}

/**
 * Why the database refused to store a value, when that is what `err` is: a data exception
 * (22xxx), an integrity constraint (23xxx) or a limit such as an index row too large (54xxx).
 * Anything else (connection, serialization, deadlock) is not the item's fault: undefined.
 */
export function refusedByDatabase(err: unknown): string | undefined {
  const { code, message } = (err ?? {}) as { code?: unknown; message?: unknown };
  if (typeof code !== 'string' || !/^(22|23|54)/.test(code)) return undefined;
  return `the database cannot store this item (SQLSTATE ${code}: ${String(message).slice(0, 200)})`;
}

/**
 * processItems in a savepoint; when the database refuses a value, the items go again one by
 * one, each in its own savepoint, and the one it refuses is REJECTED (UNSTORABLE) alone: an
 * item the validation let through but the database cannot store never fails the others.
 * (postgres.js's savepoints, not hand-written ones: a query that fails in the transaction's own
 * scope fails the whole transaction at its end, even when the error was caught.)
 */
export async function processItemsIsolated(tx: Tx, scope: repo.Scope & { resource: ResourceName }, origin: Origin, raw: readonly unknown[], opts: { firstIndex?: number; force?: boolean } = {}): Promise<ItemResult[]> {
  try {
    return await tx.savepoint((sp) => processItems(sp, scope, origin, raw, opts));
  } catch (err) {
    if (!refusedByDatabase(err)) throw err;
  }
  const firstIndex = opts.firstIndex ?? 0;
  const results: ItemResult[] = [];
  for (const [i, value] of raw.entries()) {
    const index = firstIndex + i;
    try {
      results.push(...(await tx.savepoint((sp) => processItems(sp, scope, origin, [value], { ...opts, firstIndex: index }))));
    } catch (err) {
      const reason = refusedByDatabase(err);
      if (!reason) throw err;
      results.push({ index, source_id: sourceIdOf(value), status: 'REJECTED', code: 'UNSTORABLE', reason });
    }
  }
  return results;
}

export function summarize(results: readonly ItemResult[]): { accepted: number; replayed: number; quarantined: number; rejected: number } {
  const n = { accepted: 0, replayed: 0, quarantined: 0, rejected: 0 };
  for (const r of results) {
    if (r.status === 'ACCEPTED') n.accepted++;
    else if (r.status === 'REPLAY') n.replayed++;
    else if (r.status === 'QUARANTINED') n.quarantined++;
    else n.rejected++;
  }
  return n;
}
