import v8 from 'node:v8';

/**
 * How far V8 lets the old generation grow past what the last full collection kept before it starts the next one
 * (`--heap-growing-percent`, set at start-up before the heap grows; V8 reads it whenever it sets the next limit). V8's
 * own pacing chose about 1.6 times under a data bridge rule's load and started a full collection every few megabytes
 * promoted: 24 to 30 a round of bench:bridges (docs/decisions.md, "V8's heap pacing"). 0 leaves V8's own.
 */
export function applyHeapPacing(percent: number): void {
  if (percent > 0) v8.setFlagsFromString(`--heap-growing-percent=${percent}`);
}
