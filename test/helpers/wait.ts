/** Polls `check` until it returns a truthy value (returned) or throws after `timeoutMs`. Usable in hooks. */
export async function waitFor<T>(check: () => T | Promise<T>, timeoutMs = 30_000, what = 'condition', intervalMs = 100): Promise<NonNullable<T>> {
  const deadline = Date.now() + timeoutMs;
  let last: unknown;
  for (;;) {
    try {
      const value = await check();
      if (value) return value as NonNullable<T>;
    } catch (err) {
      last = err;
    }
    if (Date.now() > deadline) throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}${last ? `: ${String(last)}` : ''}`);
    await new Promise((r) => setTimeout(r, intervalMs));
  }
}
