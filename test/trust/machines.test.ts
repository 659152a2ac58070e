import { createActor, type AnyMachineSnapshot, type AnyStateMachine } from 'xstate';
import { describe, expect, it } from 'vitest';
import { thingMachine, type ThingInput } from '../../machines/thing.js';
import { licenseMachine, type LicenseInput } from '../../machines/license.js';
import { deviceCertificateMachine, type DeviceCertificateInput } from '../../machines/deviceCertificate.js';
import { accessCodeMachine, type AccessCodeInput } from '../../machines/accessCode.js';
import { enrollmentTokenMachine, type EnrollmentTokenInput } from '../../machines/enrollmentToken.js';

const T0 = '2026-11-23T10:00:00.000Z';
const later = (ms: number) => new Date(Date.parse(T0) + ms).toISOString();

/** Starts an actor of the machine, collecting what it emits. */
function run(machine: AnyStateMachine, input: ThingInput | LicenseInput | DeviceCertificateInput | AccessCodeInput | EnrollmentTokenInput) {
  const emitted: { type: string }[] = [];
  const actor = createActor(machine, { input });
  actor.on('*', (e: { type: string }) => emitted.push(e));
  actor.start();
  return { actor: actor as unknown as { getSnapshot(): AnyMachineSnapshot; send(e: { type: string; [k: string]: unknown }): void }, emitted };
}

describe('thing machine', () => {
  const identity = { id: 't1', accountId: 'a1', manufacturer: 'Acme', model: 'FFF1:8001', serial: 'S1' };

  it('a registered thing waits in REGISTERED and enrolls once; an enrolled one is born ROLLEDOFF', () => {
    const registered = run(thingMachine, identity);
    expect(registered.actor.getSnapshot().value).toBe('REGISTERED');
    expect(registered.emitted).toEqual([]);
    registered.actor.send({ type: 'ENROLL', at: T0, method: 'enrollment_token' });
    expect(registered.actor.getSnapshot().value).toBe('ROLLEDOFF');
    expect(registered.actor.getSnapshot().context).toMatchObject({ enrolledBy: 'enrollment_token', enrolledAt: T0 });
    expect(registered.emitted.map((e) => e.type)).toEqual(['thing.enrolled']);
    expect(registered.actor.getSnapshot().can({ type: 'ENROLL', at: T0, method: 'x' })).toBe(false);

    const born = run(thingMachine, { ...identity, enrolledBy: 'claim_token', enrolledAt: T0 });
    expect(born.actor.getSnapshot().value).toBe('ROLLEDOFF');
    // one event per new thing: thing.enrolled is also the state-change log's first row
    expect(born.emitted.map((e) => e.type)).toEqual(['thing.enrolled']);
    expect(born.emitted[0]).toMatchObject({ type: 'thing.enrolled', thingId: 't1', from: 'REGISTERED', to: 'ROLLEDOFF', event: 'ENROLL', at: T0 });
  });

  it('REVOKE is accepted once, in any state; a revoked thing neither enrolls nor transfers', () => {
    const { actor, emitted } = run(thingMachine, identity);
    const revoke = { type: 'REVOKE' as const, at: T0, serial: null, by: 'op' };
    expect(actor.getSnapshot().can(revoke)).toBe(true);
    actor.send(revoke);
    expect(actor.getSnapshot().context.revokedAt).toBe(T0);
    expect(actor.getSnapshot().can({ ...revoke, at: later(1000) })).toBe(false);
    expect(actor.getSnapshot().can({ type: 'ENROLL', at: T0, method: 'enrollment_token' })).toBe(false);
    expect(actor.getSnapshot().can({ type: 'TRANSFER', at: T0, accountId: 'a2' })).toBe(false);
    expect(emitted.map((e) => e.type)).toEqual(['thing.revoked']);
  });

  it('TRANSFER moves the owner and tells the new one', () => {
    const { actor, emitted } = run(thingMachine, { ...identity, enrolledBy: 'claim_token', enrolledAt: T0 });
    actor.send({ type: 'TRANSFER', at: T0, accountId: 'a2' });
    expect(actor.getSnapshot().context.accountId).toBe('a2');
    expect(emitted.at(-1)).toEqual({ type: 'thing.joined', thingId: 't1', from: 'a1', to: 'a2', at: T0 });
  });
});

describe('thing lifecycle', () => {
  const enrolled = { id: 't1', accountId: 'a1', manufacturer: 'Acme', model: 'FFF1:8001', serial: 'S1', enrolledBy: 'claim_token', enrolledAt: T0 };

  it('each step is accepted only in its state; ANNIHILATE ends it from any state and revokes once', () => {
    const { actor, emitted } = run(thingMachine, enrolled);
    const at = later(1000);
    expect(actor.getSnapshot().can({ type: 'ACTIVATE', at })).toBe(false);
    for (const [type, state] of [['PROVISION', 'PROVISIONED'], ['FACTORY_DONE', 'IN_FACTORY'], ['FACTORY_HANDOVER', 'HANDOVER_PENDING'], ['ACTIVATE', 'ACTIVATED'], ['DEACTIVATE', 'DEACTIVATED'], ['ACTIVATE', 'ACTIVATED']]) {
      actor.send({ type, at });
      expect(actor.getSnapshot().value).toBe(state);
      expect(actor.getSnapshot().context.stateAt).toBe(at);
    }
    expect(actor.getSnapshot().can({ type: 'FACTORY_HANDOVER', at })).toBe(false);
    actor.send({ type: 'ANNIHILATE', at, serial: 'ab', by: 'op' });
    expect(actor.getSnapshot().value).toBe('ANNIHILATED');
    expect(actor.getSnapshot().context.revokedAt).toBe(at);
    expect(actor.getSnapshot().can({ type: 'ANNIHILATE', at, serial: null, by: 'op' })).toBe(false);
    expect(emitted.filter((e) => e.type === 'thing.revoked')).toEqual([{ type: 'thing.revoked', thingId: 't1', serial: 'ab', by: 'op' }]);
    // the birth is thing.enrolled; the 7 steps after it are thing.stateChanged
    expect(emitted.filter((e) => e.type === 'thing.enrolled')).toHaveLength(1);
    expect(emitted.filter((e) => e.type === 'thing.stateChanged')).toHaveLength(7);
  });

  it('a revoked thing makes no step but can be annihilated without a second thing.revoked', () => {
    const { actor, emitted } = run(thingMachine, enrolled);
    actor.send({ type: 'REVOKE', at: T0, serial: 'ab', by: 'op' });
    expect(actor.getSnapshot().can({ type: 'PROVISION', at: T0 })).toBe(false);
    actor.send({ type: 'ANNIHILATE', at: later(1), serial: null, by: 'op' });
    expect(actor.getSnapshot().value).toBe('ANNIHILATED');
    expect(actor.getSnapshot().context.revokedAt).toBe(T0);
    expect(emitted.filter((e) => e.type === 'thing.revoked')).toHaveLength(1);
  });
});

describe('license machine', () => {
  const automatic = { approval: 'automatic' as const, thingRevoked: false, enrolled: true };
  const manual = { ...automatic, approval: 'manual' as const };
  const request = { id: 'l1', thingId: 't1', accountId: 'a1', serial: 'S1', kind: 'request' as const, features: ['ota'], requestedAt: T0, grounds: automatic };
  const DAY = 86_400_000;

  it('automatic decisions are born decided and announce nothing; a grant runs 30 days', () => {
    const granted = run(licenseMachine, request);
    expect(granted.actor.getSnapshot().value).toBe('granted');
    expect(granted.actor.getSnapshot().context).toMatchObject({ decidedAt: T0, expiresAt: later(30 * DAY) });
    const denied = run(licenseMachine, { ...request, grounds: { ...automatic, thingRevoked: true } });
    expect(denied.actor.getSnapshot().value).toBe('denied');
    expect(denied.actor.getSnapshot().status).toBe('done');
    expect(denied.actor.getSnapshot().context).toMatchObject({ reason: 'thing revoked', decidedAt: T0, features: ['ota'] });
    expect([...granted.emitted, ...denied.emitted]).toEqual([]);
  });

  it('the machine decides at birth: revoked outranks not enrolled outranks manual approval; renewals are automatic; a refused renewal records no features', () => {
    const born = (input: Partial<LicenseInput>) => run(licenseMachine, { ...request, ...input }).actor.getSnapshot();
    expect(born({ grounds: { ...manual, thingRevoked: true, enrolled: false } }).context.reason).toBe('thing revoked');
    expect(born({ grounds: { ...manual, enrolled: false } }).context.reason).toBe('thing not enrolled');
    expect(born({ grounds: manual }).value).toBe('pending');
    expect(born({ grounds: manual, kind: 'renew' }).value).toBe('granted');
    const refused = born({ grounds: { refusal: 'license invalid or expired' }, kind: 'renew' });
    expect(refused.value).toBe('denied');
    expect(refused.context).toMatchObject({ reason: 'license invalid or expired', features: [] });
  });

  it('a pending request is announced and decided once; a revoked thing\'s request can only be denied', () => {
    const { actor, emitted } = run(licenseMachine, { ...request, grounds: manual });
    expect(actor.getSnapshot().value).toBe('pending');
    expect(emitted).toEqual([{ type: 'license.requested', licenseId: 'l1', thingId: 't1', serial: 'S1', features: ['ota'] }]);
    expect(actor.getSnapshot().can({ type: 'GRANT', at: T0, by: 'op', thingRevoked: true })).toBe(false);
    actor.send({ type: 'GRANT', at: later(DAY), by: 'op', thingRevoked: false });
    expect(actor.getSnapshot().context).toMatchObject({ decidedAt: later(DAY), decidedBy: 'op', expiresAt: later(31 * DAY) });
    expect(actor.getSnapshot().can({ type: 'DENY', at: T0, by: 'op', reason: 'late' })).toBe(false);
  });

  it('RENEW is possible while the granted license has not expired', () => {
    const { actor } = run(licenseMachine, request);
    expect(actor.getSnapshot().can({ type: 'RENEW', at: later(30 * DAY - 1) })).toBe(true);
    expect(actor.getSnapshot().can({ type: 'RENEW', at: later(30 * DAY) })).toBe(false);
    const denied = run(licenseMachine, { ...request, grounds: { refusal: 'x' } });
    expect(denied.actor.getSnapshot().can({ type: 'RENEW', at: T0 })).toBe(false);
  });
});

describe('thing machine: factory deliveries', () => {
  const enrolled = { id: 't1', accountId: 'a1', manufacturer: 'Acme', model: 'FFF1:8001', serial: 'S1', enrolledBy: 'claim_token', enrolledAt: T0 };

  it('FACTORY_DELIVERY is open from ROLLEDOFF to IN_FACTORY, closed by factory-handover, by revocation and before enrollment', () => {
    const open = (a: ReturnType<typeof run>['actor']) => a.getSnapshot().can({ type: 'FACTORY_DELIVERY' });
    expect(open(run(thingMachine, { id: 't0', accountId: 'a1', manufacturer: 'Acme', model: 'm', serial: 'S0' }).actor)).toBe(false);
    const { actor } = run(thingMachine, enrolled);
    const at = later(1);
    expect(open(actor)).toBe(true);
    actor.send({ type: 'PROVISION', at });
    expect(open(actor)).toBe(true);
    actor.send({ type: 'FACTORY_DONE', at });
    expect(open(actor)).toBe(true);
    actor.send({ type: 'FACTORY_HANDOVER', at });
    expect(open(actor)).toBe(false);
    const revoked = run(thingMachine, enrolled).actor;
    revoked.send({ type: 'REVOKE', at, serial: null, by: 'op' });
    expect(open(revoked)).toBe(false);
  });
});

describe('device certificate machine', () => {
  const cert = { serial: 'ab01', thingId: 't1', issuedAt: T0, notAfter: later(365 * 86_400_000), renewal: false };

  it('an enrollment\'s certificate is born in use; a renewal waits for its first use, accepted once', () => {
    expect(run(deviceCertificateMachine, cert).actor.getSnapshot().value).toBe('inUse');
    const { actor } = run(deviceCertificateMachine, { ...cert, renewal: true });
    expect(actor.getSnapshot().value).toBe('issued');
    expect(actor.getSnapshot().can({ type: 'FIRST_USE', at: T0 })).toBe(true);
    actor.send({ type: 'FIRST_USE', at: later(5) });
    expect(actor.getSnapshot().value).toBe('inUse');
    expect(actor.getSnapshot().context.usedAt).toBe(later(5));
    expect(actor.getSnapshot().can({ type: 'FIRST_USE', at: later(6) })).toBe(false);
  });

  it('superseded or revoked once, at the event\'s instant; then it authenticates nothing', () => {
    const old = run(deviceCertificateMachine, cert).actor;
    expect(old.getSnapshot().can({ type: 'AUTHENTICATE', at: later(10) })).toBe(true);
    old.send({ type: 'SUPERSEDE', at: later(10), by: 'cd02' });
    expect(old.getSnapshot().value).toBe('superseded');
    expect(old.getSnapshot().context).toMatchObject({ revokedAt: later(10), supersededBy: 'cd02' });
    expect(old.getSnapshot().can({ type: 'REVOKE', at: later(11) })).toBe(false);
    expect(old.getSnapshot().can({ type: 'AUTHENTICATE', at: later(11) })).toBe(false);
    const renewal = run(deviceCertificateMachine, { ...cert, renewal: true }).actor;
    renewal.send({ type: 'REVOKE', at: later(20) });
    expect(renewal.getSnapshot().value).toBe('revoked');
    expect(renewal.getSnapshot().can({ type: 'FIRST_USE', at: later(21) })).toBe(false);
  });

  it('AUTHENTICATE: live and before notAfter', () => {
    const { actor } = run(deviceCertificateMachine, cert);
    expect(actor.getSnapshot().can({ type: 'AUTHENTICATE', at: later(365 * 86_400_000 - 1) })).toBe(true);
    expect(actor.getSnapshot().can({ type: 'AUTHENTICATE', at: later(365 * 86_400_000) })).toBe(false);
  });
});

describe('access code machine', () => {
  const code = { id: 'c1', thingId: 't1', issuedByAccount: 'a1', expiresAt: later(1000) };

  it('single use before its expiry: the use and its account recorded; a second use and a late one refused', () => {
    const { actor } = run(accessCodeMachine, code);
    expect(actor.getSnapshot().can({ type: 'USE', at: later(1000), accountId: 'a2' })).toBe(false);
    actor.send({ type: 'USE', at: later(999), accountId: 'a2' });
    expect(actor.getSnapshot().value).toBe('used');
    expect(actor.getSnapshot().context).toMatchObject({ usedAt: later(999), usedByAccount: 'a2' });
    expect(actor.getSnapshot().can({ type: 'USE', at: later(999), accountId: 'a3' })).toBe(false);
  });
});

describe('enrollment token machine', () => {
  it('AUTHENTICATE until its expiry, used or not; an expired token never', () => {
    const token = { thingId: 't1', accountId: 'a1', issuedAt: T0, expiresAt: later(1000) };
    const { actor } = run(enrollmentTokenMachine, token);
    expect(actor.getSnapshot().can({ type: 'AUTHENTICATE', at: later(999) })).toBe(true);
    actor.send({ type: 'USE', at: later(10) });
    expect(actor.getSnapshot().value).toBe('used');
    expect(actor.getSnapshot().can({ type: 'AUTHENTICATE', at: later(999) })).toBe(true);
    expect(actor.getSnapshot().can({ type: 'AUTHENTICATE', at: later(1000) })).toBe(false);
    const expired = run(enrollmentTokenMachine, token).actor;
    expired.send({ type: 'EXPIRE', at: later(1000) });
    expect(expired.getSnapshot().can({ type: 'AUTHENTICATE', at: later(10) })).toBe(false);
  });
});
