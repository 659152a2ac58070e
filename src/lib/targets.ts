import dns from 'node:dns/promises';
import net from 'node:net';
import { invalid } from './errors.js';

/**
 * Outbound calls to addresses a tenant names (factory-service health checks, webhook deliveries).
 * The gateway must not become a way to scan its own network: loopback, link-local, private and
 * other non-public targets are refused unless ALLOW_PRIVATE_TARGETS is set. A host name is resolved first and every address checked, and the
 * call then connects to the checked address (no second lookup a DNS answer could change).
 */
const NON_PUBLIC = new net.BlockList();
for (const [net4, bits] of [
  ['0.0.0.0', 8], ['10.0.0.0', 8], ['100.64.0.0', 10], ['127.0.0.0', 8], ['169.254.0.0', 16], ['172.16.0.0', 12],
  ['192.0.0.0', 24], ['192.168.0.0', 16], ['198.18.0.0', 15], ['224.0.0.0', 4], ['240.0.0.0', 4],
] as const) NON_PUBLIC.addSubnet(net4, bits, 'ipv4');
for (const [net6, bits] of [['::', 128], ['::1', 128], ['fc00::', 7], ['fe80::', 10], ['ff00::', 8], ['64:ff9b:1::', 48]] as const) NON_PUBLIC.addSubnet(net6, bits, 'ipv6');

/** The reason an address is not public, or undefined. IPv4-mapped IPv6 is checked as IPv4. */
export function nonPublic(address: string): string | undefined {
  const mapped = /^::ffff:(\d+\.\d+\.\d+\.\d+)$/i.exec(address);
  const a = mapped ? mapped[1] : address;
  const family = net.isIPv4(a) ? 'ipv4' : 'ipv6';
  if (!NON_PUBLIC.check(a, family)) return undefined;
  if (/^127\.|^::1$/.test(a)) return 'a loopback address';
  if (/^169\.254\.|^fe[89ab]/i.test(a)) return 'a link-local address';
  return 'a private or reserved address';
}

const hostOf = (url: URL) => url.hostname.replace(/^\[|\]$/g, '');

const refusedTarget = (field: string, url: URL, address: string, why: string) =>
  invalid(`${field} ${url.origin} resolves to ${address}, ${why}; the gateway does not call loopback, link-local or private targets (ALLOW_PRIVATE_TARGETS=true allows them in development)`, { type: 'target-refused' });

/** Resolves the host and checks each address; returns the address to connect to. */
export async function resolveTarget(url: URL, allowPrivate: boolean, field: string): Promise<{ address: string; family: number }> {
  const host = hostOf(url);
  let addresses: { address: string; family: number }[];
  if (net.isIP(host)) addresses = [{ address: host, family: net.isIP(host) }];
  else {
    try {
      addresses = await dns.lookup(host, { all: true, verbatim: true });
    } catch (err) {
      throw invalid(`${field}: the host name ${JSON.stringify(host)} does not resolve (${(err as NodeJS.ErrnoException).code ?? 'error'})`, { type: 'target-unresolvable' });
    }
  }
  if (!allowPrivate) {
    for (const a of addresses) {
      const why = nonPublic(a.address);
      if (why) throw refusedTarget(field, url, a.address, why);
    }
  }
  return addresses[0];
}
