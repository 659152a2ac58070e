import type { DomainModule } from './gateway.js';
import { accountsDomain } from './iam/accounts.js';
import { brokerDomain } from './broker/index.js';

/**
 * Every domain of the gateway, in start order (a domain's `init` may use the services of the ones
 * before it). Stopped in reverse order.
 */
export const domains: DomainModule[] = [accountsDomain, brokerDomain];
