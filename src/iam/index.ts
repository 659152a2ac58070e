import type { DomainModule } from '../gateway.js';

/** Domain module of src/iam/ (see src/gateway.ts DomainModule): services, routes, workers. */
export const iamDomain: DomainModule = {
  name: 'iam',
};
