import type { FastifyInstance, RouteOptions } from 'fastify';

/**
 * The edge (spec document 2, Endpoints, Versioning): internal routes live under /api/v1; the
 * edge publishes groups under capability prefixes. Things, state changes and state-change
 * subscriptions are under /provisioning/v1: the feed domain serves the latter two (and the full
 * sync GET /provisioning/v1/things) there itself; the things group's lifecycle routes, wherever
 * a domain registers them under /api/v1/things/, are published again under
 * /provisioning/v1/things/ with the same schema, access and handler. The raw /api/v1 export
 * stays (a declared pending migration).
 */
export const EDGE_GROUPS = [
  {
    from: '/api/v1/things/',
    to: '/provisioning/v1/things/',
    /**
     * the things group of the spec's factory surface: read the state and the factory eligibility,
     * resolve, and drive the lifecycle (provision and its result, handover, activate, deactivate,
     * annihilate); not registration, revocation, access codes or claim groups
     */
    actions: /^factory:Thing:(ReadState|ReadFactoryEligibility|List|Provision|Handover|Activate|Deactivate|Annihilate)$/,
  },
] as const;

const ALIAS = Symbol('edge alias');

/** Registers each matching route a second time under its edge path, in the same plugin scope. */
export function installEdge(app: FastifyInstance): void {
  app.addHook('onRoute', function (this: FastifyInstance, route: RouteOptions & { [ALIAS]?: true }) {
    // HEAD: Fastify adds it to each GET, the alias's too
    if (route[ALIAS] || route.method === 'HEAD') return;
    const access = route.config?.auth;
    const action = typeof access === 'object' && 'action' in access ? access.action : undefined;
    if (!action) return;
    for (const g of EDGE_GROUPS) {
      if (!route.url.startsWith(g.from) || !g.actions.test(action)) continue;
      const { path: _path, prefix: _prefix, ...rest } = route as RouteOptions & { path?: string; prefix?: string };
      this.route({ ...rest, url: g.to + route.url.slice(g.from.length), [ALIAS]: true } as RouteOptions);
    }
  });
}
