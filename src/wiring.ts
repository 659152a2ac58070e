import type { DomainModule, Gateway, Services } from './gateway.js';

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

/**
 * Runs each domain's `init` in order with exactly the services it requires, and collects what it
 * returns, which must be exactly what it declares in `provides`. Returns every service.
 */
export async function wireDomains(domains: readonly DomainModule[], gw: Gateway): Promise<Services> {
  checkWiring(domains);
  const services: Partial<Services> = {};
  for (const d of domains) {
    const required = Object.fromEntries((d.requires ?? []).map((name) => [name, services[name]])) as Pick<Services, keyof Services>;
    const provided = ((await d.init?.(gw, required)) ?? {}) as Partial<Services>;
    const declared = [...(d.provides ?? [])].sort();
    const returned = Object.keys(provided).sort();
    if (declared.join() !== returned.join()) {
      throw new WiringError(`domain '${d.name}' declares provides [${declared.join(', ')}] but its init returned [${returned.join(', ')}]`);
    }
    Object.assign(services, provided);
  }
  return services as Services;
}

/** The services a domain may use after init: what it provides and what it requires, nothing else. */
export function servicesOf(d: DomainModule, services: Services): Services {
  const names = new Set<string>([...(d.provides ?? []), ...(d.requires ?? [])]);
  return new Proxy(services, {
    get(target, name) {
      // 'then': the view may pass through promise resolution, which probes it
      if (typeof name === 'string' && name !== 'then' && !names.has(name)) {
        throw new WiringError(`domain '${d.name}' used service '${name}' without declaring it in requires`);
      }
      return Reflect.get(target, name);
    },
  });
}
