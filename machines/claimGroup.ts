import { setup, assign, emit } from 'xstate';

/**
 * Claim group: a shared secret that lets up to `maxDevices` devices claim themselves into the
 * tenant within `ttlDays`. Time is passed in by the caller (`at`, ISO 8601): machines hold no
 * clocks, so a restored snapshot decides the same way on any node.
 */
export interface ClaimGroupContext {
  id: string;
  accountId: string;
  name: string;
  maxDevices: number;
  ttlDays: number;
  consumed: number;
  createdAt: string;
  expiresAt: string;
}

export type ClaimGroupInput = Omit<ClaimGroupContext, 'consumed' | 'expiresAt'>;

export type ClaimGroupEvent =
  | { type: 'CLAIM'; at: string; thingId: string }
  /**
   * several claims committed together (enrollment batches): the machine takes as many as fit, in
   * the order given, and names them in `claimGroup.claimedMany`; the rest are refused (capped)
   */
  | { type: 'CLAIM_MANY'; at: string; thingIds: string[] }
  | { type: 'EXPIRE'; at: string }
  | { type: 'REVOKE'; at: string; by?: string };

const isExpired = (context: ClaimGroupContext, at: string) => Date.parse(at) >= Date.parse(context.expiresAt);
/** the claims of a CLAIM_MANY that fit under the cap, in the order given */
const fitting = (context: ClaimGroupContext, thingIds: string[]) => thingIds.slice(0, Math.max(0, context.maxDevices - context.consumed));

export const claimGroupMachine = setup({
  types: {
    context: {} as ClaimGroupContext,
    input: {} as ClaimGroupInput,
    events: {} as ClaimGroupEvent,
    emitted: {} as
      | { type: 'claimGroup.created'; claimGroupId: string; maxDevices: number; expiresAt: string }
      | { type: 'claimGroup.claimed'; claimGroupId: string; thingId: string; consumed: number }
      | { type: 'claimGroup.claimedMany'; claimGroupId: string; thingIds: string[]; consumed: number }
      | { type: 'claimGroup.capped'; claimGroupId: string; name: string; maxDevices: number }
      | { type: 'claimGroup.expired'; claimGroupId: string }
      | { type: 'claimGroup.revoked'; claimGroupId: string; by?: string },
  },
  guards: {
    canClaim: ({ context, event }) => event.type === 'CLAIM' && !isExpired(context, event.at) && context.consumed < context.maxDevices,
    canClaimMany: ({ context, event }) => event.type === 'CLAIM_MANY' && event.thingIds.length > 0 && !isExpired(context, event.at)
      && context.consumed < context.maxDevices,
    ttlPassed: ({ context, event }) => 'at' in event && isExpired(context, event.at),
    full: ({ context }) => context.consumed >= context.maxDevices,
  },
}).createMachine({
  id: 'claimGroup',
  context: ({ input }) => ({
    ...input,
    consumed: 0,
    expiresAt: new Date(Date.parse(input.createdAt) + input.ttlDays * 86_400_000).toISOString(),
  }),
  initial: 'active',
  entry: emit(({ context }) => ({ type: 'claimGroup.created' as const, claimGroupId: context.id, maxDevices: context.maxDevices, expiresAt: context.expiresAt })),
  states: {
    active: {
      always: { guard: 'full', target: 'capped' },
      on: {
        CLAIM: {
          guard: 'canClaim',
          actions: [
            assign({ consumed: ({ context }) => context.consumed + 1 }),
            emit(({ context, event }) => ({ type: 'claimGroup.claimed' as const, claimGroupId: context.id, thingId: event.thingId, consumed: context.consumed })),
          ],
        },
        CLAIM_MANY: {
          guard: 'canClaimMany',
          actions: [
            emit(({ context, event }) => ({
              type: 'claimGroup.claimedMany' as const, claimGroupId: context.id,
              thingIds: event.type === 'CLAIM_MANY' ? fitting(context, event.thingIds) : [],
              consumed: context.consumed + (event.type === 'CLAIM_MANY' ? fitting(context, event.thingIds).length : 0),
            })),
            assign({ consumed: ({ context, event }) => context.consumed + (event.type === 'CLAIM_MANY' ? fitting(context, event.thingIds).length : 0) }),
          ],
        },
        EXPIRE: { guard: 'ttlPassed', target: 'expired' },
        REVOKE: 'revoked',
      },
    },
    capped: {
      entry: emit(({ context }) => ({ type: 'claimGroup.capped' as const, claimGroupId: context.id, name: context.name, maxDevices: context.maxDevices })),
      on: {
        EXPIRE: { guard: 'ttlPassed', target: 'expired' },
        REVOKE: 'revoked',
      },
    },
    expired: {
      entry: emit(({ context }) => ({ type: 'claimGroup.expired' as const, claimGroupId: context.id })),
      on: { REVOKE: 'revoked' },
    },
    revoked: {
      type: 'final',
      entry: emit(({ context, event }) => ({ type: 'claimGroup.revoked' as const, claimGroupId: context.id, by: event.type === 'REVOKE' ? event.by : undefined })),
    },
  },
});
