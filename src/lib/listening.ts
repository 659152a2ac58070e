import type { EventEmitter } from 'node:events';

/**
 * One listener of some events of an emitter (a domain's handler of `gw.bus` events), built at
 * init and attached from `start` to `stop`: the domain keeps it in what its init returns, so
 * nothing outside remembers how to detach it.
 */
export class Listening<T> {
  constructor(private readonly emitter: EventEmitter, private readonly events: readonly string[], private readonly listener: (value: T) => void) {}

  start(): void {
    for (const event of this.events) this.emitter.on(event, this.listener);
  }

  stop(): void {
    for (const event of this.events) this.emitter.off(event, this.listener);
  }
}
