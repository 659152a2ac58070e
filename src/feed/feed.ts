import type { Sql } from '../db/client.js';
import type { Clock } from '../lib/clock.js';
import { iso } from '../lib/encoding.js';
import { invalid } from '../lib/errors.js';
import { after, horizonPosition, START, type Cursors, type Position, type Scope } from './cursor.js';
import * as repo from './repo.js';

/** Page bounds of the feed and of the full sync (docs/decisions.md). */
export const FEED_PAGE = { default: 100, max: 500 } as const;
export const THINGS_PAGE = { default: 100, max: 1000 } as const;

/** One state change as the feed and webhook deliveries carry it. */
export interface ChangeItem {
  /** the change's number in the log (unique; increases along each thing's changes) */
  sequence: number;
  thing_id: string;
  model_id: string | null;
  /** the model as the device named it at enrollment (vid:pid descriptor or name) */
  model: string | null;
  manufacturer: string | null;
  serial: string | null;
  /** null for a birth (the spec's "none": enrollment into ROLLEDOFF) */
  old_state: string | null;
  new_state: string;
  /** what caused it: ENROLL, PROVISION, FACTORY_DONE, FACTORY_HANDOVER, ACTIVATE, DEACTIVATE, ANNIHILATE */
  event: string;
  changed_at: string;
}

export function itemOf(r: repo.ChangeRow): ChangeItem {
  return {
    sequence: Number(r.seq), thing_id: r.thing_id, model_id: r.model_id, model: r.model, manufacturer: r.manufacturer, serial: r.serial,
    old_state: r.from_state === 'REGISTERED' ? null : r.from_state, new_state: r.to_state, event: r.event, changed_at: iso(r.at),
  };
}

/** The full sync's keyset cursor: the last thing's identity (manufacturer, model, serial), base64url JSON. */
function thingKeyOf(after: string): repo.ThingKey {
  let key: unknown;
  try {
    key = JSON.parse(Buffer.from(after, 'base64url').toString('utf8'));
  } catch {
    key = undefined;
  }
  if (!Array.isArray(key) || key.length !== 3 || !key.every((k) => typeof k === 'string')) {
    throw invalid('after: not a next_cursor of this listing; pass the next_cursor of the previous page, or omit it to start');
  }
  return { manufacturer: key[0], model: key[1], serial: key[2] };
}

const positionOf = (r: repo.ChangeRow): Position => ({ xid: BigInt(r.xid), seq: BigInt(r.seq) });

export interface FeedPage {
  items: ChangeItem[];
  /** always set: resume from it (also when the page is empty) */
  next_cursor: string;
  /** more changes are ready now: fetch again at once rather than after the poll interval */
  has_more: boolean;
}

export interface ThingsPage {
  items: { thing_id: string; model_id: string | null; model: string; manufacturer: string; serial: string; state: string; updated_at: string }[];
  next_cursor: string | null;
  /** first page only: the feed cursor to resume the feed from once the sync is done */
  feed_cursor: string | null;
}

/**
 * The state-change feed: durable, ordered, cursor-paged, and safe against changes that commit
 * out of order (a cursor never passes a change that is yet to commit; migration 0900). The
 * full sync lists the things themselves, for a consumer whose cursor expired.
 */
export class StateChangeFeed {
  constructor(private readonly d: { sql: Sql; cursors: Cursors; clock: Clock }) {}

  async page(scope: Scope, q: { since?: string; limit: number; registrar_id?: string }): Promise<FeedPage> {
    if (q.registrar_id !== undefined) {
      throw invalid('registrar_id must not be sent: the registrar comes from the signed identity (the calling factory service)', { code: 'THM-50100', type: 'feed-registrar-id-sent' });
    }
    const now = this.d.clock.now();
    const from = q.since === undefined ? START : this.d.cursors.read(q.since, scope, now);
    const { horizon, rows } = await repo.changesPage(this.d.sql, scope, from, q.limit);
    const hasMore = rows.length > q.limit;
    const items = rows.slice(0, q.limit);
    let next = items.length ? positionOf(items[items.length - 1]) : from;
    // nothing else of this scope is below the horizon: the next read may start there
    if (!hasMore) {
      const h = horizonPosition(horizon);
      if (after(h, next)) next = h;
    }
    return { items: items.map(itemOf), next_cursor: this.d.cursors.issue(next, scope, now), has_more: hasMore };
  }

  async things(scope: Scope, q: { after?: string; limit: number }): Promise<ThingsPage> {
    const after = q.after === undefined ? undefined : thingKeyOf(q.after);
    // taken before the things are read: a change made while the sync runs is in the feed after it
    const feedCursor = after === undefined ? this.d.cursors.issue(horizonPosition(await repo.horizon(this.d.sql)), scope, this.d.clock.now()) : null;
    const rows = await repo.thingsPage(this.d.sql, scope, after, q.limit);
    const last = rows[rows.length - 1];
    return {
      items: rows.map((r) => ({ thing_id: r.id, model_id: r.model_id, model: r.model, manufacturer: r.manufacturer, serial: r.serial, state: r.state, updated_at: iso(r.updated_at) })),
      next_cursor: rows.length === q.limit ? Buffer.from(JSON.stringify([last.manufacturer, last.model, last.serial])).toString('base64url') : null,
      feed_cursor: feedCursor,
    };
  }
}
