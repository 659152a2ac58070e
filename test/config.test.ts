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

  it('turns the development issuer off when OIDC issuers are configured', () => {
    const c = loadConfig({ OIDC_ISSUERS: 'https://sso.example.com, https://other.example.com/realms/platform' });
    expect(c.OIDC_ISSUERS).toEqual(['https://sso.example.com', 'https://other.example.com/realms/platform']);
    expect(c.DEV_ISSUER).toBe(false);
  });

  it.each([
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
