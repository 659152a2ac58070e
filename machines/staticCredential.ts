import { setup, emit } from 'xstate';

/**
 * Static credential (spec document 1, "States and transitions"): ACTIVE <-> INACTIVE by PUT,
 * either -> deleted by DELETE. Pure: no secrets, no clocks (`at` comes with each event).
 */
export interface StaticCredentialContext {
  id: string;
  accountId: string;
  accessKeyId: string;
  principalId: string;
  createdAt: string;
}

export type StaticCredentialEvent =
  | { type: 'DEACTIVATE'; at: string; by?: string }
  | { type: 'ACTIVATE'; at: string; by?: string }
  | { type: 'DELETE'; at: string; by?: string };

type Emitted =
  | { type: 'credential.created'; credentialId: string; accessKeyId: string; principalId: string }
  | { type: 'credential.deactivated'; credentialId: string; accessKeyId: string; by?: string }
  | { type: 'credential.activated'; credentialId: string; accessKeyId: string; by?: string }
  | { type: 'credential.deleted'; credentialId: string; accessKeyId: string; by?: string };

const byOf = (event: StaticCredentialEvent) => event.by;

export const staticCredentialMachine = setup({
  types: {
    context: {} as StaticCredentialContext,
    input: {} as StaticCredentialContext,
    events: {} as StaticCredentialEvent,
    emitted: {} as Emitted,
  },
}).createMachine({
  id: 'staticCredential',
  context: ({ input }) => ({ ...input }),
  initial: 'ACTIVE',
  entry: emit(({ context }) => ({ type: 'credential.created' as const, credentialId: context.id, accessKeyId: context.accessKeyId, principalId: context.principalId })),
  states: {
    ACTIVE: {
      on: {
        DEACTIVATE: {
          target: 'INACTIVE',
          actions: emit(({ context, event }) => ({ type: 'credential.deactivated' as const, credentialId: context.id, accessKeyId: context.accessKeyId, by: byOf(event) })),
        },
        DELETE: 'deleted',
      },
    },
    INACTIVE: {
      on: {
        ACTIVATE: {
          target: 'ACTIVE',
          actions: emit(({ context, event }) => ({ type: 'credential.activated' as const, credentialId: context.id, accessKeyId: context.accessKeyId, by: byOf(event) })),
        },
        DELETE: 'deleted',
      },
    },
    deleted: {
      type: 'final',
      entry: emit(({ context, event }) => ({ type: 'credential.deleted' as const, credentialId: context.id, accessKeyId: context.accessKeyId, by: byOf(event as StaticCredentialEvent) })),
    },
  },
});
