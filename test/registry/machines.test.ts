import { describe, expect, it } from 'vitest';
import { createActor, type AnyStateMachine } from 'xstate';
import { registrarMachine } from '../../machines/registrar.js';
import { accessRequestMachine } from '../../machines/accessRequest.js';
import { factoryRegistrationMachine } from '../../machines/factoryRegistration.js';
import { eligibilityGrantMachine } from '../../machines/eligibilityGrant.js';
import { referenceRequestMachine } from '../../machines/referenceRequest.js';

const at = '2026-11-22T10:00:00.000Z';
const by = 'user-1';

function start<M extends AnyStateMachine>(machine: M, input: unknown) {
  const a = createActor(machine, { input } as never);
  const emitted: any[] = [];
  a.on('*', (e: any) => emitted.push(e));
  a.start();
  return { a, emitted, state: () => (a.getSnapshot() as any).value as string, can: (e: any) => (a.getSnapshot() as any).can(e) as boolean };
}

describe('registrar machine', () => {
  const input = { id: 'r1', accountId: 'acc', createdAt: at, createdBy: by };
  it('PENDING -> APPROVE -> APPROVED; decided once', () => {
    const r = start(registrarMachine, input);
    expect(r.state()).toBe('PENDING');
    expect(r.emitted[0]).toMatchObject({ type: 'registrar.created', registrarId: 'r1' });
    r.a.send({ type: 'APPROVE', at, by: 'op' });
    expect(r.state()).toBe('APPROVED');
    expect(r.a.getSnapshot().context).toMatchObject({ decidedAt: at, decidedBy: 'op', reason: null });
    expect(r.emitted.at(-1)).toMatchObject({ type: 'registrar.approved', by: 'op' });
    expect(r.can({ type: 'APPROVE', at, by })).toBe(false);
    expect(r.can({ type: 'REJECT', at, by })).toBe(false);
  });
  it('PENDING -> REJECT -> REJECTED (reason kept); no approval afterwards', () => {
    const r = start(registrarMachine, input);
    r.a.send({ type: 'REJECT', at, by: 'op', reason: 'unknown vendor' });
    expect(r.state()).toBe('REJECTED');
    expect(r.a.getSnapshot().context.reason).toBe('unknown vendor');
    expect(r.emitted.at(-1)).toMatchObject({ type: 'registrar.rejected', reason: 'unknown vendor' });
    expect(r.can({ type: 'APPROVE', at, by })).toBe(false);
  });
  it('canonical model is bound once: same model again accepted, another refused, in every live state', () => {
    for (const decide of [undefined, 'APPROVE', 'REJECT'] as const) {
      const r = start(registrarMachine, input);
      if (decide) r.a.send({ type: decide, at, by });
      r.a.send({ type: 'SET_CANONICAL_MODEL', at, by, modelId: 'm1' });
      expect(r.a.getSnapshot().context.canonicalModelId).toBe('m1');
      expect(r.emitted.at(-1)).toMatchObject({ type: 'registrar.canonical-model-set', modelId: 'm1' });
      expect(r.can({ type: 'SET_CANONICAL_MODEL', at, by, modelId: 'm1' })).toBe(true);
      expect(r.can({ type: 'SET_CANONICAL_MODEL', at, by, modelId: 'm2' })).toBe(false);
      r.a.send({ type: 'SET_CANONICAL_MODEL', at, by, modelId: 'm2' });
      expect(r.a.getSnapshot().context.canonicalModelId).toBe('m1');
    }
  });
  it('UPDATE in every live state; DELETE from any live state is final', () => {
    for (const decide of [undefined, 'APPROVE', 'REJECT'] as const) {
      const r = start(registrarMachine, input);
      if (decide) r.a.send({ type: decide, at, by });
      r.a.send({ type: 'UPDATE', at, by });
      expect(r.emitted.at(-1).type).toBe('registrar.updated');
      r.a.send({ type: 'DELETE', at, by });
      expect(r.state()).toBe('DELETED');
      expect(r.a.getSnapshot().context.deletedAt).toBe(at);
      for (const e of [{ type: 'UPDATE' }, { type: 'DELETE' }, { type: 'APPROVE' }, { type: 'SET_CANONICAL_MODEL', modelId: 'm9' }]) expect(r.can({ ...e, at, by })).toBe(false);
    }
  });
});

describe('accessRequest machine', () => {
  const input = { id: 'a1', requesterAccountId: 'b', ownerAccountId: 'a', registrarId: 'r1', createdAt: at, createdBy: by };
  it('DECIDE APPROVED and DECIDE REJECTED from PENDING; final after', () => {
    for (const decision of ['APPROVED', 'REJECTED'] as const) {
      const r = start(accessRequestMachine, input);
      expect(r.state()).toBe('PENDING');
      expect(r.emitted[0].type).toBe('accessRequest.created');
      r.a.send({ type: 'DECIDE', decision, at, by: 'owner', reason: 'ok' });
      expect(r.state()).toBe(decision);
      expect(r.a.getSnapshot().context).toMatchObject({ decidedBy: 'owner', decidedAt: at, reason: 'ok' });
      expect(r.emitted.at(-1)).toMatchObject({ type: 'accessRequest.decided', decision });
      expect(r.can({ type: 'DECIDE', decision: 'APPROVED', at, by })).toBe(false);
      expect(r.can({ type: 'DECIDE', decision: 'REJECTED', at, by })).toBe(false);
    }
  });
  it('an unknown decision is refused', () => {
    const r = start(accessRequestMachine, input);
    expect(r.can({ type: 'DECIDE', decision: 'MAYBE', at, by })).toBe(false);
  });
});

describe('factoryRegistration machine', () => {
  const input = { accountId: 'acc', requestedAt: at, requestedBy: by, note: null };
  it('REQUESTED -> APPROVE -> APPROVED; USE only while APPROVED; REVOKE -> REVOKED', () => {
    const r = start(factoryRegistrationMachine, input);
    expect(r.state()).toBe('REQUESTED');
    expect(r.can({ type: 'USE' })).toBe(false);
    expect(r.can({ type: 'REQUEST', at, by })).toBe(false);
    r.a.send({ type: 'APPROVE', at, by: 'op' });
    expect(r.state()).toBe('APPROVED');
    expect(r.can({ type: 'USE' })).toBe(true);
    expect(r.can({ type: 'APPROVE', at, by })).toBe(false);
    expect(r.can({ type: 'REFUSE', at, by })).toBe(false);
    r.a.send({ type: 'REVOKE', at, by: 'op', reason: 'audit' });
    expect(r.state()).toBe('REVOKED');
    expect(r.a.getSnapshot().context.reason).toBe('audit');
    expect(r.can({ type: 'USE' })).toBe(false);
    expect(r.emitted.map((e) => e.type)).toEqual(['factoryRegistration.requested', 'factoryRegistration.approved', 'factoryRegistration.revoked']);
  });
  it('REFUSE and REVOKE from REQUESTED; REQUEST again after either', () => {
    for (const decision of ['REFUSE', 'REVOKE'] as const) {
      const r = start(factoryRegistrationMachine, input);
      r.a.send({ type: decision, at, by: 'op' });
      expect(r.state()).toBe(decision === 'REFUSE' ? 'REFUSED' : 'REVOKED');
      for (const e of ['APPROVE', 'REFUSE', 'REVOKE'] as const) expect(r.can({ type: e, at, by })).toBe(false);
      r.a.send({ type: 'REQUEST', at: '2026-11-23T00:00:00.000Z', by: 'again', note: 'please' });
      expect(r.state()).toBe('REQUESTED');
      expect(r.a.getSnapshot().context).toMatchObject({ requestedBy: 'again', note: 'please', decidedAt: null, reason: null });
    }
  });
});

describe('eligibilityGrant machine', () => {
  const input = { id: 'g1', artifactId: 'x', ownerAccountId: 'a', requesterAccountId: 'b', createdAt: at, createdBy: by };
  it('PENDING -> APPROVE -> APPROVED (final)', () => {
    const r = start(eligibilityGrantMachine, input);
    expect(r.emitted[0].type).toBe('eligibilityGrant.requested');
    r.a.send({ type: 'APPROVE', at, by: 'owner' });
    expect(r.state()).toBe('APPROVED');
    expect(r.can({ type: 'REJECT', at, by, reason: 'late' })).toBe(false);
    expect(r.emitted.at(-1).type).toBe('eligibilityGrant.approved');
  });
  it('REJECT needs a reason; then REJECTED (final)', () => {
    const r = start(eligibilityGrantMachine, input);
    expect(r.can({ type: 'REJECT', at, by, reason: '   ' })).toBe(false);
    r.a.send({ type: 'REJECT', at, by, reason: ' not a partner ' });
    expect(r.state()).toBe('REJECTED');
    expect(r.a.getSnapshot().context.reason).toBe('not a partner');
    expect(r.can({ type: 'APPROVE', at, by })).toBe(false);
  });
});

describe('referenceRequest machine', () => {
  const input = { id: 'q1', requesterAccountId: 'b', ownerAccountId: 'a', registrarId: 'r1', createdAt: at, createdBy: by };
  it('PENDING -> APPROVE -> APPROVED -> REVOKE -> REVOKED', () => {
    const r = start(referenceRequestMachine, input);
    r.a.send({ type: 'APPROVE', at, by: 'owner' });
    expect(r.state()).toBe('APPROVED');
    expect(r.can({ type: 'APPROVE', at, by })).toBe(false);
    expect(r.can({ type: 'REJECT', at, by, reason: 'x' })).toBe(false);
    r.a.send({ type: 'REVOKE', at, by: 'b-user' });
    expect(r.state()).toBe('REVOKED');
    expect(r.a.getSnapshot().context).toMatchObject({ revokedAt: at, revokedBy: 'b-user' });
    expect(r.can({ type: 'REVOKE', at, by })).toBe(false);
    expect(r.emitted.map((e) => e.type)).toEqual(['referenceRequest.requested', 'referenceRequest.approved', 'referenceRequest.revoked']);
  });
  it('REJECT needs a reason; REVOKE from PENDING', () => {
    const r = start(referenceRequestMachine, input);
    expect(r.can({ type: 'REJECT', at, by, reason: '' })).toBe(false);
    r.a.send({ type: 'REJECT', at, by, reason: 'no' });
    expect(r.state()).toBe('REJECTED');
    expect(r.can({ type: 'REVOKE', at, by })).toBe(false);
    const p = start(referenceRequestMachine, input);
    p.a.send({ type: 'REVOKE', at, by });
    expect(p.state()).toBe('REVOKED');
  });
});
