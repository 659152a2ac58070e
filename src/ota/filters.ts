import crypto from 'node:crypto';
import type { Sql } from '../db/client.js';
import type { ThingQuery, ThingSearch } from '../gateway.js';
import { iso } from '../lib/encoding.js';
import { conflict, notFound } from '../lib/errors.js';
import { otaRepo, type FilterRow } from './repo.js';

export interface FilterInput { name: string; query: ThingQuery }

const view = (r: FilterRow) => ({ id: r.id, name: r.name, query: r.query, created_at: iso(r.created_at), updated_at: iso(r.updated_at) });
export type TargetFilterView = ReturnType<typeof view>;

/** Postgres unique violation: the account already has a filter of that name. */
const duplicateName = (name: string) => (err: { code?: string }) => {
  if (err?.code === '23505') throw conflict(`a target filter named ${JSON.stringify(name)} already exists in this account`);
  throw err;
};

/**
 * Target filters: named queries over an account's things (model, state, tags, last seen, revoked,
 * connected), run by the fleet registry's filters (the `thingSearch` service), so a preview lists
 * exactly what the registry's list would.
 */
export class TargetFilters {
  constructor(private readonly sql: Sql, private readonly things: ThingSearch, private readonly now: () => Date) {}

  async create(accountId: string, input: FilterInput): Promise<TargetFilterView> {
    const id = crypto.randomUUID();
    const at = this.now();
    const [row] = await this.sql<FilterRow[]>`
      insert into ota_target_filters (id, account_id, name, query, created_at, updated_at)
      values (${id}, ${accountId}, ${input.name}, ${this.sql.json(input.query as never)}, ${at}, ${at}) returning *`.catch(duplicateName(input.name));
    return view(row);
  }

  async update(accountId: string, id: string, input: FilterInput): Promise<TargetFilterView> {
    const [row] = await this.sql<FilterRow[]>`
      update ota_target_filters set name = ${input.name}, query = ${this.sql.json(input.query as never)}, updated_at = ${this.now()}
      where id = ${id} and account_id = ${accountId} returning *`.catch(duplicateName(input.name));
    if (!row) throw notFound(`target filter ${id} not found`);
    return view(row);
  }

  /** Rollouts created from it keep their own copy of the query. */
  async remove(accountId: string, id: string): Promise<void> {
    const r = await this.sql`delete from ota_target_filters where id = ${id} and account_id = ${accountId}`;
    if (r.count === 0) throw notFound(`target filter ${id} not found`);
  }

  async get(accountId: string, id: string): Promise<TargetFilterView> {
    return view(await this.row(accountId, id));
  }

  async row(accountId: string, id: string): Promise<FilterRow> {
    const row = await otaRepo.filter(this.sql, accountId, id);
    if (!row) throw notFound(`target filter ${id} not found`);
    return row;
  }

  /** The account's filters, by id (keyset). */
  async list(accountId: string, q: { limit: number; after?: string }) {
    const rows = await this.sql<FilterRow[]>`
      select * from ota_target_filters where account_id = ${accountId} ${q.after === undefined ? this.sql`` : this.sql`and id > ${q.after}`}
      order by id limit ${q.limit + 1}`;
    const items = rows.slice(0, q.limit).map(view);
    return { items, next_cursor: rows.length > q.limit ? items[items.length - 1].id : null };
  }

  /** The things the filter matches now: their count and one page (oldest first). */
  async preview(accountId: string, id: string, page: { limit: number; cursor?: string }) {
    const { query } = await this.row(accountId, id);
    const [count, found] = await Promise.all([this.things.count(accountId, query), this.things.page(accountId, query, page)]);
    return { count, ...found };
  }
}
