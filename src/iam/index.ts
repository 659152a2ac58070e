import type { DomainModule, Gateway, ZodApp } from '../gateway.js';
import { badRequest } from '../http/problem.js';
import { isUuid } from '../http/auth/principal.js';
import { iamRoutes } from './routes.js';
import { IamService } from './service.js';

declare module '../gateway.js' {
  interface Services {
    iam: IamService;
  }
}

export const CLEANUP_JOB = 'iam.cleanup-expired-credentials';

/** Domain module of src/iam/: credentials, STS, SVC scheme, idc assignments, SCP and capability layers. */
export const iamDomain: DomainModule = {
  name: 'iam',
  async init(gw: Gateway) {
    const iam = new IamService(gw);
    gw.services.iam = iam;
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
        if (!isUuid(header)) throw badRequest(`X-Account-Id must be an account id (UUID); got ${JSON.stringify(header.slice(0, 64))}`);
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
  },
  async routes(app: ZodApp, gw: Gateway) {
    await iamRoutes(app, gw, gw.services.iam!);
  },
  async start(gw: Gateway) {
    await gw.services.iam!.start();
  },
  async stop(gw: Gateway) {
    await gw.services.iam!.stop();
  },
};
