import type { DomainModule } from '../gateway.js';

/** Domain module of src/quotas/ (see src/gateway.ts DomainModule): services, routes, workers. */
export const quotasDomain: DomainModule = {
  name: 'quotas',
};
