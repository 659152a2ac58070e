import type { ActorKind } from '../actors/store.js';
import { marketplaceProductMachine } from '../../machines/marketplaceProduct.js';

/** The product actor; its row's lifecycle and content columns are the projection of its snapshot. */
export const marketplaceProductKind: ActorKind<typeof marketplaceProductMachine> = {
  type: 'marketplaceProduct',
  machine: marketplaceProductMachine,
  accountOf: (c) => c.accountId,
  projection: {
    table: 'marketplace_products',
    columns: ['state', 'name', 'description', 'version', 'bundles', 'published_version', 'published_at', 'unpublished_at', 'updated_at'],
    project: (s, state) => ({
      state, name: s.context.name, description: s.context.description, version: s.context.version,
      // postgres.js serializes a jsonb parameter itself
      bundles: s.context.bundles, published_version: s.context.publishedVersion,
      published_at: s.context.publishedAt, unpublished_at: s.context.unpublishedAt, updated_at: s.context.updatedAt,
    }),
  },
};
