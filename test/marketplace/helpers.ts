import { expect } from 'vitest';
import type { TestAccount } from '../helpers/accounts.js';
import type { TestGateway } from '../helpers/gateway.js';

export const PRODUCTS = '/api/v1/marketplace/products';

export const software = (name: string, version: string, kind: 'software' | 'driver' = 'software') =>
  ({ kind, name, version, url: `https://downloads.example.com/${name}-${version}.bin`, sha256: 'a'.repeat(64) });

let pid = 0x4000;

/** A model of the account (VID FFF2, a fresh PID) with the given bundles. */
export async function createModel(gw: TestGateway, account: TestAccount, bundles = [software('firmware', '2.0.0'), software('driver', '1.1.0', 'driver')]) {
  const res = await gw.http.post('/api/v1/models', { vid: 'FFF2', pid: (pid++).toString(16).toUpperCase(), name: 'market model', provisioning_method: 'none' }, { token: account.operator });
  if (res.status !== 201) throw new Error(`model create failed: ${res.status} ${res.text}`);
  if (bundles.length) {
    const patched = await gw.http.patch(`/api/v1/models/${res.body.id}`, { bundles }, { token: account.operator });
    if (patched.status !== 200) throw new Error(`model bundles failed: ${patched.status} ${patched.text}`);
  }
  return res.body as { id: string; vid: string; pid: string; descriptor: string };
}

/** A DRAFT product of the model (201 asserted). */
export async function createProduct(gw: TestGateway, account: TestAccount, modelId: string, body: Record<string, unknown> = {}) {
  const res = await gw.http.post(PRODUCTS, { model_id: modelId, name: 'Smart thermostat', bundles: [{ name: 'firmware', version: '2.0.0' }], ...body }, { token: account.operator });
  expect(res.status, res.text).toBe(201);
  return res.body as { id: string; version: string; state: string; [k: string]: unknown };
}

export const publish = (gw: TestGateway, token: string, id: string) => gw.http.post(`${PRODUCTS}/${id}/publish`, undefined, { token });
export const unpublish = (gw: TestGateway, token: string, id: string) => gw.http.post(`${PRODUCTS}/${id}/unpublish`, undefined, { token });
