import type { DomainModule } from '../gateway.js';

/** Domain module of src/notifications/ (see src/gateway.ts DomainModule): services, routes, workers. */
export const notificationsDomain: DomainModule = {
  name: 'notifications',
};
