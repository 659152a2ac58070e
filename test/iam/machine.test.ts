import { createActor } from 'xstate';
import { describe, expect, it } from 'vitest';
import { staticCredentialMachine } from '../../machines/staticCredential.js';

const input = { id: 'c1', accountId: 'a1', accessKeyId: 'AKSV0123456789ABCDEF', principalId: 'alice', createdAt: '2026-11-22T00:00:00.000Z' };
const at = '2026-11-22T01:00:00.000Z';

describe('static credential machine', () => {
  it('ACTIVE <-> INACTIVE, then deleted (final), emitting one event per transition', () => {
    const events: string[] = [];
    const actor = createActor(staticCredentialMachine, { input });
    actor.on('*', (e) => events.push(e.type));
    actor.start();
    expect(actor.getSnapshot().value).toBe('ACTIVE');
    expect(actor.getSnapshot().can({ type: 'ACTIVATE', at })).toBe(false);
    actor.send({ type: 'DEACTIVATE', at, by: 'admin' });
    expect(actor.getSnapshot().value).toBe('INACTIVE');
    expect(actor.getSnapshot().can({ type: 'DEACTIVATE', at })).toBe(false);
    actor.send({ type: 'ACTIVATE', at });
    expect(actor.getSnapshot().value).toBe('ACTIVE');
    actor.send({ type: 'DELETE', at });
    expect(actor.getSnapshot().status).toBe('done');
    expect(events).toEqual(['credential.created', 'credential.deactivated', 'credential.activated', 'credential.deleted']);
  });

  it('an INACTIVE credential can be deleted; the context never holds a secret', () => {
    const actor = createActor(staticCredentialMachine, { input }).start();
    actor.send({ type: 'DEACTIVATE', at });
    actor.send({ type: 'DELETE', at });
    expect(actor.getSnapshot().value).toBe('deleted');
    expect(Object.keys(actor.getSnapshot().context).sort()).toEqual(['accessKeyId', 'accountId', 'createdAt', 'id', 'principalId']);
  });
});
