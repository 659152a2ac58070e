import { describe, expect, it } from 'vitest';
import { canonicalQuery, canonicalRequest, dateOf, sign, signingTimestamp, stringToSign } from '../../src/clients/svcSigner.js';

// DESIGN.md section 7
const vector = {
  secret: 'c2VjcmV0LXNlY3JldC1zZWNyZXQtc2VjcmV0LXNlY3JldC1zZWNyZXQ',
  input: {
    method: 'POST',
    target: '/api/v1/things/3f1c2a9e-6b7d-4e8f-9a0b-1c2d3e4f5a6b/provision?b=2&a=x%20y',
    host: 'gateway.example:8080',
    accessKeyId: 'AKSV0123456789ABCDEF',
    timestamp: '2026-11-22T10:00:00Z',
    body: '{"leg":"identify"}',
  },
  signature: 'cd9ea7fc5891c235369abca637534ea760e6b25271ff7d0969842555c83e17ea',
};

describe('SVC-HMAC-SHA256 signer', () => {
  it('reproduces the test vector of DESIGN.md section 7', () => {
    expect(sign(vector.secret, vector.input)).toBe(vector.signature);
    // the same body as bytes signs the same
    expect(sign(vector.secret, { ...vector.input, body: Buffer.from(vector.input.body) })).toBe(vector.signature);
  });

  it('builds the canonical request and string to sign of the recipe', () => {
    const canonical = canonicalRequest(vector.input);
    expect(canonical.split('\n')).toEqual([
      'POST',
      '/api/v1/things/3f1c2a9e-6b7d-4e8f-9a0b-1c2d3e4f5a6b/provision',
      'a=x%20y&b=2',
      'host:gateway.example:8080',
      'x-svc-access-key-id:AKSV0123456789ABCDEF',
      'x-svc-timestamp:2026-11-22T10:00:00Z',
      'host;x-svc-access-key-id;x-svc-timestamp',
      // sha256('{"leg":"identify"}')
      expect.stringMatching(/^[0-9a-f]{64}$/),
    ]);
    const toSign = stringToSign(vector.input.timestamp, canonical).split('\n');
    expect(toSign.slice(0, 3)).toEqual(['SVC-HMAC-SHA256', '2026-11-22T10:00:00Z', '20261122/factory/svc4_request']);
  });

  it('canonical query: RFC 3986 encoding, sorted by name then value, empty when none', () => {
    expect(canonicalQuery('')).toBe('');
    expect(canonicalQuery('b=2&a=2&a=1&c')).toBe('a=1&a=2&b=2&c=');
    expect(canonicalQuery("x=a+b&y=%7e!'()*")).toBe("x=a%2Bb&y=~%21%27%28%29%2A");
  });

  it('any change of method, path, query, body, key, timestamp or secret changes the signature', () => {
    const variants = [
      { ...vector.input, method: 'PUT' },
      { ...vector.input, target: vector.input.target.replace('provision', 'provisiom') },
      { ...vector.input, target: vector.input.target.replace('b=2', 'b=3') },
      { ...vector.input, body: '{"leg":"provision"}' },
      { ...vector.input, accessKeyId: 'AKSV0123456789ABCDEE' },
      { ...vector.input, host: 'gateway.example:8081' },
      { ...vector.input, timestamp: '2026-11-22T10:00:01Z' },
    ];
    for (const v of variants) expect(sign(vector.secret, v)).not.toBe(vector.signature);
    expect(sign(`${vector.secret}x`, vector.input)).not.toBe(vector.signature);
  });

  it('timestamps are RFC 3339 UTC to the second', () => {
    expect(signingTimestamp(new Date('2026-11-22T10:00:00.789Z'))).toBe('2026-11-22T10:00:00Z');
    expect(dateOf('2026-11-22T10:00:00Z')).toBe('20261122');
    expect(() => dateOf('2026-11-22T10:00:00.000Z')).toThrow(/RFC 3339/);
  });
});
