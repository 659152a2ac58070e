import Fastify from 'fastify';
import { describe, expect, it } from 'vitest';
import { Auth } from '../../src/http/auth/plugin.js';
import { JwtVerifier } from '../../src/http/auth/jwt.js';
import { parseAccountIdHeader } from '../../src/http/auth/accountHeader.js';
import { registerErrorHandling } from '../../src/http/errors.js';
import { invalid } from '../../src/lib/errors.js';
import type { Principal } from '../../src/http/auth/principal.js';

const caller: Principal = { via: 'jwt', sub: 'u', realm: 'idc-corp', realmKind: 'idc', roles: [] };

describe('request authenticators (config.auth { schemes })', () => {
  it('the named scheme authenticates the route (no role check); an unregistered scheme fails at start-up', async () => {
    const auth = new Auth(new JwtVerifier([], undefined));
    auth.registerAuthenticator('test-scheme', {
      describe: 'X-Caller: yes',
      openapi: { type: 'apiKey', in: 'header', name: 'X-Caller' },
      authenticate: async (request) => {
        if (request.headers['x-caller'] === undefined) return undefined;
        if (request.headers['x-caller'] !== 'yes') throw invalid('not our caller');
        return caller;
      },
    });
    const app = Fastify();
    registerErrorHandling(app, 'http://localhost', 1024);
    auth.install(app);
    app.get('/scheme', { config: { auth: { schemes: ['test-scheme'] } } }, async (request) => ({ sub: request.principal?.sub, roles: request.principal?.roles }));
    expect(() => app.get('/unknown', { config: { auth: { schemes: ['nope'] } } }, async () => ({}))).toThrow(/unregistered authentication schemes: nope/);
    await app.listen({ port: 0, host: '127.0.0.1' });
    try {
      const { port } = app.server.address() as { port: number };
      const ok = await fetch(`http://127.0.0.1:${port}/scheme`, { headers: { 'x-caller': 'yes' } });
      expect(ok.status).toBe(200);
      // a principal with no roles passes: the handler authorizes, not the hook
      expect(await ok.json()).toEqual({ sub: 'u', roles: [] });
      const missing = await fetch(`http://127.0.0.1:${port}/scheme`);
      expect(missing.status).toBe(401);
      expect(((await missing.json()) as { detail: string }).detail).toBe('authentication required: X-Caller: yes');
      const refused = await fetch(`http://127.0.0.1:${port}/scheme`, { headers: { 'x-caller': 'no' } });
      expect(refused.status).toBe(400);
      expect(refused.headers.get('content-type')).toMatch(/^application\/problem\+json/);
      expect(((await refused.json()) as { detail: string }).detail).toBe('not our caller');
    } finally {
      await app.close();
    }
  });
});

describe('parseAccountIdHeader (the one X-Account-Id parser)', () => {
  it('a UUID in lower case; absent or empty is undefined; anything else is 400', () => {
    expect(parseAccountIdHeader('0B2F3C4D-1111-4222-8333-944445555666')).toBe('0b2f3c4d-1111-4222-8333-944445555666');
    expect(parseAccountIdHeader(undefined)).toBeUndefined();
    expect(parseAccountIdHeader('')).toBeUndefined();
    expect(() => parseAccountIdHeader('acct-1')).toThrow(expect.objectContaining({ kind: 'invalid', detail: expect.stringMatching(/X-Account-Id must be an account id/) }));
    expect(() => parseAccountIdHeader(['a', 'b'])).toThrow(expect.objectContaining({ kind: 'invalid', detail: expect.stringMatching(/once/) }));
  });
});
