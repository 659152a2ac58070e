/**
 * Time enters the domain through a clock so tests can move it: services ask `clock.now()` and pass
 * the instant to machines as event `at`; nothing in src/ outside this file reads the wall clock
 * for a lifecycle decision.
 */
export interface Clock {
  now(): Date;
}

export const systemClock: Clock = { now: () => new Date() };

/** A clock tests set and advance by hand. */
export class ManualClock implements Clock {
  private ms: number;
  constructor(start: Date | string | number = Date.now()) {
    this.ms = new Date(start).getTime();
  }
  now(): Date {
    return new Date(this.ms);
  }
  set(at: Date | string | number): void {
    this.ms = new Date(at).getTime();
  }
  advance(ms: number): void {
    this.ms += ms;
  }
}

/** ISO 8601 UTC of the clock's instant (the `at` of machine events). */
export const isoNow = (clock: Clock): string => clock.now().toISOString();
