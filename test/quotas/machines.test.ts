import { describe, expect, it } from 'vitest';
import { createActor } from 'xstate';
import { quotaRequestMachine } from '../../machines/quotaRequest.js';
import { organizationLeaveMachine } from '../../machines/organizationLeave.js';

const at = '2026-11-22T10:00:00.000Z';

function request() {
  const a = createActor(quotaRequestMachine, {
    input: {
      id: 'r1', kind: 'leave', accountId: 'acc', organizationId: 'org', leaveRequestAccountId: 'acc', leaveId: 'l1',
      serviceCode: 'organizations', quotaCode: 'member-accounts-per-organization', desiredValue: 15, reason: 'leaving', createdAt: at, createdBy: 'system',
    },
  });
  const emitted: any[] = [];
  a.on('*', (e) => emitted.push(e));
  a.start();
  return { a, emitted };
}

function leave(elevated = 2) {
  const a = createActor(organizationLeaveMachine, {
    input: {
      id: 'l1', organizationId: 'org', accountId: 'acc', initiatedAs: 'leave', initiatedBy: 'u', startedAt: at,
      elevated: Array.from({ length: elevated }, (_, i) => ({ serviceCode: 'organizations', quotaCode: `q${i}`, value: 20 })),
    },
  });
  const emitted: any[] = [];
  a.on('*', (e) => emitted.push(e));
  a.start();
  return { a, emitted };
}

describe('quotaRequest machine', () => {
  it('denial needs a reason; decisions are final and emit quotaRequest.decided', () => {
    const { a, emitted } = request();
    expect(a.getSnapshot().value).toBe('pending');
    expect(a.getSnapshot().can({ type: 'DENY', at, by: 'p', reason: '  ' })).toBe(false);
    a.send({ type: 'DENY', at, by: 'p', reason: 'no' });
    expect(a.getSnapshot().value).toBe('denied');
    expect(a.getSnapshot().can({ type: 'APPROVE', at, by: 'p' })).toBe(false);
    expect(emitted.at(-1)).toMatchObject({ type: 'quotaRequest.decided', decision: 'denied', reason: 'no', requestId: 'r1', leaveRequestAccountId: 'acc' });
  });
  it('cancel from pending only', () => {
    const { a } = request();
    a.send({ type: 'CANCEL', at, by: 'o' });
    expect(a.getSnapshot().value).toBe('cancelled');
    expect(a.getSnapshot().can({ type: 'APPROVE', at, by: 'p' })).toBe(false);
  });
});

describe('organizationLeave machine', () => {
  it('no elevated quota: departing at once', () => {
    const { a } = leave(0);
    expect(a.getSnapshot().value).toBe('departing');
    a.send({ type: 'DEPARTED', at });
    expect(a.getSnapshot().value).toBe('departed');
  });
  it('all approved -> departing; any denied -> blocking with leaveBlocked on blocked', () => {
    const ok = leave(2).a;
    expect(ok.getSnapshot().value).toBe('seeding');
    expect(ok.getSnapshot().can({ type: 'SEEDED', at, requestIds: ['x'] })).toBe(false);
    ok.send({ type: 'SEEDED', at, requestIds: ['x', 'y'] });
    ok.send({ type: 'DECIDED', at, requestId: 'x', decision: 'approved' });
    expect(ok.getSnapshot().value).toBe('awaitingDecisions');
    expect(ok.getSnapshot().can({ type: 'DECIDED', at, requestId: 'x', decision: 'denied' })).toBe(false);
    expect(ok.getSnapshot().can({ type: 'DECIDED', at, requestId: 'zzz', decision: 'approved' })).toBe(false);
    ok.send({ type: 'DECIDED', at, requestId: 'y', decision: 'approved' });
    expect(ok.getSnapshot().value).toBe('departing');

    const { a: no, emitted } = leave(2);
    no.send({ type: 'SEEDED', at, requestIds: ['x', 'y'] });
    no.send({ type: 'DECIDED', at, requestId: 'y', decision: 'denied', reason: 'too big' });
    expect(no.getSnapshot().value).toBe('blocking');
    expect(no.getSnapshot().can({ type: 'DECIDED', at, requestId: 'x', decision: 'approved' })).toBe(false);
    no.send({ type: 'UNBLOCKED', at });
    expect(no.getSnapshot().value).toBe('blocked');
    expect(emitted.at(-1)).toMatchObject({ type: 'organization.leaveBlocked', organizationId: 'org', accountId: 'acc', deniedRequestIds: ['y'] });
    expect(emitted.at(-1).reason).toMatch(/too big/);
  });
});
