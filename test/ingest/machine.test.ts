import { createActor } from 'xstate';
import { describe, expect, it } from 'vitest';
import { ingestJobMachine } from '../../machines/ingestJob.js';

const input = { id: 'j1', accountId: 'a1', warehouseId: 'WH', resource: 'stock', mode: 'DELTA' as const, totalItems: 3, createdAt: '2026-11-23T10:00:00.000Z' };

function run(events: Parameters<ReturnType<typeof createActor<typeof ingestJobMachine>>['send']>[0][]) {
  const emitted: unknown[] = [];
  const actor = createActor(ingestJobMachine, { input });
  actor.on('*', (e) => emitted.push(e));
  actor.start();
  for (const e of events) actor.send(e);
  return { snapshot: actor.getSnapshot(), emitted };
}

describe('ingestJob machine', () => {
  it('QUEUED -> RUNNING -> COMPLETED, or COMPLETED_WITH_ERRORS when items failed', () => {
    expect(run([]).snapshot.value).toBe('QUEUED');
    const ok = run([{ type: 'START', at: 't1' }, { type: 'FINISH', at: 't2', errors: 0 }]);
    expect(ok.snapshot.value).toBe('COMPLETED');
    expect(ok.snapshot.context).toMatchObject({ startedAt: 't1', completedAt: 't2', errors: 0 });
    const bad = run([{ type: 'START', at: 't1' }, { type: 'FINISH', at: 't2', errors: 4 }]);
    expect(bad.snapshot.value).toBe('COMPLETED_WITH_ERRORS');
    expect(bad.emitted).toEqual([{ type: 'ingestJob.completed', jobId: 'j1', accountId: 'a1', state: 'COMPLETED_WITH_ERRORS', errors: 4 }]);
  });

  it('refuses FINISH before START, a second START, and anything after completion', () => {
    const queued = run([]).snapshot;
    expect(queued.can({ type: 'FINISH', at: 't', errors: 0 })).toBe(false);
    const running = run([{ type: 'START', at: 't1' }]).snapshot;
    expect(running.can({ type: 'START', at: 't2' })).toBe(false);
    const done = run([{ type: 'START', at: 't1' }, { type: 'FINISH', at: 't2', errors: 0 }]).snapshot;
    expect(done.can({ type: 'FINISH', at: 't3', errors: 1 })).toBe(false);
    expect(done.status).toBe('done');
  });
});
