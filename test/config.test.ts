import { describe, expect, it } from 'vitest';
import { ConfigError, loadConfig } from '../src/config.js';

describe('config', () => {
  it('has defaults that serve the embedded mode', () => {
    const c = loadConfig({});
    expect(c.HTTP_PORT).toBe(8080);
    expect(c.MQTT_PORT).toBe(8883);
    expect(c.embeddedDatabase).toBe(true);
    expect(c.DEV_ISSUER).toBe(true);
    expect(c.PUBLIC_BASE_URL).toBe('http://localhost:8080');
    expect(c.ENROLLMENT_TOKEN_TTL).toBe(86400);
  });

  it('runs one process unless BROKER_WORKERS asks for more (1 to 64)', () => {
    expect(loadConfig({}).BROKER_WORKERS).toBe(1);
    expect(loadConfig({ BROKER_WORKERS: '4' }).BROKER_WORKERS).toBe(4);
    for (const bad of ['0', '65', 'two']) expect(() => loadConfig({ BROKER_WORKERS: bad })).toThrow(/BROKER_WORKERS/);
  });

  it('turns the development issuer off when OIDC issuers are configured', () => {
    const c = loadConfig({ OIDC_ISSUERS: 'https://sso.example.com, https://other.example.com/realms/platform' });
    expect(c.OIDC_ISSUERS).toEqual(['https://sso.example.com', 'https://other.example.com/realms/platform']);
    expect(c.DEV_ISSUER).toBe(false);
  });

  it('listens on loopback by default while the development issuer is on, and says so', () => {
    const dev = loadConfig({});
    expect(dev.HTTP_HOST).toBe('127.0.0.1');
    expect(dev.httpLoopbackDefault).toBe(true);
    // with a real identity provider the default is every interface
    const prod = loadConfig({ OIDC_ISSUERS: 'https://sso.example.com' });
    expect(prod.HTTP_HOST).toBe('0.0.0.0');
    expect(prod.httpLoopbackDefault).toBe(false);
    // DEV_ISSUER=true next to OIDC_ISSUERS still keeps the listener local
    expect(loadConfig({ OIDC_ISSUERS: 'https://sso.example.com', DEV_ISSUER: 'true' }).HTTP_HOST).toBe('127.0.0.1');
    // an explicit HTTP_HOST wins (main.ts warns when it is not loopback)
    const explicit = loadConfig({ HTTP_HOST: '0.0.0.0' });
    expect(explicit.HTTP_HOST).toBe('0.0.0.0');
    expect(explicit.httpLoopbackDefault).toBe(false);
    expect(explicit.DEV_TOKEN_REMOTE).toBe(false);
  });

  it('parses TRUSTED_PROXIES and the authentication-failure limits', () => {
    const c = loadConfig({});
    expect(c.TRUSTED_PROXIES).toEqual([]);
    expect(c.AUTH_FAILURE_LIMIT).toBe(10);
    expect(c.AUTH_FAILURE_WINDOW_SECONDS).toBe(60);
    const set = loadConfig({ TRUSTED_PROXIES: '10.0.0.5, 172.16.0.0/12,fd00::/8, ::1', AUTH_FAILURE_LIMIT: '5', AUTH_FAILURE_WINDOW_SECONDS: '300' });
    expect(set.TRUSTED_PROXIES).toEqual(['10.0.0.5', '172.16.0.0/12', 'fd00::/8', '::1']);
    expect(set.AUTH_FAILURE_LIMIT).toBe(5);
    expect(set.AUTH_FAILURE_WINDOW_SECONDS).toBe(300);
  });

  it.each([
    ['TRUSTED_PROXIES', 'proxy.example.com'],
    ['TRUSTED_PROXIES', '10.0.0.0/33'],
    ['TRUSTED_PROXIES', '10.0.0.1,10.0.0.0/8/1'],
    ['AUTH_FAILURE_LIMIT', '0'],
    ['AUTH_FAILURE_WINDOW_SECONDS', 'a minute'],
    ['DEV_TOKEN_REMOTE', 'sure'],
    ['HTTP_PORT', 'eighty'],
    ['MQTT_PORT', '70000'],
    ['DATABASE_URL', 'not a url'],
    ['LOG_LEVEL', 'loud'],
    ['DEV_ISSUER', 'maybe'],
  ])('stops on a bad %s naming the variable', (name, value) => {
    expect(() => loadConfig({ [name]: value })).toThrow(ConfigError);
    expect(() => loadConfig({ [name]: value })).toThrow(new RegExp(`${name}=`));
  });
});
