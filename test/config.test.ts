import crypto from 'node:crypto';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import postgres from 'postgres';
import { ConfigError, loadConfig } from '../src/config.js';
import { adminUrl } from './helpers/db.js';

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

describe('secrets from files (<NAME>_FILE, issue 37)', () => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'config-secrets-'));
  const file = (name: string, content: string) => {
    const p = path.join(dir, name);
    fs.writeFileSync(p, content, { mode: 0o600 });
    return p;
  };
  const secret = 'S'.repeat(20) + crypto.randomBytes(16).toString('base64');

  it('reads INTERNAL_API_SECRET, DATABASE_URL, REDIS_URL and SMTP_URL from files, trailing newlines dropped', () => {
    const c = loadConfig({
      INTERNAL_API_SECRET_FILE: file('internal', `${secret}\n`),
      DATABASE_URL_FILE: file('db-url', 'postgres://u:p@db.example:5432/gw\n\n'),
      REDIS_URL_FILE: file('redis', 'redis://:pw@redis.example:6379'),
      SMTP_URL_FILE: file('smtp', 'smtp://user:pass@mail.example:587\n'),
    });
    expect(c.INTERNAL_API_SECRET).toBe(secret);
    expect(c.DATABASE_URL).toBe('postgres://u:p@db.example:5432/gw');
    expect(c.embeddedDatabase).toBe(false);
    expect(c.REDIS_URL).toBe('redis://:pw@redis.example:6379');
    expect(c.SMTP_URL).toBe('smtp://user:pass@mail.example:587');
  });

  it("DATABASE_PASSWORD_FILE gives DATABASE_URL's user its password: a real PostgreSQL accepts it, URL characters and all", async () => {
    const role = `cfg_${crypto.randomBytes(4).toString('hex')}`;
    const password = `p/+=@:%?#&${crypto.randomBytes(6).toString('base64')} x`;
    const admin = postgres(adminUrl(), { max: 1, onnotice: () => {} });
    await admin.unsafe(`create role ${role} login password '${password.replaceAll("'", "''")}'`);
    const base = new URL(adminUrl());
    base.username = role;
    base.password = '';
    try {
      const c = loadConfig({ DATABASE_URL: base.href, DATABASE_PASSWORD_FILE: file('db-password', `${password}\n`) });
      expect(c.DATABASE_URL).not.toBe(base.href);
      const sql = postgres(c.DATABASE_URL!, { max: 1, onnotice: () => {} });
      expect((await sql<{ u: string }[]>`select current_user as u`)[0].u).toBe(role);
      await sql.end();
      // the server does check it: another password is refused
      const wrong = loadConfig({ DATABASE_URL: base.href, DATABASE_PASSWORD_FILE: file('db-wrong', 'not it') });
      const refused = postgres(wrong.DATABASE_URL!, { max: 1, onnotice: () => {}, connect_timeout: 10 });
      await expect(refused`select 1`).rejects.toMatchObject({ code: '28P01' });
      await refused.end();
    } finally {
      await admin.unsafe(`drop role if exists ${role}`);
      await admin.end();
    }
  });

  it('a file beside its plain variable must hold the same value (a cluster worker inherits both); unreadable or empty files stop start-up', () => {
    const internal = file('same', `${secret}\n`);
    expect(loadConfig({ INTERNAL_API_SECRET: secret, INTERNAL_API_SECRET_FILE: internal }).INTERNAL_API_SECRET).toBe(secret);
    const other = 'O'.repeat(40);
    expect(() => loadConfig({ INTERNAL_API_SECRET: other, INTERNAL_API_SECRET_FILE: internal })).toThrow(/INTERNAL_API_SECRET_FILE=".*same": INTERNAL_API_SECRET is set too, to another value/);
    expect(() => loadConfig({ INTERNAL_API_SECRET_FILE: path.join(dir, 'missing') })).toThrow(/INTERNAL_API_SECRET_FILE=".*missing": cannot read the file \(ENOENT\)/);
    expect(() => loadConfig({ DATABASE_PASSWORD_FILE: file('empty', '\n') })).toThrow(/DATABASE_PASSWORD_FILE=".*empty": the file is empty/);
    expect(() => loadConfig({ DATABASE_PASSWORD: 'pw' })).toThrow(/DATABASE_PASSWORD: needs DATABASE_URL/);
    expect(loadConfig({ DATABASE_URL: 'postgres://gw@db:5432/gw', DATABASE_PASSWORD: 'a b' }).DATABASE_URL).toBe('postgres://gw:a%20b@db:5432/gw');
  });

  it('never shows a secret in a configuration error: a file-sourced value is named by its file, a plain one by its length', () => {
    const short = 'tooshort-secret-value';
    const fromFile = () => loadConfig({ INTERNAL_API_SECRET_FILE: file('short', short) });
    expect(fromFile).toThrow(ConfigError);
    expect(fromFile).toThrow(/INTERNAL_API_SECRET_FILE=".*short": at least 32 characters/);
    expect(fromFile).not.toThrow(new RegExp(short));
    const plain = () => loadConfig({ INTERNAL_API_SECRET: short });
    expect(plain).toThrow(`INTERNAL_API_SECRET=(${short.length} characters, not shown): at least 32 characters`);
    expect(plain).not.toThrow(new RegExp(short));
    expect(() => loadConfig({ DATABASE_URL_FILE: file('bad-url', 'postgres://u:hunter2@') })).not.toThrow(/hunter2/);
  });
});
