import fs from 'node:fs';
import path from 'node:path';
import { Aedes } from 'aedes';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  AEDES_CONTRACT, AEDES_PATCH, AEDES_SOURCE_USES, AEDES_WRITTEN_FOR, AedesContractError, checkAedesContract, contractTargets,
  installedAedesVersion, packageDir, verifyContract, type ContractMember,
} from '../../src/broker/aedesInternals.js';
import { Broker } from '../../src/broker/broker.js';
import { createLogger } from '../../src/log.js';
import type { Pki } from '../../src/pki/pki.js';
import { makeServerPki, type TestServerPki } from '../helpers/testCa.js';

/**
 * The broker's contract with Aedes' internals (src/broker/aedesInternals.ts): it holds for the
 * installed Aedes, and a missing member fails loudly, naming the member and the installed version
 * (at broker start-up too).
 */
describe('the Aedes contract', () => {
  let aedes: Aedes;
  const version = installedAedesVersion();

  beforeAll(async () => {
    aedes = await Aedes.createBroker();
  });
  afterAll(async () => {
    await new Promise<void>((resolve) => aedes.close(() => resolve()));
  });

  it('the installed Aedes is the version the adapter and its patch are written for', () => {
    const pkg = JSON.parse(fs.readFileSync('package.json', 'utf8')) as { dependencies: Record<string, string> };
    expect(pkg.dependencies.aedes).toBe(AEDES_WRITTEN_FOR);
    expect(version).toBe(AEDES_WRITTEN_FOR);
    expect(fs.existsSync(AEDES_PATCH)).toBe(true);
  });

  it('every member the broker relies on is on a real Aedes instance, its client and their parts', async () => {
    await expect(checkAedesContract(aedes)).resolves.toBeUndefined();
    const targets = await contractTargets(aedes);
    for (const [owner, target] of Object.entries(targets)) expect(target, owner).toBeDefined();
    // the patch's additions are part of it
    expect(AEDES_CONTRACT.filter((m) => m.patch).map((m) => m.name).sort()).toEqual(['_inflight', '_waitingSends', 'forEachItem', 'releaseInWindow', 'sendInWindow']);
    // the probe client left nothing behind
    expect(aedes.connectedClients).toBe(0);
  });

  it('a member that is not there fails, naming it, the installed version, the patch and the adapter', async () => {
    const renamed: ContractMember = { owner: 'Client', name: '_parsingBatchRenamed', kind: 'number', usedBy: 'the fast lane' };
    const retyped: ContractMember = { owner: 'parser', name: '_stateCounter', kind: 'function', usedBy: 'the fast lane' };
    const err = await checkAedesContract(aedes, [...AEDES_CONTRACT, renamed, retyped]).then(() => undefined, (e: unknown) => e);
    expect(err).toBeInstanceOf(AedesContractError);
    const { message, gaps } = err as AedesContractError;
    expect(gaps).toEqual([
      'Client._parsingBatchRenamed is missing (a number); used by the fast lane',
      'parser._stateCounter is not a function; used by the fast lane',
    ]);
    expect(message).toContain(`Aedes ${version} (installed, node_modules/aedes)`);
    expect(message).toContain(AEDES_PATCH);
    expect(message).toContain('src/broker/aedesInternals.ts');
  });

  it('an Aedes without the patch (a copy of the client prototype without sendInWindow, a client without _inflight) fails naming both', async () => {
    const targets = await contractTargets(aedes);
    const proto = Object.getPrototypeOf(targets.Client) as Record<string, unknown>;
    const protoCopy = Object.create(Object.getPrototypeOf(proto) as object, Object.getOwnPropertyDescriptors(proto)) as Record<string, unknown>;
    delete protoCopy.sendInWindow;
    const client = Object.create(protoCopy, Object.getOwnPropertyDescriptors(targets.Client)) as Record<string, unknown>;
    delete client._inflight;
    let err: unknown;
    try {
      verifyContract({ ...targets, Client: client });
    } catch (e) {
      err = e;
    }
    expect(err).toBeInstanceOf(AedesContractError);
    expect((err as AedesContractError).version).toBe(version);
    expect((err as AedesContractError).gaps).toEqual([
      `Client._inflight is missing (a Set), added by ${AEDES_PATCH}; used by sendQuota (the Receive Maximum window)`,
      `Client.sendInWindow is missing (a function), added by ${AEDES_PATCH}; used by Aedes itself: QoS 1/2 sends within the Receive Maximum`,
    ]);
    // the real prototype is untouched
    expect(typeof proto.sendInWindow).toBe('function');
    expect(() => verifyContract(targets)).not.toThrow();
  });

  it('Aedes and mqemitter still use those members the way the broker relies on (their source)', () => {
    // mqemitter as Aedes loads it
    const dirs = { aedes: packageDir('aedes'), mqemitter: packageDir('mqemitter', path.join(packageDir('aedes'), 'aedes.js')) };
    for (const use of AEDES_SOURCE_USES) {
      const source = fs.readFileSync(path.join(dirs[use.pkg], use.file), 'utf8');
      if (typeof use.uses === 'string') expect(source, `${use.pkg}/${use.file}: ${use.why}`).toContain(use.uses);
      else expect(source, `${use.pkg}/${use.file}: ${use.why}`).toMatch(use.uses);
    }
  });

  it('no other broker file reaches into an Aedes object: every cast to Aedes internals is in the adapter', () => {
    const dir = 'src/broker';
    const reaching = /\b(?:client|aedes|emitter|mq|parser|c)\b\)?\s+as\s+unknown\s+as\b/;
    const offenders = fs.readdirSync(dir)
      .filter((f) => f.endsWith('.ts') && f !== 'aedesInternals.ts')
      .flatMap((f) => fs.readFileSync(path.join(dir, f), 'utf8').split('\n').map((line, i) => ({ at: `${f}:${i + 1}`, line })))
      .filter(({ line }) => reaching.test(line) || /\._(?:takingOver|notAuthorized|matcher|inflight|waitingSends)\b/.test(line.replace(/\/\/.*|^\s*\*.*/, '')));
    expect(offenders).toEqual([]);
  });

  describe('at broker start-up', () => {
    let certs: TestServerPki;
    let pki: Pki;
    const log = createLogger('silent', false);
    beforeAll(() => {
      certs = makeServerPki();
      // the four PEMs the TLS listener reads (a throw-away CA stands in for the gateway's)
      pki = { serverKeyPem: certs.keyPem, serverCertPem: certs.certPem, rootPem: certs.caPem, deviceCaPem: certs.caPem } as Pki;
    });
    afterAll(() => certs.remove());

    it('an Aedes whose Client lacks a patched method: the start fails naming it and the Aedes version', async () => {
      // as if installed without the patch: taken off the real Client prototype for this start only
      const proto = Object.getPrototypeOf((await contractTargets(aedes)).Client) as Record<string, unknown>;
      const releaseInWindow = proto.releaseInWindow;
      delete proto.releaseInWindow;
      let err: unknown;
      try {
        const broker = await Broker.start({ host: '127.0.0.1', port: 0, pki, log });
        await broker.close();
      } catch (e) {
        err = e;
      } finally {
        proto.releaseInWindow = releaseInWindow;
      }
      expect(err).toBeInstanceOf(AedesContractError);
      expect((err as Error).message).toContain(`Aedes ${version} (installed, node_modules/aedes) lacks what the MQTT broker relies on:\n  - Client.releaseInWindow is missing (a function), added by ${AEDES_PATCH}`);
      expect((err as AedesContractError).gaps).toHaveLength(1);
    });

    it('the same start with the patch in place listens', async () => {
      const broker = await Broker.start({ host: '127.0.0.1', port: 0, pki, log });
      try {
        expect(broker.server.listening).toBe(true);
        expect(broker.port).toBeGreaterThan(0);
      } finally {
        await broker.close();
      }
    });
  });
});
