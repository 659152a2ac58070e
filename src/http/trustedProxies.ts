import net from 'node:net';

/**
 * `TRUSTED_PROXIES`: the reverse proxies whose forwarding headers (X-Forwarded-For, and a proxy's
 * client-certificate header) the gateway believes. Anyone else could write those headers, so a
 * peer not listed is taken at its socket address.
 */

/** `::ffff:10.0.0.1` (how a dual-stack socket reports an IPv4 peer) as `10.0.0.1`. */
function unmapped(address: string): string {
  const v4 = address.toLowerCase().startsWith('::ffff:') ? address.slice(7) : undefined;
  return v4 && net.isIPv4(v4) ? v4 : address;
}

/** True for an IP address (`10.0.0.1`, `::1`) or a CIDR (`10.0.0.0/8`, `fd00::/8`). */
export function isAddressOrCidr(entry: string): boolean {
  const [ip, bits, extra] = entry.split('/');
  const family = net.isIP(ip);
  if (!family || extra !== undefined) return false;
  if (bits === undefined) return true;
  return /^\d{1,3}$/.test(bits) && Number(bits) <= (family === 4 ? 32 : 128);
}

const compiled = new WeakMap<readonly string[], net.BlockList>();

/** The list as a BlockList, built once per configuration array. Entries are checked by config.ts. */
function blockList(entries: readonly string[]): net.BlockList {
  let list = compiled.get(entries);
  if (!list) {
    list = new net.BlockList();
    for (const entry of entries) {
      const [ip, bits] = entry.split('/');
      const type = net.isIPv4(ip) ? 'ipv4' : 'ipv6';
      if (bits === undefined) list.addAddress(ip, type);
      else list.addSubnet(ip, Number(bits), type);
    }
    compiled.set(entries, list);
  }
  return list;
}

/** Is this peer one of the configured proxies (`config.TRUSTED_PROXIES`)? */
export function isTrustedProxy(address: string | undefined, proxies: readonly string[]): boolean {
  if (!address || proxies.length === 0) return false;
  const ip = unmapped(address);
  const type = net.isIPv4(ip) ? 'ipv4' : net.isIPv6(ip) ? 'ipv6' : undefined;
  return type !== undefined && blockList(proxies).check(ip, type);
}

/** 127.0.0.0/8, ::1 (also IPv4-mapped) and the name `localhost`. */
export function isLoopback(address: string | undefined): boolean {
  if (!address) return false;
  const ip = unmapped(address);
  return ip === 'localhost' || ip === '::1' || (net.isIPv4(ip) && ip.startsWith('127.'));
}

/**
 * The rate-limiting identity of a client address: IPv4 as is, IPv6 by its /64 (one subscriber
 * usually holds a whole /64, so counting single addresses would let it rotate freely).
 */
export function sourceKey(address: string): string {
  const ip = unmapped(address);
  if (!net.isIPv6(ip)) return ip;
  const [head, tail = ''] = ip.split('::');
  const left = head ? head.split(':') : [];
  const right = ip.includes('::') && tail ? tail.split(':') : [];
  const groups = ip.includes('::') ? [...left, ...Array(8 - left.length - right.length).fill('0'), ...right] : left;
  return `${groups.slice(0, 4).map((g) => g.replace(/^0+(?=.)/, '').toLowerCase()).join(':')}::/64`;
}
