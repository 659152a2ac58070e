import { z } from 'zod';
import type { ZodApp } from '../gateway.js';
import { accountOf, principalOf } from '../http/auth/plugin.js';
import { PLATFORM_ROLES } from '../http/auth/principal.js';
import type { ProductService } from './products.js';
import {
  ownListQuery, productCreateSchema, productPageSchema, productParams, productPatchSchema, productSchema, publishedListQuery,
} from './schemas.js';

/** Writes: an account's admins and operators, and the account must hold publish_marketplace. */
const WRITE = ['admin', 'operator'] as const;
/** Reads are never capability-gated: any user of an account, and platform staff. */
const READ = ['admin', 'operator', 'viewer', ...PLATFORM_ROLES] as const;
const OWN_READ = ['admin', 'operator', 'viewer'] as const;
const tags = ['marketplace'];
const BASE = '/api/v1/marketplace/products';
const problem = z.object({ type: z.string(), title: z.string(), status: z.number(), detail: z.string() }).passthrough();
const write = (verb: string) => ({ auth: { action: `marketplace:Product:${verb}`, roles: WRITE, capability: 'publish_marketplace' } });
const read = (verb: string, roles: readonly string[] = READ) => ({ auth: { action: `marketplace:Product:${verb}`, roles } });

/** Marketplace products (issue 20, item 1). */
export async function marketplaceRoutes(app: ZodApp, products: ProductService): Promise<void> {
  app.post(BASE, {
    config: write('Create'),
    schema: {
      tags, summary: "Create a DRAFT product of one of your models with some of its bundles (404 unknown model or not your account's; 400 a bundle the model lacks)",
      body: productCreateSchema, response: { 201: productSchema, 404: problem },
    },
  }, async (request, reply) => reply.code(201).send(await products.create(accountOf(request), request.body)));

  app.get(BASE, {
    config: read('List'),
    schema: {
      tags, summary: 'PUBLISHED products of every account, newest first (keyset pages; filters model_id, vid, pid, account_id, q)',
      querystring: publishedListQuery, response: { 200: productPageSchema },
    },
  }, async (request) => products.listPublished(request.query));

  app.get(`${BASE}/mine`, {
    config: read('ListOwn', OWN_READ),
    schema: {
      tags, summary: "Your account's products in any state, newest first (keyset pages; filters state, model_id, vid, pid, q)",
      querystring: ownListQuery, response: { 200: productPageSchema },
    },
  }, async (request) => products.listOwn(accountOf(request), request.query));

  app.get(`${BASE}/:id`, {
    config: read('Read'),
    schema: { tags, summary: "A PUBLISHED product, or one of your account's in any state (404 otherwise)", params: productParams, response: { 200: productSchema } },
  }, async (request) => products.read(principalOf(request).accountId, request.params.id));

  app.patch(`${BASE}/:id`, {
    config: write('Update'),
    schema: {
      tags, summary: 'Change name, description, version or bundles; on a PUBLISHED product a new release at once (version greater than the published one, default the next patch; 409 otherwise)',
      params: productParams, body: productPatchSchema, response: { 200: productSchema },
    },
  }, async (request) => products.update(accountOf(request), request.params.id, request.body));

  app.post(`${BASE}/:id/publish`, {
    config: write('Publish'),
    schema: {
      tags, summary: 'DRAFT or UNPUBLISHED to PUBLISHED (409 already published, no bundle, or changed since the last publication without a greater version)',
      params: productParams, response: { 200: productSchema },
    },
  }, async (request) => products.publish(accountOf(request), request.params.id));

  app.post(`${BASE}/:id/unpublish`, {
    config: write('Unpublish'),
    schema: { tags, summary: 'PUBLISHED to UNPUBLISHED: hidden from other accounts (409 when not published)', params: productParams, response: { 200: productSchema } },
  }, async (request) => products.unpublish(accountOf(request), request.params.id));

  app.delete(`${BASE}/:id`, {
    config: write('Delete'),
    schema: { tags, summary: 'Delete a never-published DRAFT (409 once it was published: unpublish it instead)', params: productParams, response: { 204: z.null().describe('deleted') } },
  }, async (request, reply) => {
    await products.delete(accountOf(request), request.params.id);
    return reply.code(204).send(null);
  });
}
