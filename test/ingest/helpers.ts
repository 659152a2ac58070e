import crypto from 'node:crypto';
import { createAccount, type TestAccount } from '../helpers/accounts.js';
import type { TestGateway, HttpResponse } from '../helpers/gateway.js';

export const P = '/wms-ingest/v1';

export interface Partner extends TestAccount {
  warehouse: string;
}

/** A partner account with one warehouse open to all its users. */
export async function createPartner(gw: TestGateway, warehouse = 'WH-1'): Promise<Partner> {
  const account = await createAccount(gw);
  const res = await gw.http.put(`${P}/warehouses/${warehouse}`, { name: `warehouse ${warehouse}` }, { token: account.admin });
  if (res.status !== 201) throw new Error(`warehouse: ${res.status} ${res.text}`);
  return { ...account, warehouse };
}

export const correlation = () => `c-${crypto.randomBytes(8).toString('hex')}`;

export function product(n: number, over: Record<string, unknown> = {}): Record<string, unknown> {
  return { source_id: `P-${n}`, source_version: 1, sku: `sku-${n}`, uom: 'EA', ...over };
}

export function stock(n: number, over: Record<string, unknown> = {}): Record<string, unknown> {
  return { source_id: `S-${n}`, source_version: 1, sku: `sku-${n}`, location: 'A-01-01', quantity: 10, ...over };
}

export function envelope(p: Partner, items: unknown[], over: Record<string, unknown> = {}): Record<string, unknown> {
  return { partner_id: p.id, correlation_id: correlation(), mode: 'DELTA', warehouse_id: p.warehouse, items, ...over };
}

export function batch(gw: TestGateway, p: Partner, resource: 'products' | 'stock', body: unknown, token = p.operator): Promise<HttpResponse> {
  return gw.http.post(`${P}/${resource}/batch`, body, { token });
}
