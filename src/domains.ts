import type { DomainModule } from './gateway.js';
import { accountsDomain } from './iam/accounts.js';
import { iamDomain } from './iam/index.js';
import { quotasDomain } from './quotas/index.js';
import { notificationsDomain } from './notifications/index.js';
import { trustDomain } from './trust/index.js';
import { brokerDomain, deviceSessionsDomain } from './broker/index.js';
import { factoryDomain } from './factory/index.js';
import { registryDomain } from './registry/index.js';
import { vendorsDomain } from './registry/vendors.js';
import { blacklistDomain } from './blacklist/index.js';
import { ingestDomain } from './ingest/index.js';
import { feedDomain } from './feed/index.js';
import { marketplaceDomain } from './marketplace/index.js';
import { consoleDomain } from './console/index.js';
import { otaDomain } from './ota/index.js';
import { bridgesDomain } from './bridges/index.js';

/**
 * Every domain of the gateway, in init/start order. Each declares the services it `provides` and
 * `requires`; a requirement must be provided by a domain before it (src/wiring.ts checks this
 * at start-up and names what to move). Stopped in reverse order.
 */
export const domains: DomainModule[] = [
  accountsDomain, quotasDomain, iamDomain, deviceSessionsDomain, blacklistDomain, vendorsDomain, trustDomain, notificationsDomain, registryDomain, marketplaceDomain, factoryDomain, feedDomain, ingestDomain, brokerDomain, consoleDomain, otaDomain, bridgesDomain,
];
