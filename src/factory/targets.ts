import dns from 'node:dns/promises';
import http from 'node:http';
import https from 'node:https';
import net from 'node:net';
import { invalid } from '../lib/errors.js';

/**
 * Outbound probes of factory-service endpoints. The gateway must not become a way to scan its
 * own network: loopback, link-local, private and other non-public targets are refused unless
 * ALLOW_PRIVATE_TARGETS is set. A host name is resolved first and every address checked, and the
 * probe then connects to the checked address (no second lookup a DNS answer could change).
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

export interface ProbeResult {
  status: 'HEALTHY' | 'UNHEALTHY';
  httpStatus: number | null;
  latencyMs: number | null;
  error: string | null;
}

/**
 * GET `<endpoint_url>/healthz` at the checked address with a short timeout; healthy on a 2xx.
 * TLS still verifies the certificate against the URL's host name.
 */
export async function probe(endpointUrl: string, timeoutMs: number, allowPrivate: boolean): Promise<ProbeResult> {
  const base = new URL(endpointUrl);
  const url = new URL(`${base.pathname.replace(/\/+$/, '')}/healthz`, base);
  const target = await resolveTarget(url, allowPrivate, 'endpoint_url');
  const started = performance.now();
  const client = url.protocol === 'https:' ? https : http;
  return new Promise<ProbeResult>((resolve) => {
    const req = client.get(url, {
      timeout: timeoutMs,
      headers: { 'user-agent': 'device-gateway-health-check' },
      // connect to the address that was checked, whatever DNS answers now
      lookup: (_h, opts, cb) => (opts.all ? cb(null, [target]) : cb(null, target.address, target.family)),
    }, (res) => {
      res.resume();
      const latencyMs = Math.round(performance.now() - started);
      const ok = res.statusCode !== undefined && res.statusCode >= 200 && res.statusCode < 300;
      resolve({ status: ok ? 'HEALTHY' : 'UNHEALTHY', httpStatus: res.statusCode ?? null, latencyMs, error: ok ? null : `GET /healthz answered ${res.statusCode}` });
    });
    req.on('timeout', () => req.destroy(new Error(`no answer within ${timeoutMs} ms`)));
    req.on('error', (err: NodeJS.ErrnoException) => {
      resolve({ status: 'UNHEALTHY', httpStatus: null, latencyMs: null, error: `${err.code ? `${err.code}: ` : ''}${err.message}`.slice(0, 300) });
    });
  });
}
