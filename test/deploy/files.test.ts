import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { createRequire } from 'node:module';
import { describe, expect, it } from 'vitest';
import semver from 'semver';
import { parse } from 'yaml';
import Fastify from 'fastify';
import cookiePlugin from '@fastify/cookie';
import { loadConfig } from '../../src/config.js';

// The deployment files agree with each other and with the code: what docker compose would run
// (without Docker), the Node version every dependency accepts, and the npm overrides that make it so.
const read = (file: string) => fs.readFileSync(file, 'utf8');
// merge keys (<<) as docker compose resolves them
const compose = parse(read('docker-compose.yml'), { merge: true });
const pkg = JSON.parse(read('package.json'));
const gateways = ['gateway-a', 'gateway-b'].map((name) => ({ name, ...compose.services[name] }));

/** `${VAR}`, `${VAR-default}`, `${VAR:-default}`, `${VAR:?message}` in every string, resolved from `env` as docker compose does. */
function interpolate<T>(value: T, env: Record<string, string>): T {
  if (typeof value === 'string') {
    return value.replace(/\$\{(\w+)(?:(:?[-?])([^}]*))?\}/g, (_, name: string, op: string | undefined, arg: string) => {
      const v = env[name];
      const missing = v === undefined || (op?.startsWith(':') === true && v === '');
      if (op === undefined) return v ?? '';
      if (op.endsWith('-')) return missing ? arg : v;
      if (missing) throw new Error(`required variable ${name} is missing a value: ${arg}`);
      return v;
    }) as T;
  }
  if (Array.isArray(value)) return value.map((v) => interpolate(v, env)) as T;
  if (value && typeof value === 'object') return Object.fromEntries(Object.entries(value).map(([k, v]) => [k, interpolate(v, env)])) as T;
  return value;
}
const ISSUERS = 'https://sso.example.com/realms/platform,https://sso.example.com/realms/acc-1';
/** the compose file as `docker compose up` resolves it with only OIDC_ISSUERS in .env */
const resolved = (env: Record<string, string> = { OIDC_ISSUERS: ISSUERS }) => interpolate(compose, env);

describe('docker-compose.yml', () => {
  it('builds one image that both gateways run', () => {
    const built = Object.entries<any>(compose.services).filter(([, s]) => s.build);
    expect(built.map(([name]) => name)).toEqual(['gateway-a']);
    expect(gateways.map((g) => g.image)).toEqual([built[0][1].image, built[0][1].image]);
    expect(gateways.every((g) => g.command === undefined)).toBe(true);
  });

  it('restarts every service, health-checks each, and starts a service only once what it needs is healthy', () => {
    for (const [name, s] of Object.entries<any>(compose.services)) {
      expect(s.restart, name).toBe('unless-stopped');
      for (const [dep, cond] of Object.entries<any>(s.depends_on ?? {})) {
        expect(cond, `${name} -> ${dep}`).toEqual({ condition: 'service_healthy' });
        expect(compose.services[dep].healthcheck?.test, `${dep} has a healthcheck`).toBeDefined();
      }
    }
    expect(compose.services.postgres.healthcheck.test).toContain('pg_isready');
    expect(compose.services.redis.healthcheck.test).toEqual(['CMD', 'redis-cli', 'ping']);
    for (const g of gateways) {
      expect(g.healthcheck.test.join(' ')).toContain('http://127.0.0.1:8080/readyz');
      expect(Object.keys(g.depends_on).sort()).toEqual(['postgres', 'redis']);
    }
    expect(Object.keys(compose.services.lb.depends_on).sort()).toEqual(['gateway-a', 'gateway-b']);
  });

  it('gateways listen on all interfaces, share the database, Redis and PKI, and trust only the LB as a proxy', () => {
    const lbAddress = compose.services.lb.networks.default.ipv4_address;
    const subnet = compose.networks.default.ipam.config[0].subnet;
    expect(lbAddress.startsWith(subnet.split('.').slice(0, 3).join('.'))).toBe(true);
    for (const g of gateways) {
      expect(g.environment).toMatchObject({ HTTP_HOST: '0.0.0.0', TRUSTED_PROXIES: lbAddress, NODE_ID: g.name, REDIS_URL: 'redis://redis:6379' });
      expect(new URL(g.environment.DATABASE_URL).host).toBe('postgres:5432');
      expect(g.volumes).toEqual(['certs:/app/certs']);
    }
    expect(gateways[0].environment.NODE_ID).not.toBe(gateways[1].environment.NODE_ID);
  });

  it('runs with a real OIDC issuer setting, required, and no development token issuer anywhere (issue 37)', () => {
    expect(() => resolved({})).toThrow(/OIDC_ISSUERS is missing a value: set OIDC_ISSUERS in \.env/);
    expect(read('docker-compose.yml')).not.toMatch(/DEV_TOKEN_REMOTE/);
    for (const [name, s] of Object.entries<any>(resolved().services)) {
      expect(s.profiles, `${name} has no profile`).toBeUndefined();
      if (!gateways.some((g) => g.name === name)) {
        expect(Object.keys(s.environment ?? {}).filter((k) => k.startsWith('DEV_') || k.startsWith('OIDC_')), name).toEqual([]);
        continue;
      }
      expect(s.environment).toMatchObject({ OIDC_ISSUERS: ISSUERS, DEV_ISSUER: 'false', OIDC_AUDIENCE: '' });
    }
  });

  it('passes secrets as files (compose secrets), never as values in the environment; one internal secret for every node', () => {
    const secretNames = Object.keys(compose.secrets);
    expect(secretNames.sort()).toEqual(['db_password', 'internal_api_secret']);
    for (const name of secretNames) expect(compose.secrets[name]).toEqual({ file: `./secrets/${name}` });
    for (const [name, s] of Object.entries<any>(compose.services)) {
      const env = s.environment ?? {};
      // no secret value: only *_FILE names of a mounted secret
      expect(Object.keys(env).filter((k) => /PASSWORD|SECRET/.test(k) && !k.endsWith('_FILE')), name).toEqual([]);
      for (const [k, v] of Object.entries<string>(env).filter(([k]) => k.endsWith('_FILE'))) {
        const secret = /^\/run\/secrets\/(\w+)$/.exec(v)?.[1];
        expect(secret, `${name} ${k}`).toBeDefined();
        expect(s.secrets, `${name} mounts ${secret}`).toContain(secret);
      }
      for (const v of Object.values<string>(env)) expect(String(v)).not.toMatch(/:\/\/[^/@\s]*:[^/@\s]*@/);
    }
    // the database password: one file, read by the database server and by every node
    expect(compose.services.postgres.environment.POSTGRES_PASSWORD_FILE).toBe('/run/secrets/db_password');
    for (const g of gateways) {
      expect(g.secrets).toEqual(['db_password', 'internal_api_secret']);
      expect(g.environment).toMatchObject({ DATABASE_PASSWORD_FILE: '/run/secrets/db_password', INTERNAL_API_SECRET_FILE: '/run/secrets/internal_api_secret' });
      expect(new URL(g.environment.DATABASE_URL).password).toBe('');
    }
    // the secrets folder stays out of git and out of the image's build context
    expect(read('.gitignore').split('\n')).toContain('/secrets/');
    expect(read('.dockerignore').split('\n')).toContain('secrets');
  });

  it("a node's environment, as compose gives it, is a configuration the gateway accepts: issuer from OIDC_ISSUERS, secrets read from the files", () => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'compose-secrets-'));
    const contents: Record<string, string> = { db_password: 'pg pass/+=%\n', internal_api_secret: `${'k'.repeat(44)}\n` };
    for (const [name, text] of Object.entries(contents)) fs.writeFileSync(path.join(dir, name), text);
    const configs = gateways.map((g) => {
      const env = Object.fromEntries(Object.entries<string>(resolved().services[g.name].environment)
        .map(([k, v]) => [k, String(v).replace(/^\/run\/secrets\//, `${dir}/`)]));
      return loadConfig(env);
    });
    for (const c of configs) {
      expect(c).toMatchObject({ DEV_ISSUER: false, DEV_TOKEN_REMOTE: false, HTTP_HOST: '0.0.0.0', OIDC_ISSUERS: ISSUERS.split(','), embeddedDatabase: false });
      expect(c.DATABASE_URL).toBe('postgres://gateway:pg%20pass%2F%2B%3D%25@postgres:5432/gateway');
      expect(c.INTERNAL_API_SECRET).toBe('k'.repeat(44));
    }
    expect(configs[0].INTERNAL_API_SECRET).toBe(configs[1].INTERNAL_API_SECRET);
  });

  it('mounts docs/haproxy-mqtt-tls.cfg into the LB, whose default addresses are the compose services and ports (issue 35)', () => {
    expect(compose.services.lb.volumes).toEqual(['./docs/haproxy-mqtt-tls.cfg:/usr/local/etc/haproxy/haproxy.cfg:ro', 'certs:/app/certs:ro']);
    const defaults = Object.fromEntries([...read('docs/haproxy-mqtt-tls.cfg').matchAll(/"\$\{(\w+)-([^}]+)\}"/g)].map((m) => [m[1], m[2]]));
    const lbAddress = compose.services.lb.networks.default.ipv4_address;
    const env = resolved().services['gateway-a'].environment;
    expect(defaults).toEqual({
      LB_THREADS: '2', LB_MAXCONN: '200000', LB_ADMIN_BIND: `ipv4@${lbAddress}:9999`,
      LB_HTTP_BIND: ':8080', GATEWAY_A_HTTP: 'gateway-a:8080', GATEWAY_B_HTTP: 'gateway-b:8080',
      LB_MQTT_BIND: ':8883', GATEWAY_A_MQTT: `gateway-a:${env.MQTT_PROXY_PORT}`, GATEWAY_B_MQTT: `gateway-b:${env.MQTT_PROXY_PORT}`,
      TLS_CERT: '/app/certs/server.crt', TLS_CA: '/app/certs/ca-bundle.pem', TLS_CRL: env.HAPROXY_CRL_PATH,
    });
    // the nodes push CRLs to the LB's admin socket and take PROXY headers from it alone
    expect(env).toMatchObject({ HAPROXY_RUNTIME_API: `${lbAddress}:9999`, TRUSTED_PROXIES: lbAddress });
    expect(path.dirname(env.HAPROXY_CRL_PATH)).toBe('/app/certs');
    // the docs/haproxy.cfg passthrough alternative keeps the compose names
    const passthrough = Object.fromEntries([...read('docs/haproxy.cfg').matchAll(/"\$\{(\w+)-([^}]+)\}"/g)].map((m) => [m[1], m[2]]));
    expect(passthrough).toMatchObject({ LB_MQTT_BIND: ':8883', GATEWAY_A_MQTT: 'gateway-a:8883' });
  });

  it("publishes only the LB: plain HTTP on the host's loopback unless LB_HTTP_PUBLISH says otherwise, MQTT/TLS on every interface", () => {
    const published = Object.entries<any>(resolved().services).filter(([, s]) => s.ports).map(([name]) => name);
    expect(published).toEqual(['lb']);
    expect(resolved().services.lb.ports).toEqual(['127.0.0.1:8080:8080', '8883:8883']);
    expect(resolved({ OIDC_ISSUERS: ISSUERS, LB_HTTP_PUBLISH: '0.0.0.0:8080', LB_MQTT_PUBLISH: '10.0.0.5:8883' }).services.lb.ports)
      .toEqual(['0.0.0.0:8080:8080', '10.0.0.5:8883:8883']);
  });
});

describe('Dockerfile and Node version', () => {
  const dockerfile = read('Dockerfile');

  it('runs as an unprivileged user, node as PID 1, on a Node major inside package.json engines', () => {
    expect(dockerfile).toMatch(/^USER node$/m);
    expect(dockerfile).toMatch(/^CMD \["node", "--import", "tsx", "src\/main.ts"\]$/m);
    expect(dockerfile).toMatch(/npm ci --omit=dev/);
    const major = /^ARG NODE_IMAGE=node:(\d+)-/m.exec(dockerfile)?.[1];
    expect(major).toBeDefined();
    // the image's tag follows the newest release of the major: every release from its LTS line on must fit
    expect(semver.satisfies(`${major}.99.0`, pkg.engines.node)).toBe(true);
    expect(semver.satisfies(process.version, pkg.engines.node), `this machine's ${process.version}`).toBe(true);
  });

  it('every package in the lockfile declares engines that accept package.json engines', () => {
    const lock = JSON.parse(read('package-lock.json'));
    const refusing = Object.entries<any>(lock.packages)
      .filter(([name, p]) => name && typeof p.engines?.node === 'string' && !semver.subset(pkg.engines.node, p.engines.node))
      .map(([name, p]) => `${name}@${p.version} wants node ${p.engines.node}`);
    expect(refusing).toEqual([]);
  });

  it('the overridden cookie and content-disposition give Fastify what it calls (cookies over a real socket, inject cookies)', async () => {
    const app = Fastify();
    await app.register(cookiePlugin);
    app.get('/c', async (request, reply) => {
      reply.setCookie('session', 'a b;c', { path: '/', httpOnly: true });
      return { got: request.cookies };
    });
    await app.listen({ host: '127.0.0.1', port: 0 });
    try {
      const res = await fetch(`http://127.0.0.1:${(app.server.address() as { port: number }).port}/c`, { headers: { cookie: 'x=1; y=%C3%A9' } });
      expect(await res.json()).toEqual({ got: { x: '1', y: 'é' } });
      expect(res.headers.get('set-cookie')).toMatch(/^session=a%20b%3Bc; Path=\/; HttpOnly(;|$)/);
      const injected = await app.inject({ url: '/c', cookies: { z: 'v w' } });
      expect(injected.json()).toEqual({ got: { z: 'v w' } });
    } finally {
      await app.close();
    }
    // @fastify/static (behind /docs) names downloads with content-disposition's `create`
    const staticRequire = createRequire(createRequire(import.meta.url).resolve('@fastify/static'));
    expect(staticRequire('content-disposition').create('report 1.pdf')).toBe('attachment; filename="report 1.pdf"');
  });
});
