import fs from 'node:fs';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { expectProblem, startTestGateway, type TestGateway } from '../helpers/gateway.js';

/** The console's pages and assets over HTTP (no browser needed). */
describe('console routes', () => {
  let gw: TestGateway;
  beforeAll(async () => {
    gw = await startTestGateway();
  });
  afterAll(async () => gw?.close());

  it('serves each page as the shell around its fragment, with a CSP that allows only the gateway\'s scripts', async () => {
    for (const [path, script, marker] of [
      ['/console/', 'notifications', 'id="feed"'],
      ['/console/things', 'fleet', 'id="filters"'],
      ['/console/things/7c1f1c5e-3a52-4a8e-9d7e-0f2a3b4c5d6e', 'device', 'id="revoke-dialog"'],
      ['/console/ota', 'ota', 'id="rollout-form"'],
      ['/console/provisioning', 'provisioning', 'id="group-form"'],
      ['/console/iam', 'iam', 'id="key-form"'],
      ['/console/sessions', 'sessions', 'id="sessions"'],
    ]) {
      const res = await gw.http.get(path);
      expect(res.status, path).toBe(200);
      expect(res.headers.get('content-type')).toBe('text/html; charset=utf-8');
      expect(res.headers.get('content-security-policy')).toContain("script-src 'self';");
      expect(res.text).toContain(`<script type="module" src="/console/assets/${script}.js"></script>`);
      expect(res.text).toContain(marker);
      expect(res.text).toContain('id="signin"');
      expect(res.text).not.toMatch(/\{\{\w+\}\}/);
    }
  });

  it('serves the assets with their types; anything else is a problem, never a file of the server', async () => {
    const js = await gw.http.get('/console/assets/fleet.js');
    expect(js.status).toBe(200);
    expect(js.headers.get('content-type')).toBe('text/javascript; charset=utf-8');
    expect((await gw.http.get('/console/assets/console.css')).headers.get('content-type')).toBe('text/css; charset=utf-8');
    expectProblem(await gw.http.get('/console/assets/..%2Froutes.ts'), 400);
    expectProblem(await gw.http.get('/console/assets/other.js'), 400);
    expectProblem(await gw.http.get('/console/things/not-a-uuid'), 400);
  });

  it('no console script writes markup from strings (device data must stay text)', () => {
    const dir = new URL('../../src/console/assets/', import.meta.url);
    for (const file of fs.readdirSync(dir).filter((f) => f.endsWith('.js'))) {
      const source = fs.readFileSync(new URL(file, dir), 'utf8');
      expect(source, file).not.toMatch(/innerHTML|outerHTML|insertAdjacentHTML|document\.write/);
    }
  });
});
