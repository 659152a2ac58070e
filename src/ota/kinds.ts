import type { ActorKind } from '../actors/store.js';
import { rolloutMachine } from '../../machines/rollout.js';
import { rolloutGroupMachine } from '../../machines/rolloutGroup.js';

export const rolloutKind: ActorKind<typeof rolloutMachine> = {
  type: 'otaRollout',
  machine: rolloutMachine,
  accountOf: (c) => c.accountId,
  projection: {
    table: 'ota_rollouts',
    columns: ['state', 'current_group', 'started_at', 'ended_at'],
    project: (s, state) => ({ state, current_group: s.context.current, started_at: s.context.startedAt, ended_at: s.context.endedAt }),
  },
};

export const rolloutGroupKind: ActorKind<typeof rolloutGroupMachine> = {
  type: 'otaRolloutGroup',
  machine: rolloutGroupMachine,
  accountOf: (c) => c.accountId,
  projection: {
    table: 'ota_rollout_groups',
    columns: ['state', 'succeeded', 'failed', 'skipped', 'started_at', 'ended_at'],
    project: (s, state) => ({
      state, succeeded: s.context.succeeded, failed: s.context.failed, skipped: s.context.skipped ?? 0, started_at: s.context.startedAt, ended_at: s.context.endedAt,
    }),
  },
};
