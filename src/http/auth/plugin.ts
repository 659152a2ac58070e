import crypto from 'node:crypto';
import type { FastifyInstance, FastifyRequest } from 'fastify';
import { forbidden, unauthorized } from '../problem.js';
import type { Principal } from './principal.js';
import type { JwtVerifier } from './jwt.js';
import { hashMatches, sha256 } from '../../lib/encoding.js';

/** What a route declares: its authorization action, the roles that may call it, its capability. */
export interface RouteAuth {
  action: string;
  roles: readonly string[];
  capability?: string;
}
/**
 * Callers that are not users (devices, internal services): one of the named request
 * authenticators must recognise the caller; no roles. A principal bound to a thing must match the
 * route's `{thingId}` parameter.
 */
export interface SchemeAccess {
  schemes: readonly string[];
}
/** `public`: no authentication by the hook. */
export type RouteAccess = RouteAuth | SchemeAccess | 'public';

declare module 'fastify' {
  interface FastifyContextConfig {
    auth?: RouteAccess;
  }
  interface FastifyRequest {
    principal?: Principal;
  }
}

/** `Authorization: <scheme> <credentials>` handler, e.g. IAM's `SVC`. Throws 401 problems. */
export type SchemeHandler = (credentials: string, request: FastifyRequest) => Promise<Principal>;
/**
 * Recognises a caller from the request itself (a TLS client certificate, a header other than a
 * user scheme): undefined when the request carries no such credential; throws 401/403 problems
 * (or domain errors) when it carries a bad one.
 */
export interface RequestAuthenticator {
  /** how to present the credential, for the 401 detail */
  describe: string;
  /** its OpenAPI security scheme (components.securitySchemes, under the authenticator's name) */
  openapi: Record<string, unknown>;
  authenticate(request: FastifyRequest): Promise<Principal | undefined>;
}

/**
 * A scheme carried by headers other than Authorization (SVC-HMAC-SHA256 signed requests). It
 * runs after the body is parsed (preValidation), since a signature may cover the body bytes.
 */
export interface HeaderScheme {
  name: string;
  detect(request: FastifyRequest): boolean;
  handler(request: FastifyRequest): Promise<Principal>;
}
/** Runs after authentication: completes or checks the principal (account existence, idc assignment). */
export type PrincipalResolver = (principal: Principal, request: FastifyRequest) => Promise<Principal>;
/** An authorization layer after the role check (SCP deny, capability); throws a 403 problem. */
export interface AuthzLayer {
  name: string;
  check(principal: Principal, route: RouteAuth, request: FastifyRequest): Promise<void> | void;
}

/**
 * Authentication and the one authorization hook. Domains plug in: IAM registers the `SVC` scheme,
 * the idc resolver and the SCP and capability layers; routes only declare `config.auth`.
 */
export class Auth {
  private readonly schemes = new Map<string, SchemeHandler>();
  private readonly resolvers: PrincipalResolver[] = [];
  private readonly layers: AuthzLayer[] = [];
  private readonly authenticators = new Map<string, RequestAuthenticator>();
  /**
   * What internal endpoints expect in `X-Internal-Secret`: INTERNAL_API_SECRET, or the secret the
   * first start generated in CERTS_DIR (src/pki/internalSecret.ts); a random one of this process
   * when none is given (route tests).
   */
  readonly internalSecret: string;
  private readonly internalSecretHash: Buffer;
  private readonly headerSchemes: HeaderScheme[] = [];
  /** the actions routes declare (collected as they are added) */
  private readonly routeActions = new Set<string>();

  constructor(private readonly jwt: JwtVerifier, options: { internalSecret?: string } = {}) {
    this.registerScheme('bearer', (token) => this.jwt.verify(token));
    this.internalSecret = options.internalSecret ?? crypto.randomBytes(32).toString('base64url');
    this.internalSecretHash = sha256(this.internalSecret);
    this.registerAuthenticator('internal', {
      describe: 'X-Internal-Secret: <INTERNAL_API_SECRET, or the contents of internal-api.secret in CERTS_DIR>',
      openapi: { type: 'apiKey', in: 'header', name: 'X-Internal-Secret', description: 'INTERNAL_API_SECRET, or the secret generated at first start in CERTS_DIR/internal-api.secret (internal callers: the broker, the notification authorization call)' },
      authenticate: async (request) => {
        const presented = request.headers['x-internal-secret'];
        if (typeof presented === 'string' && hashMatches(presented, this.internalSecretHash)) return { via: 'internal', sub: 'internal', realm: 'internal', realmKind: 'internal', roles: [] };
        if (presented !== undefined) throw unauthorized('X-Internal-Secret does not match INTERNAL_API_SECRET (or CERTS_DIR/internal-api.secret)', { guess: { scheme: 'internal', kind: 'wrong-secret' } });
        return undefined;
      },
    });
  }

  /** Bearer tokens held verified (src/http/auth/tokenCache.ts): tests and diagnostics. */
  get cachedBearerTokens(): number {
    return this.jwt.cachedTokens;
  }

  /** A request authenticator that routes name in `{ schemes: [...] }` (e.g. the trust domain's device credentials). */
  registerAuthenticator(name: string, authenticator: RequestAuthenticator): void {
    this.authenticators.set(name, authenticator);
  }

  /** The request authenticators as OpenAPI security schemes (register them before the app is built). */
  securitySchemes(): Record<string, Record<string, unknown>> {
    return Object.fromEntries([...this.authenticators].map(([name, a]) => [name, a.openapi]));
  }

  /** The first scheme that recognises the caller; 401 naming every scheme when none does. */
  private async authenticateBy(schemes: readonly string[], request: FastifyRequest): Promise<Principal> {
    for (const name of schemes) {
      const principal = await this.authenticators.get(name)!.authenticate(request);
      if (principal) return principal;
    }
    throw unauthorized(`authentication required: ${schemes.map((n) => this.authenticators.get(n)!.describe).join(', or ')}`);
  }

  registerScheme(name: string, handler: SchemeHandler): void {
    this.schemes.set(name.toLowerCase(), handler);
  }
  registerHeaderScheme(name: string, detect: HeaderScheme['detect'], handler: HeaderScheme['handler']): void {
    this.headerSchemes.push({ name, detect, handler });
  }
  addResolver(resolver: PrincipalResolver): void {
    this.resolvers.push(resolver);
  }
  addLayer(layer: AuthzLayer): void {
    this.layers.push(layer);
  }

  /**
   * The caller, or undefined when the request carries no credential. A request with signature
   * headers is judged by its signature alone: a bad one is a 401 even beside a valid bearer token
   * (an Authorization header must not rescue it), and a good one is the service.
   */
  async authenticate(request: FastifyRequest): Promise<Principal | undefined> {
    const signed = this.headerSchemeOf(request);
    if (signed) return this.resolve(await signed.handler(request), request);
    const header = request.headers.authorization ?? webSocketBearer(request);
    if (!header) return undefined;
    const space = header.indexOf(' ');
    const scheme = (space > 0 ? header.slice(0, space) : header).toLowerCase();
    const credentials = space > 0 ? header.slice(space + 1).trim() : '';
    const handler = this.schemes.get(scheme);
    if (!handler) throw unauthorized(`unsupported Authorization scheme; use ${[...this.schemes.keys()].map((s) => (s === 'bearer' ? 'Bearer' : s.toUpperCase())).join(' or ')}`);
    if (!credentials) throw unauthorized(`Authorization header has no ${scheme} credentials`);
    return this.resolve(await handler(credentials, request), request);
  }

  private async resolve(principal: Principal, request: FastifyRequest): Promise<Principal> {
    for (const resolve of this.resolvers) principal = await resolve(principal, request);
    return principal;
  }

  /** The header scheme whose headers the request carries (whatever else it carries), if any. */
  private headerSchemeOf(request: FastifyRequest): HeaderScheme | undefined {
    return this.headerSchemes.find((s) => s.detect(request));
  }

  /** Whether some route declares this action (a factory-service policy names only such actions). */
  declares(action: string): boolean {
    return this.routeActions.has(action);
  }

  /**
   * A factory service by its policy, everyone else by role first (403 insufficient role); then
   * each layer in the order added (SCP, capability).
   */
  async authorize(principal: Principal, route: RouteAuth, request: FastifyRequest): Promise<void> {
    if (principal.via === 'factory-service') this.byPolicy(principal, route);
    else this.byRole(principal, route);
    for (const layer of this.layers) await layer.check(principal, route, request);
  }

  /** A factory service may call the actions its policy lists (route roles do not apply to it). */
  private byPolicy(principal: Principal, route: RouteAuth): void {
    const service = principal.factoryService;
    if (service?.allow.includes(route.action)) return;
    const id = service?.id ?? principal.sub;
    const which = service?.policy === 'custom' ? 'the policy an account admin set' : `the default policy of the ${service?.role} role`;
    throw forbidden(
      `insufficient permission: factory service ${id}'s policy does not allow ${route.action} (${which}); an account admin may grant it with PUT /api/v1/factory-services/${id}/policy, unless it is a platform operator's action`,
      { type: 'insufficient-permission', extra: { action: route.action, factory_service_id: id } },
    );
  }

  private byRole(principal: Principal, route: RouteAuth): void {
    if (principal.roles.length === 0) {
      throw forbidden(`insufficient role: you hold no roles, and a user with no roles has no access (${route.action} needs one of ${route.roles.join(', ')})`, { type: 'insufficient-role' });
    }
    if (!route.roles.some((r) => principal.roles.includes(r))) {
      throw forbidden(`insufficient role: ${route.action} needs one of ${route.roles.join(', ')}; you hold ${principal.roles.join(', ')}`, { type: 'insufficient-role' });
    }
  }

  /** Installs the hook and the check that every route declares its access. */
  install(app: FastifyInstance): void {
    app.addHook('onRoute', (route) => {
      const url = route.url ?? route.path;
      if (url.startsWith('/docs')) return;
      const access = route.config?.auth;
      if (!access) throw new Error(`route ${route.method} ${url} declares no config.auth (RouteAuth, { schemes } or 'public')`);
      if (typeof access === 'object' && 'action' in access) this.routeActions.add(access.action);
      const unknown = typeof access === 'object' && 'schemes' in access ? access.schemes.filter((s) => !this.authenticators.has(s)) : [];
      if (unknown.length) throw new Error(`route ${route.method} ${url} names unregistered authentication schemes: ${unknown.join(', ')}`);
      // the OpenAPI document shows these routes' own credentials instead of the default bearer/SVC
      if (typeof access === 'object' && 'schemes' in access) route.schema = { ...route.schema, security: access.schemes.map((s) => ({ [s]: [] })) };
    });
    const check = async (request: FastifyRequest) => {
      const access = request.routeOptions.config?.auth;
      if (!access || access === 'public') return;
      if ('schemes' in access) {
        const principal = await this.authenticateBy(access.schemes, request);
        const thingId = (request.params as { thingId?: string } | undefined)?.thingId;
        if (principal.device && thingId !== undefined && principal.device.thingId !== thingId.toLowerCase()) {
          throw forbidden(`this credential belongs to thing ${principal.device.thingId}, not ${thingId}`);
        }
        request.principal = principal;
        return;
      }
      const principal = await this.authenticate(request);
      if (!principal) throw unauthorized('missing Authorization header (Bearer <JWT> or SVC <base64 access_key_id:secret_key>)');
      request.principal = principal;
      await this.authorize(principal, access, request);
    };
    // header schemes wait for the body; the others are checked before it is read
    app.addHook('onRequest', async (request) => (this.headerSchemeOf(request) ? undefined : check(request)));
    app.addHook('preValidation', async (request) => (this.headerSchemeOf(request) && !request.principal ? check(request) : undefined));
  }
}

/** The principal of an authenticated route (the hook guarantees it). */
export function principalOf(request: FastifyRequest): Principal {
  if (!request.principal) throw unauthorized('not authenticated');
  return request.principal;
}

/** A factory service (signed request) acts on its own model's resources only: that model; undefined for other callers. */
export function modelScopeOf(request: FastifyRequest): string | undefined {
  return principalOf(request).factoryService?.modelId;
}

/** The account the caller acts on; 403 when the credential carries none (e.g. a platform token). */
export function accountOf(request: FastifyRequest): string {
  const p = principalOf(request);
  if (!p.accountId) throw forbidden('this operation acts on an account; your identity is not bound to one (send X-Account-Id for identity-center users)');
  return p.accountId;
}

/**
 * Browsers cannot set headers on a WebSocket, so a WebSocket upgrade may carry its bearer token
 * as subprotocols instead: `new WebSocket(url, ['bearer', token])`. The server answers with the
 * `bearer` subprotocol (the first offered), never echoing the token; a token in the URL would
 * end up in access logs.
 */
function webSocketBearer(request: FastifyRequest): string | undefined {
  if (request.headers.upgrade?.toLowerCase() !== 'websocket') return undefined;
  const offered = request.headers['sec-websocket-protocol'];
  if (typeof offered !== 'string') return undefined;
  const [first, token] = offered.split(',').map((p) => p.trim());
  return first === 'bearer' && token ? `Bearer ${token}` : undefined;
}
