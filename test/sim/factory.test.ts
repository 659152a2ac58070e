import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { runFactoryLine } from '../../src/sim/factory.js';
import { startTestGateway, type TestGateway } from '../helpers/gateway.js';

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
