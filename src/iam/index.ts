import { defineDomain } from '../gateway.js';
import { invalid } from '../lib/errors.js';
import { isUuid } from '../http/auth/principal.js';
import { iamRoutes } from './routes.js';
import { IamService, staticCredentialKind } from './service.js';

declare module '../gateway.js' {
  interface Services {
    iam: IamService;
  }
}

export const CLEANUP_JOB = 'iam.cleanup-expired-credentials';

/** Domain module of src/iam/: credentials, STS, SVC scheme, idc assignments, SCP and capability layers. */
export const iamDomain = defineDomain({
  name: 'iam',
  provides: ['iam'],
  requires: ['accounts', 'quotaGate'],
  kinds: [staticCredentialKind],
  async init(gw, { accounts, quotaGate }) {
    const iam = new IamService(gw, accounts, quotaGate);
    // live for acknowledged invalidations before the HTTP server accepts requests
    await iam.cache.register();

    gw.auth.registerScheme('SVC', (credentials, request) => iam.authenticateSvc(credentials, request));

    gw.auth.addResolver(async (principal, request) => {
      if (principal.via !== 'jwt') return principal;
      // acc-* users: remember the roles the identity provider asserted (a write only on change).
      if (principal.realmKind === 'acc' && principal.accountId) {
        await iam.recordAssertedRoles(principal.accountId, principal.sub, principal.roles);
        return principal;
      }
      // idc-* users reach an account through an assignment named by X-Account-Id.
      if (principal.realmKind === 'idc') {
        const header = request.headers['x-account-id'];
        if (typeof header !== 'string' || header === '') return { ...principal, accountId: undefined, roles: [] };
        if (!isUuid(header)) throw invalid(`X-Account-Id must be an account id (UUID); got ${JSON.stringify(header.slice(0, 64))}`);
        const accountId = header.toLowerCase();
        const roles = await iam.assignmentRoles(principal.realm, principal.sub, accountId);
        return roles ? { ...principal, accountId, roles } : { ...principal, accountId: undefined, roles: [] };
      }
      return principal;
    });

    gw.auth.addLayer({ name: 'scp', check: (principal, route, request) => iam.checkScp(principal, route, request) });
    gw.auth.addLayer({ name: 'capability', check: (principal, route) => iam.checkCapability(principal, route) });

    gw.jobs.define(CLEANUP_JOB, async () => {
      await iam.cleanupExpired();
    }, { schedule: '0 * * * *', retryLimit: 3 });
    return { iam };
  },
  async routes(app, gw, { iam }) {
    await iamRoutes(app, gw, iam);
  },
  async start(_gw, { iam }) {
    await iam.start();
  },
  async stop(_gw, { iam }) {
    await iam.stop();
  },
});
