import type { DomainBus } from '../actors/cluster.js';
import { defineDomain } from '../gateway.js';
import { resealAll, Sealer, type SealedColumn } from '../pki/sealer.js';
import { Cursors } from './cursor.js';
import { DeliveryWorker } from './delivery.js';
import { Dispatcher } from './dispatcher.js';
import { StateChangeFeed } from './feed.js';
import { feedRoutes } from './routes.js';
import { Subscriptions, subscriptionKind } from './subscriptions.js';

const SEALED_COLUMNS: SealedColumn[] = [{ table: 'state_change_subscriptions', key: 'id', column: 'secret_sealed' }];
/** The log's changes that wake the dispatcher (committed, from any node). */
const CHANGE_EVENTS = ['thing.stateChanged', 'thing.enrolled'];
/**
 * The dispatcher also looks this often for ACTIVE_WINDOW_MS after a change: the horizon may move
 * on without a new change (a change held back by an older transaction still running).
 */
const DISPATCH_POLL_MS = 1000;
const ACTIVE_WINDOW_MS = 10_000;
/** With no change for ACTIVE_WINDOW_MS: a fallback look this often (issue 36 item 4: idle CPU). */
const IDLE_DISPATCH_POLL_MS = 30_000;

/**
 * What wakes the dispatcher while the domain runs: the log's changes from any node (the cluster's
 * LISTEN/NOTIFY), and a poll: every second for ACTIVE_WINDOW_MS after a change, and for as long as
 * the last round saw changes held back by a transaction still running (the horizon moving on wakes
 * nothing else; they waited for the slow poll before: a webhook 30 s late behind a 10 s transaction
 * anywhere on the server); otherwise every IDLE_DISPATCH_POLL_MS.
 */
function dispatchWakeups(bus: DomainBus, dispatcher: Dispatcher) {
  let poll: NodeJS.Timeout | undefined;
  let pollAt = 0;
  let activeUntil = 0;
  let running = false;
  const plan = (ms: number) => {
    clearTimeout(poll);
    pollAt = Date.now() + ms;
    poll = setTimeout(tick, ms);
    poll.unref();
  };
  const tick = () => {
    dispatcher.wake();
    if (running) plan(Date.now() < activeUntil || dispatcher.heldBack ? DISPATCH_POLL_MS : IDLE_DISPATCH_POLL_MS);
  };
  const onChange = () => {
    activeUntil = Date.now() + ACTIVE_WINDOW_MS;
    dispatcher.wake();
    if (running && pollAt > Date.now() + DISPATCH_POLL_MS) plan(DISPATCH_POLL_MS);
  };
  return {
    start(): void {
      running = true;
      for (const type of CHANGE_EVENTS) bus.on(type, onChange);
      plan(IDLE_DISPATCH_POLL_MS);
    },
    stop(): void {
      running = false;
      clearTimeout(poll);
      for (const type of CHANGE_EVENTS) bus.off(type, onChange);
    },
  };
}

/** Domain module of src/feed/: the state-change feed, subscriptions and webhook delivery. */
export const feedDomain = defineDomain({
  name: 'feed',
  kinds: [subscriptionKind],
  init(gw) {
    const { sql, actors, clock, log, config } = gw;
    const sealer = new Sealer(gw.pki.sealingKeys);
    const feed = new StateChangeFeed({ sql, cursors: new Cursors(gw.pki.sealingKeys), clock });
    const subscriptions = new Subscriptions({
      sql, actors, clock, log, sealer, allowPrivateTargets: config.ALLOW_PRIVATE_TARGETS, suspendAfter: config.WEBHOOK_SUSPEND_AFTER,
    });
    const worker = new DeliveryWorker({
      sql, log: log.child({ component: 'webhooks' }), clock, sealer, subscriptions, metrics: gw.metrics,
      settings: {
        timeoutMs: config.WEBHOOK_TIMEOUT_MS, maxAttempts: config.WEBHOOK_MAX_ATTEMPTS, retryBaseMs: config.WEBHOOK_RETRY_BASE_MS,
        concurrency: config.WEBHOOK_CONCURRENCY, allowPrivateTargets: config.ALLOW_PRIVATE_TARGETS, caFile: config.OUTBOUND_CA_FILE,
      },
    });
    const dispatcher = new Dispatcher({ sql, log: log.child({ component: 'feed-dispatch' }), clock, onDeliveries: () => worker.wake() });
    return { sealer, feed, subscriptions, dispatcher, worker, wakeups: dispatchWakeups(gw.bus, dispatcher) };
  },
  async routes(app, _gw, { feed, subscriptions }) {
    await feedRoutes(app, feed, subscriptions);
  },
  async start(gw, { sealer, dispatcher, worker, wakeups }) {
    const sealed = await resealAll(gw.sql, sealer, SEALED_COLUMNS);
    if (sealed.unreadable) gw.log.warn(sealed, 'some webhook secrets open with no sealing key');
    // JOBS=false: a node that serves requests only, while other nodes do the background work
    if (!gw.config.JOBS) return;
    wakeups.start();
    worker.start();
    dispatcher.wake();
  },
  async stop(_gw, { dispatcher, worker, wakeups }) {
    wakeups.stop();
    dispatcher.stop();
    await worker.stop();
  },
});
