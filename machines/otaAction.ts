/**
 * One device's OTA action: the lifecycle rules of the `ota_actions` rows. These rows are written
 * in bulk (one statement per report batch, per group start, per rollout end: thousands of devices),
 * not one actor transaction each, so the rules live here as data and pure functions, and the SQL of
 * src/ota/repo.ts is built from them; nothing else decides an action's status.
 *
 *   scheduled --(its group's machine accepts START)--> pending
 *   scheduled | pending --(the rollout's machine ends STOPPED or CANCELLED)--> cancelled
 *   pending .. installing --(a report of the device)--> a status no earlier in ACTION_STATUSES
 *   scheduled .. installing --(its thing is revoked)--> skipped (it can no longer answer)
 *   succeeded, failed, skipped, cancelled: final
 */

/** In lifecycle order: a report may move an open action only forward along it. */
export const ACTION_STATUSES = ['scheduled', 'pending', 'delivered', 'downloading', 'installing', 'succeeded', 'failed', 'skipped', 'cancelled'] as const;
export type ActionStatus = (typeof ACTION_STATUSES)[number];

/** what a device reports (`received` is recorded as `delivered`) */
export type ReportedStatus = 'delivered' | 'downloading' | 'installing' | 'succeeded' | 'failed';

/** statuses a device report may still change (released to the device, not ended) */
export const OPEN_STATUSES = ['pending', 'delivered', 'downloading', 'installing'] as const satisfies readonly ActionStatus[];
/** statuses no device has taken up yet: what a stopped or cancelled rollout cancels */
export const NOT_TAKEN_UP = ['scheduled', 'pending'] as const satisfies readonly ActionStatus[];
/** ended statuses (a group's tally counts them as finished) */
export const FINAL_STATUSES = ['succeeded', 'failed', 'skipped', 'cancelled'] as const satisfies readonly ActionStatus[];
/** statuses not ended yet: a revoked thing's actions in them are skipped */
export const UNENDED_STATUSES = ['scheduled', ...OPEN_STATUSES] as const satisfies readonly ActionStatus[];

/** the status a group start releases its actions from, and to */
export const RELEASE = { from: 'scheduled', to: 'pending' } as const satisfies { from: ActionStatus; to: ActionStatus };
/** what a rollout that ended STOPPED or CANCELLED does to the actions no device took up */
export const CANCEL = { from: NOT_TAKEN_UP, to: 'cancelled' } as const satisfies { from: readonly ActionStatus[]; to: ActionStatus };
/**
 * what the revocation of a target does to its actions not ended, in any group and rollout state: a
 * revoked thing cannot connect, so it would hold its group below the success threshold for ever.
 * A group's thresholds count over the targets not skipped (machines/rolloutGroup.ts).
 */
export const SKIP = { from: UNENDED_STATUSES, to: 'skipped', reason: 'thing revoked' } as const satisfies { from: readonly ActionStatus[]; to: ActionStatus; reason: string };

const position = (s: ActionStatus) => ACTION_STATUSES.indexOf(s);

/** May a device's report move an action in `current` to `reported`? */
export function reportApplies(current: ActionStatus, reported: ReportedStatus): boolean {
  return (OPEN_STATUSES as readonly ActionStatus[]).includes(current) && position(current) <= position(reported);
}

/** Of two reports of one action in one batch, does `next` go further than `previous`? (the final ones tie) */
export function furtherThan(next: ReportedStatus, previous: ReportedStatus): boolean {
  const rank = (s: ReportedStatus) => Math.min(position(s), position('succeeded'));
  return rank(next) >= rank(previous);
}
