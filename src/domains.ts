import type { DomainModule } from './gateway.js';
import { accountsDomain } from './iam/accounts.js';
import { iamDomain } from './iam/index.js';
import { quotasDomain } from './quotas/index.js';
import { notificationsDomain } from './notifications/index.js';
import { trustDomain } from './trust/index.js';
import { brokerDomain } from './broker/index.js';

/**
 * Every domain of the gateway, in init/start order (a domain's `init` may use the services of the
 * ones before it; services of later domains are reached lazily through `gw.services`).
 * Stopped in reverse order.
 */
export const domains: DomainModule[] = [accountsDomain, iamDomain, quotasDomain, notificationsDomain, trustDomain, brokerDomain];
