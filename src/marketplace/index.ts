import { defineDomain } from '../gateway.js';
import { marketplaceProductKind } from './kinds.js';
import { ProductService } from './products.js';
import type { ProductCreate, ProductView } from './schemas.js';
import { marketplaceRoutes } from './routes.js';

declare module '../gateway.js' {
  interface Services {
    /** marketplace domain: products (models offered with their bundles) */
    marketplace: ProductService;
  }
}

/** What tests of the marketplace set up below its public interface (RunningGateway.testHooks.marketplace). */
export interface MarketplaceTestHooks {
  /** a draft product of an account that lacks publish_marketplace (the HTTP create needs it; the capability table tests publish alone) */
  createDraft(accountId: string, input: ProductCreate): Promise<ProductView>;
}

declare module '../gateway.js' {
  interface TestHooks {
    marketplace: MarketplaceTestHooks;
  }
}

/**
 * Domain module of src/marketplace/: products that accounts holding publish_marketplace publish.
 * It reaches trust's models through the `models` service, so it comes after trust.
 */
export const marketplaceDomain = defineDomain({
  name: 'marketplace',
  provides: ['marketplace'],
  requires: ['models'],
  kinds: [marketplaceProductKind],
  init(gw, { models }) {
    const marketplace = new ProductService(gw, models);
    const testHooks: MarketplaceTestHooks = { createDraft: (accountId, input) => marketplace.create(accountId, input) };
    return { marketplace, testHooks };
  },
  async routes(app, _gw, { marketplace }) {
    await marketplaceRoutes(app, marketplace);
  },
});
