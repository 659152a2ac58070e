import dns from 'node:dns/promises';
import net from 'node:net';
import { invalid } from './errors.js';

/**
 * Outbound calls to addresses a tenant names (factory-service health checks, saga legs, webhook
 * deliveries). The gateway must not become a way to scan its own network: loopback, link-local,
 * private and other non-public targets are refused unless ALLOW_PRIVATE_TARGETS is set, in every
 * spelling: an IPv6 address that embeds an IPv4 one (IPv4-mapped, IPv4-compatible, NAT64, 6to4)
 * is judged by the IPv4 address it reaches. A host name is resolved first and every address
 * checked, and the call then connects to the checked address (no second lookup a DNS answer could
 * change). Texts never name the address a host name resolved to: a tenant must not be able to map
 * internal DNS names through refusals or connection errors.
 */
const NON_PUBLIC_V4 = new net.BlockList();
for (const [net4, bits] of [
  ['0.0.0.0', 8], ['10.0.0.0', 8], ['100.64.0.0', 10], ['127.0.0.0', 8], ['169.254.0.0', 16], ['172.16.0.0', 12],
  ['192.0.0.0', 24], ['192.168.0.0', 16], ['198.18.0.0', 15], ['224.0.0.0', 4], ['240.0.0.0', 4],
] as const) NON_PUBLIC_V4.addSubnet(net4, bits, 'ipv4');

// Besides the embedded-IPv4 forms below: unique local, link-local, site-local (deprecated),
// multicast, NAT64 local use (RFC 8215: reaches whatever the local translator serves),
// IETF protocol assignments (2001::/23: Teredo, benchmarking, ORCHID), documentation, discard.
const NON_PUBLIC_V6 = new net.BlockList();
for (const [net6, bits] of [
  ['fc00::', 7], ['fe80::', 10], ['fec0::', 10], ['ff00::', 8], ['64:ff9b:1::', 48],
  ['2001::', 23], ['2001:db8::', 32], ['3fff::', 20], ['100::', 64],
] as const) NON_PUBLIC_V6.addSubnet(net6, bits, 'ipv6');

function ipv4Reason(address: string): string | undefined {
  if (!NON_PUBLIC_V4.check(address, 'ipv4')) return undefined;
  if (address.startsWith('127.')) return 'a loopback address';
  if (address.startsWith('169.254.')) return 'a link-local address';
  return 'a private or reserved address';
}

/** The eight 16-bit groups of a valid IPv6 address (a trailing dotted quad included). */
function groupsOf(address: string): number[] {
  let a = address.replace(/%.*$/, '');
  const quad = /(\d+)\.(\d+)\.(\d+)\.(\d+)$/.exec(a);
  if (quad) {
    const [w, x, y, z] = quad.slice(1).map(Number);
    a = `${a.slice(0, quad.index)}${((w << 8) | x).toString(16)}:${((y << 8) | z).toString(16)}`;
  }
  const [head, tail] = a.split('::').map((h) => (h ? h.split(':').map((g) => parseInt(g, 16)) : []));
  return tail === undefined ? head : [...head, ...Array<number>(8 - head.length - tail.length).fill(0), ...tail];
}

/** The IPv4 address an IPv6 one stands for, when it embeds one (and how). */
function embeddedIpv4(g: number[]): { v4: string; form: string } | undefined {
  const zero = (from: number, to: number) => g.slice(from, to).every((x) => x === 0);
  const v4 = (hi: number, lo: number) => `${hi >> 8}.${hi & 255}.${lo >> 8}.${lo & 255}`;
  if (zero(0, 5) && g[5] === 0xffff) return { v4: v4(g[6], g[7]), form: 'IPv4-mapped' }; // ::ffff:0:0/96
  if (zero(0, 4) && g[4] === 0xffff && g[5] === 0) return { v4: v4(g[6], g[7]), form: 'IPv4-translated' }; // ::ffff:0:0:0/96
  if (zero(0, 6)) return { v4: v4(g[6], g[7]), form: 'IPv4-compatible' }; // ::/96
  if (g[0] === 0x64 && g[1] === 0xff9b && zero(2, 6)) return { v4: v4(g[6], g[7]), form: 'NAT64' }; // 64:ff9b::/96
  if (g[0] === 0x2002) return { v4: v4(g[1], g[2]), form: '6to4' }; // 2002::/16
  return undefined;
}

function ipv6Reason(address: string): string | undefined {
  const g = groupsOf(address);
  if (g.slice(0, 7).every((x) => x === 0) && g[7] <= 1) return g[7] === 1 ? 'a loopback address' : 'the unspecified address';
  const embedded = embeddedIpv4(g);
  if (embedded) {
    const why = ipv4Reason(embedded.v4);
    if (why) return `${why} (${embedded.v4} in ${embedded.form} form)`;
    // the deprecated forms are not routed to the IPv4 internet; mapped, NAT64 and 6to4 of a public address are
    return /compatible|translated/.test(embedded.form) ? `a deprecated ${embedded.form} address` : undefined;
  }
  if (!NON_PUBLIC_V6.check(address.replace(/%.*$/, ''), 'ipv6')) return undefined;
  if ((g[0] & 0xffc0) === 0xfe80) return 'a link-local address';
  return 'a private or reserved address';
}

/** The reason an IP address is not public, or undefined. */
export function nonPublic(address: string): string | undefined {
  if (net.isIPv4(address)) return ipv4Reason(address);
  if (net.isIPv6(address.replace(/%.*$/, ''))) return ipv6Reason(address);
  return 'not an IP address';
}

const hostOf = (url: URL) => url.hostname.replace(/^\[|\]$/g, '');

const ALLOW_HINT = 'the gateway does not call loopback, link-local, private or reserved addresses (ALLOW_PRIVATE_TARGETS=true allows them in development)';

/** Resolves the host and checks each address; returns the address to connect to. */
export async function resolveTarget(url: URL, allowPrivate: boolean, field: string): Promise<{ address: string; family: number }> {
  const host = hostOf(url);
  if (net.isIP(host)) {
    const why = allowPrivate ? undefined : nonPublic(host);
    if (why) throw invalid(`${field} ${url.origin} is a refused target: ${host} is ${why}; ${ALLOW_HINT}`, { type: 'target-refused' });
    return { address: host, family: net.isIP(host) };
  }
  let addresses: { address: string; family: number }[];
  try {
    addresses = await dns.lookup(host, { all: true, verbatim: true });
  } catch (err) {
    throw invalid(`${field}: the host name ${JSON.stringify(host)} does not resolve (${(err as NodeJS.ErrnoException).code ?? 'error'})`, { type: 'target-unresolvable' });
  }
  // neither the address nor its kind: which internal names exist and where they point is not the tenant's to learn
  if (!allowPrivate && addresses.some((a) => nonPublic(a.address))) {
    throw invalid(`${field} ${url.origin} is a refused target: the host name resolves to an address that is not public; ${ALLOW_HINT}`, { type: 'target-refused' });
  }
  return addresses[0];
}

/** An outbound call's failure (`connect ECONNREFUSED 10.1.2.3:443`) naming the URL's host, never the address it resolved to. */
export function callError(err: NodeJS.ErrnoException, url: URL, target: { address: string }): string {
  const text = `${err.code && !err.message.includes(err.code) ? `${err.code}: ` : ''}${err.message}`;
  return text.split(target.address).join(hostOf(url)).slice(0, 300);
}
