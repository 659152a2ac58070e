import { defineDomain } from '../gateway.js';
import { marketplaceProductKind } from './kinds.js';
import { ProductService } from './products.js';
import { marketplaceRoutes } from './routes.js';

declare module '../gateway.js' {
  interface Services {
    /** marketplace domain: products (models offered with their bundles) */
    marketplace: ProductService;
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
    return { marketplace: new ProductService(gw, models) };
  },
  async routes(app, _gw, { marketplace }) {
    await marketplaceRoutes(app, marketplace);
  },
});
