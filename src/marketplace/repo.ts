import type { Db } from '../db/client.js';
import type { ProductBundle, ProductState } from '../../machines/marketplaceProduct.js';

/** SQL of marketplace products. The lifecycle columns are written by the actor store only (kinds.ts). */
export interface ProductRow {
  id: string;
  account_id: string;
  model_id: string;
  vid: string;
  pid: string;
  created_at: Date;
  state: ProductState;
  name: string;
  description: string;
  version: string;
  bundles: ProductBundle[];
  published_version: string | null;
  published_at: Date | null;
  unpublished_at: Date | null;
  updated_at: Date | null;
}

export interface ProductFilter {
  /** only products of this account (any state unless `state`) */
  accountId?: string;
  state?: ProductState;
  modelId?: string;
  vid?: string;
  pid?: string;
  q?: string;
  /** keyset: the last row of the previous page (newest first) */
  after?: { createdAt: Date; id: string };
}

export async function insertProduct(db: Db, p: { id: string; accountId: string; modelId: string; vid: string; pid: string; createdAt: Date }): Promise<void> {
  await db`
    insert into marketplace_products (id, account_id, model_id, vid, pid, created_at)
    values (${p.id}, ${p.accountId}, ${p.modelId}, ${p.vid}, ${p.pid}, ${p.createdAt})`;
}

export async function countOfAccount(db: Db, accountId: string): Promise<number> {
  const [{ n }] = await db<{ n: number }[]>`select count(*)::int as n from marketplace_products where account_id = ${accountId}`;
  return n;
}

export async function productById(db: Db, id: string): Promise<ProductRow | undefined> {
  const [row] = await db<ProductRow[]>`select * from marketplace_products where id = ${id}`;
  return row;
}

export async function deleteProduct(db: Db, id: string): Promise<void> {
  await db`delete from marketplace_products where id = ${id}`;
}

/** Newest first; `limit + 1` rows so the caller knows whether a next page exists. */
export async function listProducts(db: Db, f: ProductFilter, limit: number): Promise<ProductRow[]> {
  const cond = [
    f.accountId !== undefined ? db`account_id = ${f.accountId}` : undefined,
    f.state !== undefined ? db`state = ${f.state}` : undefined,
    f.modelId !== undefined ? db`model_id = ${f.modelId}` : undefined,
    f.vid !== undefined ? db`vid = ${f.vid}` : undefined,
    f.pid !== undefined ? db`pid = ${f.pid}` : undefined,
    // strpos, not LIKE: the text needs no escaping of % and _
    f.q !== undefined ? db`(strpos(lower(name), lower(${f.q})) > 0 or strpos(lower(description), lower(${f.q})) > 0)` : undefined,
    f.after !== undefined ? db`(created_at, id) < (${f.after.createdAt}, ${f.after.id})` : undefined,
  ].filter((c) => c !== undefined);
  const where = cond.reduce((acc, c, i) => (i === 0 ? db`where ${c}` : db`${acc} and ${c}`), db``);
  return db<ProductRow[]>`
    select * from marketplace_products ${where}
    order by created_at desc, id desc limit ${limit + 1}`;
}
