import crypto from 'node:crypto';
import type { Gateway, Services } from '../gateway.js';
import { conflict, DomainError, invalid, notFound } from '../lib/errors.js';
import {
  whyNotLiveUpdatable, whyNotPublishable, type MarketplaceProductContext, type MarketplaceProductEvent, type ProductBundle, type ProductChanges,
} from '../../machines/marketplaceProduct.js';
import { marketplaceProductKind } from './kinds.js';
import * as repo from './repo.js';
import type { BundleRef, OwnListQuery, ProductCreate, ProductPatch, ProductView, PublishedListQuery } from './schemas.js';

/** What the marketplace needs of trust's models (the `models` service). */
export type ModelCatalog = Pick<Services['models'], 'get' | 'software'>;

const DEFAULT_VERSION = '1.0.0';

const iso = (d: Date | null) => (d ? d.toISOString() : null);

function present(r: repo.ProductRow): ProductView {
  return {
    id: r.id, account_id: r.account_id, model_id: r.model_id, descriptor: `${r.vid}:${r.pid}`, name: r.name, description: r.description,
    version: r.version, bundles: r.bundles, state: r.state as ProductView['state'], published_version: r.published_version,
    published_at: iso(r.published_at), unpublished_at: iso(r.unpublished_at), created_at: r.created_at.toISOString(),
    updated_at: (r.updated_at ?? r.created_at).toISOString(),
  };
}

function cursorOf(r: repo.ProductRow): string {
  return Buffer.from(JSON.stringify([r.created_at.toISOString(), r.id])).toString('base64url');
}

function readCursor(cursor: string): { createdAt: Date; id: string } {
  try {
    const v = JSON.parse(Buffer.from(cursor, 'base64url').toString('utf8')) as unknown;
    // exactly what cursorOf writes: a year Postgres cannot hold must not reach it
    if (Array.isArray(v) && v.length === 2 && typeof v[0] === 'string' && typeof v[1] === 'string'
      && /^[0-9a-f-]{36}$/.test(v[1]) && /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$/.test(v[0]) && !Number.isNaN(Date.parse(v[0]))) {
      return { createdAt: new Date(v[0]), id: v[1] };
    }
  } catch {
    // not ours
  }
  throw invalid('cursor is not a next_cursor of this list');
}

/** The model's bundles the refs name (copies); 400 naming the first ref that matches none or several. */
export function pickBundles(available: ProductBundle[], refs: BundleRef[]): ProductBundle[] {
  const seen = new Set<string>();
  return refs.map((ref) => {
    const label = `${ref.kind ? `${ref.kind} ` : ''}${ref.name}@${ref.version}`;
    if (seen.has(label)) throw invalid(`bundle ${label} is listed twice`);
    seen.add(label);
    const found = available.filter((b) => b.name === ref.name && b.version === ref.version && (!ref.kind || b.kind === ref.kind));
    if (found.length === 0) {
      const names = available.slice(0, 10).map((b) => `${b.kind} ${b.name}@${b.version}`).join(', ');
      throw invalid(`bundle ${label} is not a bundle of the model (its bundles: ${names || 'none'})`);
    }
    if (found.length > 1) throw invalid(`bundle ${ref.name}@${ref.version} names a software and a driver bundle of the model; send kind`);
    return { ...found[0] };
  });
}

/**
 * Marketplace products: an account's models offered with copies of their bundles. Every change
 * of a product is one event to its actor, taken under the actor's row lock (two publishes at once:
 * one transition, the other a 409). Reads need no capability: everyone sees PUBLISHED products,
 * an account its own in any state; anything else is 404.
 */
export class ProductService {
  constructor(private readonly gw: Pick<Gateway, 'sql' | 'actors' | 'clock' | 'config'>, private readonly models: ModelCatalog) {}

  /** The account's own (not imported) model with its bundles; 404 otherwise. */
  private async ownModel(accountId: string, modelId: string) {
    const missing = () => notFound(`model ${modelId} is not one of your account's models (imported models are published by their owner)`);
    let model: Awaited<ReturnType<ModelCatalog['get']>>;
    try {
      model = await this.models.get(accountId, modelId);
    } catch (err) {
      if (err instanceof DomainError && err.kind === 'not_found') throw missing();
      throw err;
    }
    if (model.imported || model.owner_account_id !== accountId) throw missing();
    const { bundles } = await this.models.software(accountId, modelId);
    return { model, bundles: bundles as ProductBundle[] };
  }

  async create(accountId: string, input: ProductCreate): Promise<ProductView> {
    const { model, bundles } = await this.ownModel(accountId, input.model_id);
    const picked = pickBundles(bundles, input.bundles ?? []);
    const id = crypto.randomUUID();
    const now = this.gw.clock.now();
    return this.gw.actors.run(async (uow) => {
      // one account's creates queue on its lock, so the cap holds under concurrency
      await uow.sql`select pg_advisory_xact_lock(hashtext(${`marketplace-products:${accountId}`}))`;
      const max = this.gw.config.MARKETPLACE_MAX_PRODUCTS;
      const n = await repo.countOfAccount(uow.sql, accountId);
      if (n >= max) throw conflict(`your account has ${n} products (at most ${max}); delete drafts you no longer need`, { type: 'too-many-products' });
      await repo.insertProduct(uow.sql, { id, accountId, modelId: model.id, vid: model.vid, pid: model.pid, createdAt: now });
      await uow.create(marketplaceProductKind, id, {
        id, accountId, modelId: model.id, name: input.name, description: input.description ?? '', version: input.version ?? DEFAULT_VERSION,
        bundles: picked, at: now.toISOString(),
      });
      return present((await repo.productById(uow.sql, id))!);
    });
  }

  /** A PUBLISHED product, or one of the caller's account in any state; 404 otherwise. */
  async read(accountId: string | undefined, id: string): Promise<ProductView> {
    const row = await repo.productById(this.gw.sql, id);
    if (!row || (row.state !== 'PUBLISHED' && row.account_id !== accountId)) throw notFound(`product ${id} not found`);
    return present(row);
  }

  /** The product of the caller's account (writes); 404 for other accounts' products, published or not. */
  private async own(accountId: string, id: string): Promise<repo.ProductRow> {
    const row = await repo.productById(this.gw.sql, id);
    if (!row || row.account_id !== accountId) throw notFound(`product ${id} not found in your account`);
    return row;
  }

  async update(accountId: string, id: string, patch: ProductPatch): Promise<ProductView> {
    const row = await this.own(accountId, id);
    const { bundles, ...rest } = patch;
    const changes: ProductChanges = Object.fromEntries(Object.entries(rest).filter(([, v]) => v !== undefined));
    if (bundles) changes.bundles = pickBundles((await this.ownModel(accountId, row.model_id)).bundles, bundles);
    return this.step(accountId, id, { type: 'UPDATE', at: this.now(), changes });
  }

  publish(accountId: string, id: string): Promise<ProductView> {
    return this.step(accountId, id, { type: 'PUBLISH', at: this.now() });
  }

  unpublish(accountId: string, id: string): Promise<ProductView> {
    return this.step(accountId, id, { type: 'UNPUBLISH', at: this.now() });
  }

  /** Deletes a never-published draft (its actor ends DELETED; the row goes). */
  async delete(accountId: string, id: string): Promise<void> {
    await this.own(accountId, id);
    await this.gw.actors.run(async (uow) => {
      const event = { type: 'DELETE', at: this.now() } as const;
      const result = await uow.trySend(marketplaceProductKind, id, event);
      if ('refused' in result) throw refusal(id, result.state, result.snapshot.context, event);
      await repo.deleteProduct(uow.sql, id);
    });
  }

  async listPublished(q: PublishedListQuery) {
    return this.page({ state: 'PUBLISHED', accountId: q.account_id, modelId: q.model_id, vid: q.vid?.toUpperCase(), pid: q.pid?.toUpperCase(), q: q.q }, q.limit, q.cursor);
  }

  async listOwn(accountId: string, q: OwnListQuery) {
    return this.page({ accountId, state: q.state, modelId: q.model_id, vid: q.vid?.toUpperCase(), pid: q.pid?.toUpperCase(), q: q.q }, q.limit, q.cursor);
  }

  private async page(filter: repo.ProductFilter, limit: number, cursor: string | undefined) {
    const rows = await repo.listProducts(this.gw.sql, { ...filter, after: cursor === undefined ? undefined : readCursor(cursor) }, limit);
    const page = rows.slice(0, limit);
    return { items: page.map(present), next_cursor: rows.length > limit ? cursorOf(page[page.length - 1]) : null };
  }

  private now(): string {
    return this.gw.clock.now().toISOString();
  }

  /** One event to the product's actor; a refusal is a 409 that says why (the machine's own reasons). */
  private async step(accountId: string, id: string, event: MarketplaceProductEvent): Promise<ProductView> {
    await this.own(accountId, id);
    return this.gw.actors.run(async (uow) => {
      const result = await uow.trySend(marketplaceProductKind, id, event);
      if ('refused' in result) throw refusal(id, result.state, result.snapshot.context, event);
      // the row as this transition left it (a later change may commit before a read after it)
      return present((await repo.productById(uow.sql, id))!);
    });
  }
}

/** A refused event as a domain error: 409 with the machine's own reason; 404 for a deleted product. */
function refusal(id: string, state: string, c: MarketplaceProductContext, event: MarketplaceProductEvent): DomainError {
  if (state === 'DELETED') return notFound(`product ${id} not found in your account`);
  const extra = { state, event: event.type };
  const why = event.type === 'PUBLISH' && state !== 'PUBLISHED' ? whyNotPublishable(c)
    : event.type === 'UPDATE' && state === 'PUBLISHED' ? whyNotLiveUpdatable(c, event.changes)
      : undefined;
  if (why) return conflict(`product ${id} cannot be ${event.type === 'PUBLISH' ? 'published' : 'updated'}: ${why}`, { type: 'product-change-refused', extra });
  const hint = event.type === 'DELETE' ? ' (only a never-published draft is deleted; unpublish it instead)' : '';
  return conflict(`product ${id} is ${state}: ${event.type} is not accepted in that state${hint}`, { type: 'product-state-conflict', extra });
}
