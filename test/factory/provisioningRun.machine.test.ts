import { createActor } from 'xstate';
import { describe, expect, it } from 'vitest';
import { nextStep, provisioningRunMachine, retryDue, type ProvisioningRunEvent } from '../../machines/provisioningRun.js';

/** The provisioningRun machine alone: what it accepts, what it decides, what it emits. */
const T0 = '2026-11-23T10:00:00.000Z';
const at = (s: number) => new Date(Date.parse(T0) + s * 1000).toISOString();

function start(legs: ('identify' | 'provision')[] = ['identify', 'provision'], maxAttempts = 3) {
  const emitted: string[] = [];
  const actor = createActor(provisioningRunMachine, {
    input: {
      id: 'run-1', accountId: 'acc', thingId: 'thing', at: T0, by: 'tester', maxAttempts, retrySeconds: 10, timeoutSeconds: 60,
      thing: { model: 'FFF1:0001', modelId: 'm', manufacturer: 'acme', serial: 'S' },
      legs: legs.map((name) => ({ name, factoryServiceId: `svc-${name}` })),
    },
  });
  actor.on('*', (e) => emitted.push(e.type === 'provisioningRun.finished' ? `${e.type}:${(e as any).outcome}` : e.type));
  actor.start();
  const send = (e: ProvisioningRunEvent) => {
    const accepted = actor.getSnapshot().can(e);
    if (accepted) actor.send(e);
    return accepted;
  };
  return { actor, send, emitted, leg: (name: string) => actor.getSnapshot().context.legs.find((l) => l.name === name)!, next: () => nextStep(actor.getSnapshot().context) };
}

describe('provisioningRun machine', () => {
  it('runs the legs in order and succeeds when the last one does', () => {
    const r = start();
    expect(r.leg('identify')).toMatchObject({ state: 'PENDING', due: T0 });
    expect(r.leg('provision').due).toBeNull();
    expect(r.send({ type: 'DISPATCH', leg: 'provision', attempt: 1, at: at(1) })).toBe(false); // not its turn
    expect(r.send({ type: 'DISPATCH', leg: 'identify', attempt: 2, at: at(1) })).toBe(false); // not that attempt
    expect(r.send({ type: 'DISPATCH', leg: 'identify', attempt: 1, at: at(1) })).toBe(true);
    expect(r.send({ type: 'DISPATCH', leg: 'identify', attempt: 1, at: at(1) })).toBe(false); // duplicate job
    expect(r.send({ type: 'RESULT', leg: 'identify', outcome: 'SUCCEEDED', at: at(2), attempt: 1 })).toBe(true);
    expect(r.leg('provision')).toMatchObject({ state: 'PENDING', due: at(2) });
    expect(r.send({ type: 'RESULT', leg: 'provision', outcome: 'SUCCEEDED', at: at(3) })).toBe(false); // not dispatched
    r.send({ type: 'DISPATCH', leg: 'provision', attempt: 1, at: at(3) });
    expect(r.send({ type: 'RESULT', leg: 'provision', outcome: 'SUCCEEDED', at: at(4) })).toBe(true);
    // the legs ended: the thing moves, then the run is finished
    expect(r.actor.getSnapshot().value).toBe('ENDING');
    expect(r.next()).toEqual({ step: 'END', outcome: 'SUCCEEDED', at: at(4) });
    expect(r.send({ type: 'RESULT', leg: 'provision', outcome: 'SUCCEEDED', at: at(4) })).toBe(false);
    expect(r.send({ type: 'THING_DONE', at: at(4) })).toBe(true);
    expect(r.actor.getSnapshot().value).toBe('SUCCEEDED');
    expect(r.next()).toBeUndefined();
    expect(r.actor.getSnapshot().context.finishedAt).toBe(at(4));
    expect(r.emitted).toEqual(['provisioningRun.started', 'provisioningRun.legEnded', 'provisioningRun.legEnded', 'provisioningRun.finished:SUCCEEDED']);
    expect(r.send({ type: 'RESULT', leg: 'provision', outcome: 'SUCCEEDED', at: at(5) })).toBe(false);
  });

  it('retries a failed attempt after a doubling backoff and fails the run when attempts run out', () => {
    const r = start(['provision'], 3);
    r.send({ type: 'DISPATCH', leg: 'provision', attempt: 1, at: at(0) });
    expect(r.send({ type: 'ATTEMPT_FAILED', leg: 'provision', attempt: 1, at: at(1), error: '500' })).toBe(true);
    expect(r.leg('provision')).toMatchObject({ state: 'PENDING', attempts: 1, due: at(11) });
    r.send({ type: 'DISPATCH', leg: 'provision', attempt: 2, at: at(11) });
    expect(r.send({ type: 'TIMEOUT', leg: 'provision', attempt: 1, at: at(12) })).toBe(false); // an old attempt's timeout
    expect(r.send({ type: 'TIMEOUT', leg: 'provision', attempt: 2, at: at(12) })).toBe(true);
    expect(r.leg('provision').due).toBe(at(32)); // 10 s, then 20 s
    r.send({ type: 'DISPATCH', leg: 'provision', attempt: 3, at: at(32) });
    r.send({ type: 'RESULT', leg: 'provision', outcome: 'FAILED', at: at(33), detail: 'no chip' });
    expect(r.next()).toEqual({ step: 'END', outcome: 'FAILED', at: at(33) });
    r.send({ type: 'THING_DONE', at: at(34) });
    expect(r.actor.getSnapshot().value).toBe('FAILED');
    expect(r.actor.getSnapshot().context.finishedAt).toBe(at(34));
    expect(r.leg('provision').history.map((h) => h.outcome)).toEqual(['FAILED', 'TIMED_OUT', 'FAILED']);
    expect(r.actor.getSnapshot().context.error).toBe('leg provision failed: no chip');
  });

  it('a permanent failure or ABORT ends the run at once', () => {
    const r = start(['provision'], 5);
    r.send({ type: 'DISPATCH', leg: 'provision', attempt: 1, at: at(0) });
    r.send({ type: 'ATTEMPT_FAILED', leg: 'provision', attempt: 1, at: at(1), error: 'target refused', permanent: true });
    expect(r.actor.getSnapshot().value).toBe('ENDING');
    r.send({ type: 'THING_DONE', at: at(1) });
    expect(r.actor.getSnapshot().value).toBe('FAILED');
    const s = start();
    expect(s.send({ type: 'ABORT', at: at(1), reason: 'thing was revoked' })).toBe(true);
    expect(s.send({ type: 'ABORT', at: at(1), reason: 'again' })).toBe(false);
    s.send({ type: 'THING_DONE', at: at(2) });
    expect(s.actor.getSnapshot().value).toBe('FAILED');
    expect(s.actor.getSnapshot().context.legs.map((l) => l.state)).toEqual(['FAILED', 'FAILED']);
    expect(s.actor.getSnapshot().context.error).toBe('thing was revoked');
  });

  it('says which step is due next and when: the due leg, the running attempt\'s timeout, the thing\'s move', () => {
    const r = start(['identify', 'provision'], 2);
    expect(r.next()).toEqual({ step: 'DISPATCH', leg: 'identify', attempt: 1, at: T0 });
    r.send({ type: 'DISPATCH', leg: 'identify', attempt: 1, at: at(5) });
    expect(r.next()).toEqual({ step: 'TIMEOUT', leg: 'identify', attempt: 1, at: at(65) }); // timeoutSeconds 60
    r.send({ type: 'TIMEOUT', leg: 'identify', attempt: 1, at: at(65) });
    expect(r.next()).toEqual({ step: 'DISPATCH', leg: 'identify', attempt: 2, at: at(75) }); // retrySeconds 10
    r.send({ type: 'DISPATCH', leg: 'identify', attempt: 2, at: at(75) });
    r.send({ type: 'RESULT', leg: 'identify', outcome: 'SUCCEEDED', at: at(80) });
    expect(r.next()).toEqual({ step: 'DISPATCH', leg: 'provision', attempt: 1, at: at(80) });
    r.send({ type: 'DISPATCH', leg: 'provision', attempt: 1, at: at(81) });
    r.send({ type: 'TIMEOUT', leg: 'provision', attempt: 1, at: at(141) });
    r.send({ type: 'DISPATCH', leg: 'provision', attempt: 2, at: at(151) });
    expect(r.send({ type: 'THING_DONE', at: at(152) })).toBe(false); // the legs have not ended
    r.send({ type: 'ATTEMPT_FAILED', leg: 'provision', attempt: 2, at: at(152), error: '503' });
    expect(r.next()).toEqual({ step: 'END', outcome: 'FAILED', at: at(152) });
    // projected as running until the thing moved: no error, no finish time yet
    expect(r.actor.getSnapshot().context).toMatchObject({ finishedAt: null, error: null });
    r.send({ type: 'THING_DONE', at: at(153) });
    expect(r.actor.getSnapshot().context).toMatchObject({ finishedAt: at(153), error: 'leg provision failed: 503' });
    expect(r.emitted.at(-1)).toBe('provisioningRun.finished:FAILED');
  });

  it('caps the backoff at one hour', () => {
    expect(retryDue(T0, 30, 2)).toBe(at(30));
    expect(retryDue(T0, 30, 20)).toBe(at(3600));
  });
});
