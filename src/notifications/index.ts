import { Counter, Gauge } from 'prom-client';
import { defineDomain } from '../gateway.js';
import type { StoredEvent } from '../actors/store.js';
import { Listening } from '../lib/listening.js';
import { Mailer } from './mailer.js';
import { NotificationsService, NOTIFYING_EVENTS } from './service.js';
import { StreamHub } from './streams.js';
import { apiRoutes, feedRoutes } from './routes.js';

declare module '../gateway.js' {
  interface Services {
    notifications: NotificationsService;
  }
}

/** What tests of notifications trigger below its public interface (RunningGateway.testHooks.notifications). */
export interface NotificationsTestHooks {
  /** one catch-up run now (also run at start and by the hourly sweep): notifications of domain events no node handled; returns how many it made */
  catchUp(): Promise<number>;
}

declare module '../gateway.js' {
  interface TestHooks {
    notifications: NotificationsTestHooks;
  }
}

/** Domain module of src/notifications/: publish, templates, preferences, feed, SSE/WebSocket streams, email. */
export const notificationsDomain = defineDomain({
  name: 'notifications',
  provides: ['notifications'],
  requires: ['accounts', 'thingSearch'],
  async init(gw, { accounts, thingSearch }) {
    const cut = new Counter({ name: 'notification_streams_cut_total', help: 'Notification streams dropped because their unsent backlog passed 1 MiB, by transport', labelNames: ['transport'], registers: [gw.metrics] });
    const hub = new StreamHub(gw.cluster, gw.config.SSE_HEARTBEAT_SECONDS * 1000, gw.log.child({ component: 'notifications' }), (transport) => cut.inc({ transport }));
    const published = new Counter({ name: 'notifications_published_total', help: 'Publish requests answered, by status and drop reason', labelNames: ['status', 'reason'], registers: [gw.metrics] });
    const svc = new NotificationsService(gw, new Mailer(gw.config, gw.log), hub, accounts, published, thingSearch);
    new Gauge({ name: 'notification_streams_open', help: 'Open notification streams (SSE and WebSocket) on this node', registers: [gw.metrics], collect() {
      this.set(hub.size);
    } });
    await svc.seed();
    gw.jobs.define('notifications.sweep', async () => {
      await svc.sweep();
      await svc.catchUp();
    }, { schedule: '17 * * * *', retryLimit: 1 });
    // gw.bus fires on every node; the unique source_event_id makes one notification cluster-wide.
    const domainEvents = new Listening(gw.bus, NOTIFYING_EVENTS, (ev: StoredEvent) => {
      svc.fromDomainEvent(ev).catch((err) => gw.log.error({ err, event: ev.id, type: ev.type }, 'notification from domain event failed'));
    });
    const testHooks: NotificationsTestHooks = { catchUp: () => svc.catchUp() };
    return { notifications: svc, hub, domainEvents, testHooks };
  },
  async routes(app, gw, { notifications: svc, hub }) {
    // Streams end before the HTTP server waits for its open connections (graceful shutdown).
    app.addHook('preClose', async () => hub.closeAll());
    for (const prefix of ['/api/notifications', '/console/notifications']) {
      await app.register(feedRoutes(svc, prefix), { prefix });
    }
    await app.register(apiRoutes(svc, gw));
  },
  async start(gw, { notifications: svc, hub, domainEvents }) {
    hub.start();
    domainEvents.start();
    // events committed while no node was listening (unique source_event_id keeps this idempotent)
    svc.catchUp().catch((err) => gw.log.error({ err }, 'notification catch-up failed'));
  },
  async stop(_gw, { hub, domainEvents }) {
    domainEvents.stop();
    hub.stop();
  },
});
