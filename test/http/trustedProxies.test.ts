import { describe, expect, it } from 'vitest';
import { isAddressOrCidr, isLoopback, isTrustedProxy, sourceKey } from '../../src/http/trustedProxies.js';

describe('trusted proxies and client addresses', () => {
  it('trusts listed addresses and subnets only, IPv4-mapped peers included', () => {
    const proxies = ['10.0.0.5', '172.16.0.0/12', 'fd00::/8'];
    expect(isTrustedProxy('10.0.0.5', proxies)).toBe(true);
    expect(isTrustedProxy('::ffff:10.0.0.5', proxies)).toBe(true);
    expect(isTrustedProxy('172.31.255.1', proxies)).toBe(true);
    expect(isTrustedProxy('fd12::1', proxies)).toBe(true);
    expect(isTrustedProxy('10.0.0.6', proxies)).toBe(false);
    expect(isTrustedProxy('172.32.0.1', proxies)).toBe(false);
    expect(isTrustedProxy('fe80::1', proxies)).toBe(false);
    expect(isTrustedProxy(undefined, proxies)).toBe(false);
    expect(isTrustedProxy('127.0.0.1', [])).toBe(false);
  });

  it('validates TRUSTED_PROXIES entries', () => {
    for (const ok of ['10.0.0.1', '10.0.0.0/8', '::1', 'fd00::/8', '0.0.0.0/0']) expect(isAddressOrCidr(ok)).toBe(true);
    for (const bad of ['proxy', '10.0.0.0/33', '::/129', '10.0.0.0/', '10.0.0.0/8/8', '10.0.0.0/x']) expect(isAddressOrCidr(bad)).toBe(false);
  });

  it('recognises loopback callers', () => {
    for (const ip of ['127.0.0.1', '127.9.9.9', '::1', '::ffff:127.0.0.1', 'localhost']) expect(isLoopback(ip)).toBe(true);
    for (const ip of ['10.0.0.1', '::ffff:10.0.0.1', '0.0.0.0', '::', undefined]) expect(isLoopback(ip)).toBe(false);
  });

  it('counts IPv6 clients by their /64', () => {
    expect(sourceKey('2001:db8:1:2:aaaa::1')).toBe('2001:db8:1:2::/64');
    expect(sourceKey('2001:0db8:0001:0002:ffff:1:2:3')).toBe('2001:db8:1:2::/64');
    expect(sourceKey('2001:db8::1')).toBe('2001:db8:0:0::/64');
    expect(sourceKey('::1')).toBe('0:0:0:0::/64');
    expect(sourceKey('::ffff:192.0.2.1')).toBe('192.0.2.1');
    expect(sourceKey('192.0.2.1')).toBe('192.0.2.1');
  });
});
