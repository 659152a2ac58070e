/**
 * Crash injection for tests: code calls `faults(point)` right after a step committed; production
 * passes no hook (a no-op), tests pass one that exits the process or throws at a named point.
 * Production code never reads the environment for this.
 */
export type FaultHook = (point: string) => void | Promise<void>;

export const noFaults: FaultHook = () => {};
