import { defineDomain } from '../gateway.js';
import type { Principal } from '../http/auth/principal.js';
import { unauthenticated } from '../lib/errors.js';
import { parseAccountIdHeader } from '../http/auth/accountHeader.js';
import { Assignments } from './assignments.js';
import { IamCache } from './cache.js';
import { Capabilities } from './capabilities.js';
import { StaticCredentials, staticCredentialKind } from './credentials.js';
import { LastUsed } from './lastUsed.js';
import { PrincipalRoles } from './roles.js';
import { iamRoutes } from './routes.js';
import { Scps } from './scps.js';
import { StsSessions } from './sessions.js';
import { STS_SCHEME } from './schemas.js';
import { SvcAuthenticator } from './svcAuth.js';

/** IAM's services, one per concern; they share the node cache of the hot path. */
export interface IamServices {
  cache: IamCache;
  lastUsed: LastUsed;
  credentials: StaticCredentials;
  sessions: StsSessions;
  svc: SvcAuthenticator;
  roles: PrincipalRoles;
  assignments: Assignments;
  capabilities: Capabilities;
  scps: Scps;
}

declare module '../gateway.js' {
  interface Services {
    iam: IamServices;
  }
}

/** What tests of IAM trigger or observe below its public interface (RunningGateway.testHooks.iam). */
export interface IamTestHooks {
  /** puts an entry in this node's cache (a probe an invalidation must drop; `<map>:<key>` is its key) */
  cacheSet(map: string, key: string, value: unknown): void;
  /** this node's cached entry, if any, without loading it (the hot path's reads leave no other trace) */
  cachePeek(map: string, key: string): unknown;
  /** drops `<map>:<key>` entries on every node; `wait`: until every live node acknowledged */
  invalidate(keys: string[], opts: { wait: boolean }): Promise<void>;
  /** this node's cache heartbeat now (it drops its caches when the generation moved) */
  cacheBeat(): Promise<void>;
  /** one run of the hourly cleanup job now; returns how many expired temporary credentials it deleted */
  cleanupExpiredSessions(): Promise<number>;
  /** the capability layer alone for this principal (the HTTP hook runs role and SCP layers first) */
  checkCapability(principal: Principal, action: string, capability: string | undefined): void | Promise<void>;
}

declare module '../gateway.js' {
  interface TestHooks {
    iam: IamTestHooks;
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
    const cache = new IamCache(gw);
    // live for acknowledged invalidations before the HTTP server accepts requests
    await cache.register();
    const lastUsed = new LastUsed(gw.sql, gw.log);
    const roles = new PrincipalRoles(gw.sql, cache, gw.log);
    const assignments = new Assignments(gw.sql, cache, accounts);
    const iam: IamServices = {
      cache,
      lastUsed,
      roles,
      assignments,
      credentials: new StaticCredentials(gw.sql, gw.actors, gw.clock, cache, lastUsed, gw.log),
      sessions: new StsSessions(gw.sql, gw.clock, cache, lastUsed, assignments, gw.log),
      svc: new SvcAuthenticator(gw.sql, gw.clock, cache, roles, assignments, lastUsed),
      capabilities: new Capabilities(gw.sql, cache, accounts),
      scps: new Scps(gw.sql, cache, accounts, quotaGate, gw.log),
    };

    // thin adapters from HTTP requests to the services
    gw.auth.registerScheme('SVC', (credentials, request) => {
      const token = request.headers['x-session-token'];
      return iam.svc.authenticate(credentials, typeof token === 'string' ? token : undefined);
    });

    // STS routes: an identity-center user's JWT only (anything else is the spec's 400, before roles)
    gw.auth.registerAuthenticator(STS_SCHEME, {
      describe: 'Authorization: Bearer <JWT of an idc-* realm>',
      openapi: { type: 'http', scheme: 'bearer', bearerFormat: 'JWT', description: 'OIDC access token of an identity-center (idc-*) user' },
      authenticate: async (request) => {
        const principal = await gw.auth.authenticate(request);
        if (principal) iam.sessions.requireIdcJwt(principal);
        return principal;
      },
    });

    gw.auth.addResolver(async (principal, request) => {
      if (principal.via !== 'jwt') return principal;
      // acc-* users: remember the roles the identity provider asserted (a write only on change).
      if (principal.realmKind === 'acc' && principal.accountId) {
        await roles.record(principal.accountId, principal.sub, principal.roles);
        return principal;
      }
      // idc-* users reach an account through an assignment named by X-Account-Id.
      if (principal.realmKind === 'idc') {
        const accountId = parseAccountIdHeader(request.headers['x-account-id']);
        const assigned = accountId && (await assignments.roles(principal.realm, principal.sub, accountId));
        return assigned ? { ...principal, accountId, roles: assigned } : { ...principal, accountId: undefined, roles: [] };
      }
      return principal;
    });

    gw.auth.addLayer({ name: 'scp', check: (principal, route, request) => iam.scps.check(principal, route.action, request.url.split('?')[0]) });
    gw.auth.addLayer({ name: 'capability', check: (principal, route) => iam.capabilities.check(principal, route.action, route.capability) });

    gw.jobs.define(CLEANUP_JOB, async () => {
      await iam.sessions.cleanupExpired();
    }, { schedule: '0 * * * *', retryLimit: 3 });
    const testHooks: IamTestHooks = {
      cacheSet: (map, key, value) => cache.set(map, key, value),
      cachePeek: (map, key) => cache.peek(map, key),
      invalidate: (keys, opts) => cache.invalidate(keys, opts),
      cacheBeat: () => cache.beat(),
      cleanupExpiredSessions: () => iam.sessions.cleanupExpired(),
      checkCapability: (principal, action, capability) => iam.capabilities.check(principal, action, capability),
    };
    return { iam, testHooks };
  },
  async routes(app, gw, { iam }) {
    await iamRoutes(app, gw, iam);
  },
  async start(_gw, { iam }) {
    await iam.cache.start();
    iam.lastUsed.start();
  },
  async stop(_gw, { iam }) {
    await iam.lastUsed.stop();
    await iam.cache.stop();
  },
});
