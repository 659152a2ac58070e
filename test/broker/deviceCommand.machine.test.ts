import { describe, expect, it } from 'vitest';
import { createActor } from 'xstate';
import { deviceCommandMachine, type DeviceCommandEvent } from '../../machines/deviceCommand.js';

const input = { id: 'c1', accountId: 'a1', thingId: 't1', name: 'reboot', createdAt: '2026-01-01T00:00:00.000Z', expiresAt: '2026-01-01T00:01:00.000Z' };
const BEFORE = '2026-01-01T00:00:30.000Z';
const AFTER = '2026-01-01T00:01:00.000Z';

function run(...events: DeviceCommandEvent[]) {
  const emitted: unknown[] = [];
  const actor = createActor(deviceCommandMachine, { input });
  actor.on('*', (e) => emitted.push(e));
  actor.start();
  for (const e of events) actor.send(e);
  return { snapshot: actor.getSnapshot(), emitted };
}

describe('deviceCommand machine', () => {
  it('is delivered before its TTL and succeeds on an ok reply', () => {
    const { snapshot, emitted } = run({ type: 'DELIVER', at: BEFORE }, { type: 'RESPOND', at: BEFORE, ok: true, response: { done: 1 } });
    expect(snapshot.value).toBe('succeeded');
    expect(snapshot.context).toMatchObject({ deliveredAt: BEFORE, completedAt: BEFORE, response: { done: 1 } });
    expect(emitted).toEqual([{ type: 'deviceCommand.completed', commandId: 'c1', thingId: 't1', status: 'succeeded' }]);
  });

  it('fails when the reply says so', () => {
    expect(run({ type: 'DELIVER', at: BEFORE }, { type: 'RESPOND', at: BEFORE, ok: false, response: { error: 'x' } }).snapshot.value).toBe('failed');
  });

  it('refuses delivery once the TTL has passed, and expires then (not before)', () => {
    const lapsed = createActor(deviceCommandMachine, { input }).start();
    expect(lapsed.getSnapshot().can({ type: 'DELIVER', at: AFTER })).toBe(false);
    expect(lapsed.getSnapshot().can({ type: 'EXPIRE', at: BEFORE })).toBe(false);
    lapsed.send({ type: 'EXPIRE', at: AFTER });
    expect(lapsed.getSnapshot().value).toBe('expired');
    expect(lapsed.getSnapshot().can({ type: 'DELIVER', at: BEFORE })).toBe(false);
  });

  it('expires a delivered command that got no reply within its TTL; a reply while pending is refused', () => {
    expect(run({ type: 'DELIVER', at: BEFORE }, { type: 'EXPIRE', at: AFTER }).snapshot.value).toBe('expired');
    const pending = createActor(deviceCommandMachine, { input }).start();
    expect(pending.getSnapshot().can({ type: 'RESPOND', at: BEFORE, ok: true, response: null })).toBe(false);
  });

  it('takes no event in a final state', () => {
    const { snapshot } = run({ type: 'DELIVER', at: BEFORE }, { type: 'RESPOND', at: BEFORE, ok: true, response: null });
    expect(snapshot.can({ type: 'EXPIRE', at: AFTER })).toBe(false);
    expect(snapshot.can({ type: 'RESPOND', at: BEFORE, ok: false, response: null })).toBe(false);
  });

  it('cancels a pending command (closed, announced); then it is neither delivered nor expired', () => {
    const { snapshot, emitted } = run({ type: 'CANCEL', at: BEFORE });
    expect(snapshot.value).toBe('cancelled');
    expect(snapshot.status).toBe('done');
    expect(snapshot.context).toMatchObject({ completedAt: BEFORE, deliveredAt: null, response: null });
    expect(emitted).toEqual([{ type: 'deviceCommand.completed', commandId: 'c1', thingId: 't1', status: 'cancelled' }]);
    expect(snapshot.can({ type: 'DELIVER', at: BEFORE })).toBe(false);
    expect(snapshot.can({ type: 'EXPIRE', at: AFTER })).toBe(false);
    expect(snapshot.can({ type: 'RESPOND', at: BEFORE, ok: true, response: null })).toBe(false);
  });

  it('refuses to cancel a command once delivered, answered or expired', () => {
    expect(run({ type: 'DELIVER', at: BEFORE }).snapshot.can({ type: 'CANCEL', at: BEFORE })).toBe(false);
    expect(run({ type: 'DELIVER', at: BEFORE }, { type: 'RESPOND', at: BEFORE, ok: true, response: null }).snapshot.can({ type: 'CANCEL', at: BEFORE })).toBe(false);
    expect(run({ type: 'EXPIRE', at: AFTER }).snapshot.can({ type: 'CANCEL', at: AFTER })).toBe(false);
  });
});
