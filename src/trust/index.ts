import type { DomainModule } from '../gateway.js';

/** Domain module of src/trust/ (see src/gateway.ts DomainModule): services, routes, workers. */
export const trustDomain: DomainModule = {
  name: 'trust',
};
