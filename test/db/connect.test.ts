import net from 'node:net';
import { afterEach, describe, expect, it } from 'vitest';
import { freePort } from '../../src/db/embedded.js';
import { describeDatabase, waitForDatabase } from '../../src/db/connect.js';
import { adminUrl } from '../helpers/db.js';

/** Collects the warn lines waitForDatabase logs; `onWarn` runs on each. */
function recorder(onWarn: (fields: Record<string, unknown>) => void = () => {}) {
  const warnings: { fields: Record<string, unknown>; msg: string }[] = [];
  const log = {
    warn: (fields: Record<string, unknown>, msg: string) => {
      warnings.push({ fields, msg });
      onWarn(fields);
    },
  } as never;
  return { log, warnings };
}

function urlOnPort(port: number): string {
  const u = new URL(adminUrl());
  u.hostname = '127.0.0.1';
  u.port = String(port);
  return u.toString();
}

let proxy: net.Server | undefined;
afterEach(async () => {
  await new Promise((r) => (proxy ? proxy.close(r) : r(null)));
  proxy = undefined;
});

describe('waitForDatabase', () => {
  it('fails after the configured bound with a clear message when nothing listens, logging each retry', async () => {
    const port = await freePort();
    const u = new URL(urlOnPort(port));
    [u.username, u.password] = ['gateway', 's3cret'];
    const url = u.toString();
    const { log, warnings } = recorder();
    const err = await waitForDatabase(url, { timeoutMs: 1200, log }).then(() => undefined, (e: Error) => e);
    expect(err?.message).toContain(`database 127.0.0.1:${port}/`);
    expect(err?.message).toContain('not reachable after 1200 ms');
    expect(err?.message).toContain('ECONNREFUSED');
    expect(err?.message).toContain('DATABASE_CONNECT_TIMEOUT_MS');
    expect(err?.message).not.toContain('s3cret');
    expect(warnings.length).toBeGreaterThan(0);
    expect(warnings[0].fields).toMatchObject({ attempt: 1, database: `127.0.0.1:${port}${new URL(url).pathname}` });
    expect(String(warnings[0].fields.cause)).toContain('ECONNREFUSED');
    expect(JSON.stringify(warnings)).not.toContain('s3cret');
  });

  it('succeeds when the database comes up during the wait (a TCP proxy to the real Postgres, started after the first refusal)', async () => {
    const port = await freePort();
    const target = new URL(adminUrl());
    let started = false;
    const { log, warnings } = recorder(() => {
      if (started) return;
      started = true;
      proxy = net.createServer((client) => {
        const upstream = net.connect(Number(target.port || 5432), target.hostname);
        client.pipe(upstream).pipe(client);
        client.on('error', () => upstream.destroy());
        upstream.on('error', () => client.destroy());
      });
      proxy.listen(port, '127.0.0.1');
    });
    await waitForDatabase(urlOnPort(port), { timeoutMs: 60_000, log });
    expect(started).toBe(true);
    expect(warnings.length).toBeGreaterThanOrEqual(1);
  });

  it('fails at once, without waiting out the bound, when the database does not exist', async () => {
    const u = new URL(adminUrl());
    u.pathname = '/no_such_database_here';
    const { log, warnings } = recorder();
    await expect(waitForDatabase(u.toString(), { timeoutMs: 600_000, log })).rejects.toThrow(/refused the gateway: 3D000 .*no_such_database_here/);
    expect(warnings).toEqual([]);
  });

  it('describes a URL without its credentials', () => {
    expect(describeDatabase('postgres://gateway:pw@postgres:5432/gateway')).toBe('postgres:5432/gateway');
    expect(describeDatabase('postgres://u:pw@db/x')).toBe('db:5432/x');
  });
});
