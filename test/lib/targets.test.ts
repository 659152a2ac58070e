import http from 'node:http';
import net from 'node:net';
import { describe, expect, it } from 'vitest';
import { callError, nonPublic, resolveTarget } from '../../src/lib/targets.js';
import { DomainError } from '../../src/lib/errors.js';

/**
 * The outbound target rule (factory-service health checks, saga legs, webhook deliveries): every
 * spelling of a refused address is refused, IPv6 forms that embed an IPv4 address included, and
 * no text names the address a host name resolved to.
 */
const host = (literal: string) => new URL(`http://${literal}`).hostname.replace(/^\[|\]$/g, '');

const REFUSED: [string, RegExp][] = [
  ['127.0.0.1', /loopback/], ['10.1.2.3', /private/], ['169.254.169.254', /link-local/], ['0.0.0.0', /private or reserved/],
  ['[::1]', /loopback/], ['[0:0:0:0:0:0:0:1]', /loopback/], ['[::]', /unspecified/],
  ['[fe80::1]', /link-local/], ['[fd00::1]', /private/], ['[fec0::1]', /private/], ['[ff02::1]', /reserved/],
  // IPv4-mapped (::ffff:0:0/96) and IPv4-translated (::ffff:0:0:0/96)
  ['[::ffff:127.0.0.1]', /loopback address \(127\.0\.0\.1 in IPv4-mapped form\)/], ['[::ffff:a01:203]', /private or reserved address \(10\.1\.2\.3 in IPv4-mapped form\)/],
  ['[::ffff:0:a9fe:a9fe]', /link-local address \(169\.254\.169\.254 in IPv4-translated form\)/],
  // IPv4-compatible (::/96), refused whatever it embeds (deprecated, not routed to the IPv4 internet)
  ['[::127.0.0.1]', /loopback address \(127\.0\.0\.1 in IPv4-compatible form\)/], ['[::7f00:1]', /loopback/], ['[::a00:1]', /private/], ['[::8.8.8.8]', /deprecated IPv4-compatible/],
  // NAT64 well-known prefix (64:ff9b::/96) and local-use prefix (64:ff9b:1::/48)
  ['[64:ff9b::7f00:1]', /loopback address \(127\.0\.0\.1 in NAT64 form\)/], ['[64:ff9b::127.0.0.1]', /loopback/], ['[64:ff9b::a00:5]', /private or reserved address \(10\.0\.0\.5/],
  ['[64:ff9b::a9fe:a9fe]', /link-local/], ['[64:ff9b:1::808:808]', /private or reserved/],
  // 6to4 (2002::/16) whose embedded IPv4 is refused
  ['[2002:7f00:1::]', /loopback address \(127\.0\.0\.1 in 6to4 form\)/], ['[2002:c0a8:101::1]', /private or reserved address \(192\.168\.1\.1 in 6to4 form\)/], ['[2002:a9fe:a9fe::]', /link-local/],
  // Teredo (2001::/32) and the rest of the IETF protocol assignments, documentation
  ['[2001:0:4136:e378:8000:63bf:3fff:fdd2]', /reserved/], ['[2001:2::1]', /reserved/], ['[2001:db8::1]', /reserved/],
];
const PUBLIC = ['8.8.8.8', '[2606:4700:4700::1111]', '[::ffff:8.8.8.8]', '[64:ff9b::808:808]', '[2002:808:808::1]', '[2a00:1450:4001::200e]'];

describe('nonPublic', () => {
  it('refuses every spelling of a loopback, private, link-local or reserved address (as written and as the URL parser normalizes it)', () => {
    for (const [literal, why] of REFUSED) {
      const normalized = host(literal);
      const written = literal.replace(/^\[|\]$/g, '');
      expect(nonPublic(written), literal).toMatch(why);
      expect(nonPublic(normalized), `${literal} as ${normalized}`).toMatch(why);
    }
  });

  it('lets public addresses through, in their IPv6 forms too', () => {
    for (const literal of PUBLIC) expect(nonPublic(host(literal)), literal).toBeUndefined();
  });
});

describe('resolveTarget', () => {
  const refusal = async (url: string, field = 'endpoint_url') => {
    const err = await resolveTarget(new URL(url), false, field).then(() => undefined, (e: unknown) => e);
    expect(err, url).toBeInstanceOf(DomainError);
    return (err as DomainError).message;
  };

  it('refuses each IPv6 spelling of a refused IPv4 address, saying "refused target"', async () => {
    for (const [literal, why] of REFUSED) {
      const text = await refusal(`http://${literal}:8080/base`);
      expect(text).toMatch(/^endpoint_url http:\/\/.+ is a refused target: /);
      expect(text).toMatch(why);
    }
    for (const literal of PUBLIC) expect((await resolveTarget(new URL(`https://${literal}`), false, 'f')).address).toBe(host(literal));
  });

  it('a host name that resolves to a refused address: "refused target", never the address nor its kind', async () => {
    const text = await refusal('http://localhost:9', 'target_url');
    expect(text).toMatch(/^target_url http:\/\/localhost:9 is a refused target: the host name resolves to an address that is not public/);
    expect(text).not.toMatch(/127\.0\.0\.1|::1|loopback address/);
  });

  it('ALLOW_PRIVATE_TARGETS lets them through', async () => {
    expect(await resolveTarget(new URL('http://[64:ff9b::7f00:1]'), true, 'f')).toEqual({ address: '64:ff9b::7f00:1', family: 6 });
  });
});

describe('callError', () => {
  it('a connection error names the URL host, not the address it was resolved to', async () => {
    const closed = net.createServer();
    await new Promise<void>((resolve) => closed.listen(0, '127.0.0.1', resolve));
    const port = (closed.address() as net.AddressInfo).port;
    await new Promise((resolve) => closed.close(resolve));
    const url = new URL(`http://localhost:${port}/healthz`);
    const target = { address: '127.0.0.1', family: 4 };
    const err = await new Promise<NodeJS.ErrnoException>((resolve) => {
      http.get(url, { lookup: (_h, opts, cb) => (opts.all ? cb(null, [target]) : cb(null, target.address, target.family)) }).on('error', resolve);
    });
    expect(err.message).toContain('127.0.0.1'); // what Node says
    const text = callError(err, url, target);
    expect(text).toContain('ECONNREFUSED');
    expect(text).toContain(`localhost:${port}`);
    expect(text).not.toContain('127.0.0.1');
  });
});
