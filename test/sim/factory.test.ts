import { spawn } from 'node:child_process';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { runFactoryLine } from '../../src/sim/factory.js';
import { startTestGateway, type TestGateway } from '../helpers/gateway.js';
import { compiled } from '../helpers/compiled.js';

/** The factory-line simulator against a real gateway: signed enrollments, sagas, a backend that reports legs. */
let gw: TestGateway;

beforeAll(async () => {
  gw = await startTestGateway({ ALLOW_PRIVATE_TARGETS: 'true', PROVISION_LEG_ATTEMPTS: '2', PROVISION_LEG_RETRY_SECONDS: '1' });
});
afterAll(async () => gw?.close());

describe('factory-line simulator', () => {
  it('enrolls and provisions every device (IN_FACTORY); with fail-rate 1 every run fails and the things return to ROLLEDOFF', async () => {
    const ok = await runFactoryLine({ baseUrl: gw.httpUrl, devices: 6, concurrency: 3, failRate: 0, serialPrefix: 'OK', timeoutSeconds: 60 });
    expect(ok).toMatchObject({ devices: 6, enrolled: 6, provisioned: 6, inFactory: 6, failedRuns: 0, badSignatures: 0, errorCount: 0 });
    expect(ok.legCalls).toBe(12); // identify and provision for each
    const [{ n }] = await gw.db.sql<{ n: number }[]>`select count(*)::int as n from things where serial like 'OK-%' and lifecycle_state = 'IN_FACTORY'`;
    expect(n).toBe(6);

    const bad = await runFactoryLine({ baseUrl: gw.httpUrl, devices: 3, concurrency: 3, failRate: 1, serialPrefix: 'BAD', timeoutSeconds: 60 });
    expect(bad).toMatchObject({ enrolled: 3, provisioned: 3, inFactory: 0, failedRuns: 3, errorCount: 0, unexpectedFailedRuns: 0 });
    expect(Object.keys(bad.failureCauses)).toHaveLength(1);
    expect(Object.entries(bad.failureCauses)[0]).toEqual([expect.stringMatching(/^identify leg: .*simulated station failure/), 3]);
    const states = await gw.db.sql<{ lifecycle_state: string }[]>`select lifecycle_state from things where serial like 'BAD-%'`;
    expect(states.map((s) => s.lifecycle_state)).toEqual(['ROLLEDOFF', 'ROLLEDOFF', 'ROLLEDOFF']);
  });
});

describe('sim:factory CLI', () => {
  it('against a gateway that may not call loopback targets: every run fails, the summary names the cause, exit 1', async () => {
    const strict = await startTestGateway({ PROVISION_LEG_ATTEMPTS: '1', PROVISION_LEG_RETRY_SECONDS: '1' });
    try {
      const res = await new Promise<{ code: number; out: string; err: string }>((resolve) => {
        const proc = spawn(process.execPath, [compiled('src/sim/factoryCli.ts'), '--url', strict.httpUrl, '--devices', '2', '--concurrency', '2', '--timeout', '60', '--no-progress']);
        let out = '';
        let err = '';
        proc.stdout.on('data', (d) => (out += d));
        proc.stderr.on('data', (d) => (err += d));
        proc.on('exit', (code) => resolve({ code: code ?? 1, out, err }));
      });
      expect(res.code, res.err).toBe(1);
      const summary = JSON.parse(res.out);
      expect(summary).toMatchObject({ enrolled: 2, provisioned: 2, inFactory: 0, failedRuns: 2, unexpectedFailedRuns: 2 });
      const [[cause, n]] = Object.entries(summary.failureCauses as Record<string, number>);
      expect(n).toBe(2);
      expect(cause).toMatch(/^identify leg: .+/);
      expect(cause).not.toContain('simulated');
      expect(res.err).toContain(`2 run(s) failed: ${cause}`);
    } finally {
      await strict.close();
    }
  });
});
