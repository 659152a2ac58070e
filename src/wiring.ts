import type { DomainModule, Gateway, Services, TestHooks } from './gateway.js';

export class WiringError extends Error {}

/**
 * Checks the declared wiring of the domains before anything starts: every required service is
 * provided by exactly one domain that comes earlier in src/domains.ts. Throws a WiringError that
 * says what to change.
 */
export function checkWiring(domains: readonly DomainModule[]): void {
  const providedBy = new Map<string, { domain: string; index: number }>();
  domains.forEach((d, index) => {
    for (const name of d.provides ?? []) {
      const earlier = providedBy.get(name);
      if (earlier) throw new WiringError(`service '${name}' is provided twice: by domain '${earlier.domain}' and by '${d.name}'`);
      providedBy.set(name, { domain: d.name, index });
    }
  });
  domains.forEach((d, index) => {
    for (const name of d.requires ?? []) {
      const provider = providedBy.get(name);
      if (!provider) throw new WiringError(`domain '${d.name}' requires service '${name}', which no domain provides`);
      if (provider.index >= index) {
        throw new WiringError(`domain '${d.name}' requires service '${name}' from domain '${provider.domain}', which comes ${provider.index === index ? 'from itself' : 'later'} in src/domains.ts: move '${provider.domain}' before '${d.name}'`);
      }
    }
  });
}

/** What wireDomains built. */
export interface WiredDomains {
  /** the declared services of every domain (the cross-domain contract) */
  services: Services;
  /** what each domain's `init` returned (its provided services and its own state), for its own hooks only */
  own: ReadonlyMap<DomainModule, Readonly<Record<string, unknown>>>;
  /** the `testHooks` each domain's `init` returned, by domain name */
  testHooks: TestHooks;
}

/**
 * Runs each domain's `init` in order with exactly the services it requires. What it returns holds
 * every service it declares in `provides` (those reach later domains) and may hold more: its own
 * state, given back to its own routes, start, stop and ready (servicesOf), never to another domain.
 */
export async function wireDomains(domains: readonly DomainModule[], gw: Gateway): Promise<WiredDomains> {
  checkWiring(domains);
  const providers = new Map(domains.flatMap((d) => (d.provides ?? []).map((name) => [name as string, d.name])));
  const services: Record<string, unknown> = {};
  const own = new Map<DomainModule, Record<string, unknown>>();
  const testHooks: Record<string, unknown> = {};
  for (const d of domains) {
    const required = Object.fromEntries((d.requires ?? []).map((name) => [name, services[name]])) as Pick<Services, keyof Services>;
    const returned = ((await d.init?.(gw, required)) ?? {}) as Record<string, unknown>;
    const declared = [...(d.provides ?? [])].sort();
    const missing = declared.filter((name) => returned[name] === undefined);
    if (missing.length) {
      throw new WiringError(`domain '${d.name}' declares provides [${declared.join(', ')}] but its init returned no ${missing.map((m) => `'${m}'`).join(', ')}`);
    }
    for (const key of Object.keys(returned)) {
      const provider = providers.get(key);
      if (provider !== undefined && provider !== d.name) {
        throw new WiringError(`domain '${d.name}' returned '${key}' from init, the name of a service of domain '${provider}': name its own state otherwise`);
      }
    }
    for (const name of declared) services[name] = returned[name];
    own.set(d, returned);
    if (returned.testHooks !== undefined) testHooks[d.name] = returned.testHooks;
  }
  return { services: services as unknown as Services, own, testHooks: testHooks as unknown as TestHooks };
}

/**
 * What a domain's own hooks may use after init: what its `init` returned, and the services it
 * requires; nothing else (another service throws a WiringError naming it).
 */
export function servicesOf(d: DomainModule, wired: WiredDomains): Services {
  const own = wired.own.get(d) ?? {};
  const names = new Set<string>([...(d.provides ?? []), ...(d.requires ?? [])]);
  return new Proxy(wired.services, {
    get(target, name) {
      if (typeof name === 'string' && Object.hasOwn(own, name)) return own[name];
      // 'then': the view may pass through promise resolution, which probes it
      if (typeof name === 'string' && name !== 'then' && !names.has(name)) {
        throw new WiringError(`domain '${d.name}' used service '${name}' without declaring it in requires`);
      }
      return Reflect.get(target, name);
    },
  });
}
