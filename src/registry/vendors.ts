import type { Sql } from '../db/client.js';
import { defineDomain } from '../gateway.js';
import { iso } from '../lib/encoding.js';
import { internal, notFound } from '../lib/errors.js';
import * as repo from './repo.js';

export interface VendorView { account_id: string; vid: string; created_at: string }
const view = (r: repo.VendorRow): VendorView => ({ account_id: r.account_id, vid: r.vid, created_at: iso(r.created_at) });

/** The accounts' platform VID namespaces (one VID per account, assigned once from the pool); trust's ModelService binds models to them. */
export class Vendors {
  constructor(private readonly sql: Sql) {}

  /** Assigns the account's VID, or answers the one it has (`created` false). */
  async assign(accountId: string, by: string): Promise<{ vendor: VendorView; created: boolean }> {
    const existing = await repo.vendorOf(this.sql, accountId);
    if (existing) return { vendor: view(existing), created: false };
    const row = await repo.assignVendor(this.sql, accountId, by);
    if (row) return { vendor: view(row), created: true };
    const raced = await repo.vendorOf(this.sql, accountId);
    if (!raced) throw internal(`vendor namespace of ${accountId} vanished`);
    return { vendor: view(raced), created: false };
  }

  async get(accountId: string): Promise<VendorView> {
    const row = await repo.vendorOf(this.sql, accountId);
    if (!row) throw notFound('your account has no vendor namespace yet: POST /api/v1/vendors assigns one');
    return view(row);
  }

  async vidOf(accountId: string): Promise<string | undefined> {
    return (await repo.vendorOf(this.sql, accountId))?.vid;
  }

  async holderOf(vid: string): Promise<string | undefined> {
    return (await repo.vendorByVid(this.sql, vid))?.account_id;
  }
}

declare module '../gateway.js' {
  interface Services {
    vendorNamespaces: Vendors;
  }
}

/**
 * The registry's VID namespaces as a domain of their own, started before trust: trust's models
 * need them at construction and the rest of the registry needs trust's models, so neither is
 * handed to the other after construction. The table stays the registry's (src/registry/).
 */
export const vendorsDomain = defineDomain({
  name: 'vendors',
  provides: ['vendorNamespaces'],
  init(gw) {
    return { vendorNamespaces: new Vendors(gw.sql) };
  },
});
