import { Counter, Gauge } from 'prom-client';
import { defineDomain, type Gateway } from '../gateway.js';
import type { StoredEvent } from '../actors/store.js';
import { Mailer } from './mailer.js';
import { NotificationsService, NOTIFYING_EVENTS } from './service.js';
import { StreamHub } from './streams.js';
import { apiRoutes, feedRoutes } from './routes.js';

declare module '../gateway.js' {
  interface Services {
    notifications: NotificationsService;
  }
}

const unsubscribers = new WeakMap<Gateway, () => void>();

/** Domain module of src/notifications/: publish, templates, preferences, feed, SSE/WebSocket streams, email. */
export const notificationsDomain = defineDomain({
  name: 'notifications',
  provides: ['notifications'],
  requires: ['accounts'],
  async init(gw, { accounts }) {
    const hub = new StreamHub(gw.cluster, gw.config.SSE_HEARTBEAT_SECONDS * 1000, gw.log.child({ component: 'notifications' }));
    const svc = new NotificationsService(gw, new Mailer(gw.config, gw.log), hub, accounts);
    new Gauge({ name: 'notification_streams_open', help: 'Open notification streams (SSE and WebSocket) on this node', registers: [gw.metrics], collect() {
      this.set(hub.size);
    } });
    const cut = new Counter({ name: 'notification_streams_cut_total', help: 'Notification streams dropped because their unsent backlog passed 1 MiB, by transport', labelNames: ['transport'], registers: [gw.metrics] });
    hub.onCut = (transport) => cut.inc({ transport });
    svc.published = new Counter({ name: 'notifications_published_total', help: 'Publish requests answered, by status and drop reason', labelNames: ['status', 'reason'], registers: [gw.metrics] });
    await svc.seed();
    gw.jobs.define('notifications.sweep', async () => {
      await svc.sweep();
      await svc.catchUp();
    }, { schedule: '17 * * * *', retryLimit: 1 });
    return { notifications: svc };
  },
  async routes(app, gw, { notifications: svc }) {
    // Streams end before the HTTP server waits for its open connections (graceful shutdown).
    app.addHook('preClose', async () => svc.hub.closeAll());
    for (const prefix of ['/api/notifications', '/console/notifications']) {
      await app.register(feedRoutes(svc, prefix), { prefix });
    }
    await app.register(apiRoutes(svc, gw));
  },
  async start(gw, { notifications: svc }) {
    svc.hub.start();
    // gw.bus fires on every node; the unique source_event_id makes one notification cluster-wide.
    const handlers = NOTIFYING_EVENTS.map((type) => {
      const h = (ev: StoredEvent) => {
        svc.fromDomainEvent(ev).catch((err) => gw.log.error({ err, event: ev.id, type: ev.type }, 'notification from domain event failed'));
      };
      gw.bus.on(type, h);
      return () => gw.bus.off(type, h);
    });
    unsubscribers.set(gw, () => handlers.forEach((off) => off()));
    // events committed while no node was listening (unique source_event_id keeps this idempotent)
    svc.catchUp().catch((err) => gw.log.error({ err }, 'notification catch-up failed'));
  },
  async stop(gw, { notifications: svc }) {
    unsubscribers.get(gw)?.();
    unsubscribers.delete(gw);
    svc.hub.stop();
  },
});
