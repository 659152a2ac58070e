import { createActor } from 'xstate';
import { describe, expect, it } from 'vitest';
import { subscriptionMachine, type SubscriptionEvent } from '../../machines/subscription.js';

/** The subscription machine alone: what each state accepts, the failure rule, what it emits. */
const at = '2026-11-23T10:00:00.000Z';

function run(events: SubscriptionEvent[], suspendAfter = 3) {
  const emitted: { type: string; reason?: string }[] = [];
  const actor = createActor(subscriptionMachine, { input: { id: 's1', accountId: 'a1', suspendAfter, createdAt: at } });
  actor.on('*', (e) => emitted.push(e as { type: string }));
  actor.start();
  for (const e of events) actor.send(e);
  return { snapshot: actor.getSnapshot(), emitted };
}

const dropped: SubscriptionEvent = { type: 'DELIVERY_DROPPED', at, lastStatus: 500 };

describe('subscription machine', () => {
  it('starts ACTIVE and says so', () => {
    const { snapshot, emitted } = run([]);
    expect(snapshot.value).toBe('ACTIVE');
    expect(emitted.map((e) => e.type)).toEqual(['subscription.created']);
  });

  it('suspends after suspendAfter drops in a row; a success in between starts the count again', () => {
    expect(run([dropped, dropped]).snapshot.context.consecutiveFailures).toBe(2);
    expect(run([dropped, dropped]).snapshot.value).toBe('ACTIVE');
    const broken = run([dropped, { type: 'DELIVERED', at }, dropped, dropped]);
    expect(broken.snapshot.value).toBe('ACTIVE');
    expect(broken.snapshot.context.consecutiveFailures).toBe(2);
    const { snapshot, emitted } = run([dropped, dropped, dropped]);
    expect(snapshot.value).toBe('SUSPENDED');
    expect(snapshot.context).toMatchObject({ consecutiveFailures: 3, suspendedAt: at, suspendedReason: 'delivery-failures' });
    expect(emitted.at(-1)).toMatchObject({ type: 'subscription.suspended', reason: 'delivery-failures' });
  });

  it('a 410 suspends at once; the owner may suspend too', () => {
    expect(run([{ type: 'RECEIVER_GONE', at }]).snapshot.context.suspendedReason).toBe('receiver-gone');
    expect(run([{ type: 'SUSPEND', at, by: 'u' }]).snapshot.context.suspendedReason).toBe('owner');
  });

  it('SUSPENDED accepts ACTIVATE only, which clears the failure run', () => {
    const { snapshot } = run([{ type: 'RECEIVER_GONE', at }]);
    for (const e of [
      { type: 'UPDATE', at, by: 'u' }, { type: 'SUSPEND', at, by: 'u' }, { type: 'DELETE', at, by: 'u' },
      { type: 'DELIVERED', at }, dropped, { type: 'RECEIVER_GONE', at },
    ] as SubscriptionEvent[]) expect(snapshot.can(e), e.type).toBe(false);
    expect(snapshot.can({ type: 'ACTIVATE', at, by: 'u' })).toBe(true);
    const back = run([dropped, dropped, dropped, { type: 'ACTIVATE', at, by: 'u' }]).snapshot;
    expect(back.value).toBe('ACTIVE');
    expect(back.context).toMatchObject({ consecutiveFailures: 0, suspendedAt: null, suspendedReason: null });
  });

  it('ACTIVE accepts edits, ACTIVATE (no change) and DELETE (final); DELIVERED only during a failure run', () => {
    const { snapshot } = run([]);
    expect(snapshot.can({ type: 'UPDATE', at, by: 'u' })).toBe(true);
    expect(snapshot.can({ type: 'ACTIVATE', at, by: 'u' })).toBe(true);
    expect(snapshot.can({ type: 'DELIVERED', at })).toBe(false);
    const deleted = run([{ type: 'DELETE', at, by: 'u' }]);
    expect(deleted.snapshot.status).toBe('done');
    expect(deleted.emitted.at(-1)?.type).toBe('subscription.deleted');
  });
});
