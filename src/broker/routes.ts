import { z } from 'zod';
import type { DeviceSessions, Gateway, ZodApp } from '../gateway.js';
import { accountOf } from '../http/auth/plugin.js';
import { dropConnection, STREAM_MAX_BACKLOG_BYTES } from '../lib/backlog.js';
import { conflict, notFound, timedOut } from '../lib/errors.js';
import type { ConnectivityHub } from './connectivityStream.js';
import { commandAccepted, commandWithTtlBody } from './offlineCommandRoutes.js';
import type { OfflineCommands } from './offlineCommands.js';
import type { ConnectedDeviceService } from './service.js';
import { historyQuery, historySchema, wantsHistory, type TelemetryHistory } from './telemetryHistory.js';
import { commandResult, connectivitySchema, desiredBody, desiredSchema, telemetrySchema, thingParams, twinSchema } from './schemas.js';

const READERS = ['admin', 'operator', 'viewer'];
const WRITERS = ['admin', 'operator'];

/** Tenant endpoints for connected devices, and the broker's management interface. */
export async function brokerRoutes(
  app: ZodApp, gw: Gateway, devices: ConnectedDeviceService, deviceSessions: DeviceSessions, offline: OfflineCommands, history: TelemetryHistory,
  onTelemetryCut: () => void = () => {},
): Promise<void> {
  app.get('/api/v1/things/:thingId/connectivity', {
    config: { auth: { action: 'device:Connectivity:Read', roles: READERS } },
    schema: { tags: ['devices'], summary: "A thing's MQTT connectivity and last seen", params: thingParams, response: { 200: connectivitySchema } },
  }, async (request) => {
    await devices.requireThing(request.principal!, request.params.thingId);
    return devices.connectivity(request.params.thingId);
  });

  app.get('/api/v1/things/:thingId/telemetry', {
    config: { auth: { action: 'device:Telemetry:Read', roles: READERS } },
    schema: {
      tags: ['devices'],
      summary: 'Latest telemetry values of a thing; with `key` (and `from`, `to`, `bucket`, `limit`) the history of one key, raw or downsampled',
      params: thingParams, querystring: historyQuery, response: { 200: z.union([telemetrySchema, historySchema]) },
    },
  }, async (request) => {
    await devices.requireThing(request.principal!, request.params.thingId);
    if (wantsHistory(request.query)) return history.read(request.params.thingId, request.query);
    return devices.telemetry(request.params.thingId);
  });

  app.get('/api/v1/things/:thingId/telemetry/stream', {
    websocket: true,
    config: { auth: { action: 'device:Telemetry:Read', roles: READERS } },
    schema: { tags: ['devices'], summary: 'Live telemetry of a thing (WebSocket; one JSON message per device message)', params: thingParams },
    // Ownership is checked before the upgrade, so a foreign thing answers 404 like every other route.
    preHandler: async (request) => devices.requireThing(request.principal!, (request.params as { thingId: string }).thingId),
  }, (socket, request) => {
    const { thingId } = request.params as { thingId: string };
    let closed = false;
    const stop = devices.streamTelemetry(thingId, (m) => {
      if (closed) return;
      socket.send(JSON.stringify(m));
      // a client that does not read is dropped at once past the bound (the device page reconnects)
      if (socket.bufferedAmount <= STREAM_MAX_BACKLOG_BYTES) return;
      closed = true;
      dropConnection(request.raw.socket);
      onTelemetryCut();
    });
    void stop.then(() => { if (!closed) socket.send(JSON.stringify({ type: 'subscribed', thingId })); });
    socket.on('close', () => {
      closed = true;
      void stop.then((unsubscribe) => unsubscribe());
    });
  });

  app.get('/api/v1/things/:thingId/twin', {
    config: { auth: { action: 'device:Twin:Read', roles: READERS } },
    schema: { tags: ['devices'], summary: 'Reported and desired state of a thing, each with its version', params: thingParams, response: { 200: twinSchema } },
  }, async (request) => {
    await devices.requireThing(request.principal!, request.params.thingId);
    return devices.twin(request.params.thingId);
  });

  app.put('/api/v1/things/:thingId/twin/desired', {
    config: { auth: { action: 'device:Twin:Update', roles: WRITERS } },
    schema: {
      tags: ['devices'], summary: 'Set the desired state; it is sent to the device now and whenever it subscribes again',
      params: thingParams, body: desiredBody, response: { 200: desiredSchema },
    },
  }, async (request) => {
    await devices.requireThing(request.principal!, request.params.thingId);
    return devices.setDesired(request.params.thingId, request.body.desired, request.body.ifVersion);
  });

  app.post('/api/v1/things/:thingId/commands', {
    config: { auth: { action: 'device:Command:Invoke', roles: WRITERS } },
    schema: {
      tags: ['devices'], summary: 'Send a command to a connected device and wait for its reply (504 on timeout); with ttlSeconds: 202, delivered now or on reconnect',
      params: thingParams, body: commandWithTtlBody, response: { 200: commandResult, 202: commandAccepted },
    },
  }, async (request, reply) => {
    const { thingId } = request.params;
    await devices.requireThing(request.principal!, thingId);
    const { ttlSeconds, name, payload } = request.body;
    if (ttlSeconds !== undefined) {
      const c = await offline.submit(request.principal!.accountId!, thingId, name, payload ?? null, ttlSeconds);
      return reply.code(202).send({ id: c.id, status: c.status, expiresAt: c.expiresAt });
    }
    const connected = (await devices.connectivity(thingId)).connected;
    if (!connected) throw conflict(`thing ${thingId} is not connected`, { type: 'device-not-connected' });
    const timeoutMs = request.body.timeoutMs ?? gw.config.COMMAND_TIMEOUT_MS;
    const result = await devices.invokeCommand(thingId, request.body.name, request.body.payload ?? null, timeoutMs);
    if (!result) throw timedOut(`thing ${thingId} did not answer command ${request.body.name} within ${timeoutMs} ms`, { type: 'command-timeout' });
    return { id: result.id, status: 'completed' as const, response: result.response };
  });

  app.delete('/api/v1/things/:thingId/session', {
    config: { auth: { action: 'device:Session:Disconnect', roles: WRITERS } },
    schema: {
      tags: ['devices'],
      summary: "Disconnect one of the account's devices from MQTT on whichever node holds its session (404 when it is connected nowhere); the device may connect again, revoke it to keep it out",
      params: thingParams, response: { 204: z.null() },
    },
  }, async (request, reply) => {
    const { thingId } = request.params;
    await devices.requireThing(request.principal!, thingId);
    const { disconnected } = await deviceSessions.disconnect(thingId);
    if (!disconnected) throw notFound(`thing ${thingId} is not connected`, { type: 'device-not-connected' });
    return reply.code(204).send(null);
  });

  app.delete('/platform/v1/broker/sessions/:thingId', {
    config: { auth: { action: 'platform:BrokerSession:Disconnect', roles: ['platform-admin', 'platform-operator'] } },
    schema: {
      tags: ['broker'], summary: "Disconnect a device's MQTT session on whichever node holds it (404 when connected nowhere)",
      params: z.object({ thingId: z.string().min(1).max(128) }), response: { 204: z.null() },
    },
  }, async (request, reply) => {
    const { disconnected } = await deviceSessions.disconnect(request.params.thingId);
    if (!disconnected) throw notFound(`device ${request.params.thingId} is not connected`);
    return reply.code(204).send(null);
  });
}

/**
 * Live connected/disconnected changes of the caller's account's things (the console's fleet and
 * device pages), from every node. WebSocket; a browser authenticates with the bearer subprotocol.
 */
export async function connectivityStreamRoute(app: ZodApp, devices: ConnectedDeviceService, hub: ConnectivityHub): Promise<void> {
  app.addHook('preClose', async () => hub.closeAll());
  app.get('/api/v1/things/connectivity/stream', {
    websocket: true,
    config: { auth: { action: 'device:Connectivity:Read', roles: READERS } },
    schema: {
      tags: ['devices'],
      summary: "Live connectivity of the account's things (WebSocket): `{ type: 'subscribed' }` once live, then `{ type: 'connectivity', thingId, connected, at }` per change; `?thingId=` for one thing (404 when not the caller's)",
      querystring: z.strictObject({ thingId: z.uuid().optional() }),
    },
    preHandler: async (request) => {
      accountOf(request);
      const { thingId } = request.query as { thingId?: string };
      if (thingId !== undefined) await devices.requireThing(request.principal!, thingId);
    },
  }, (socket, request) => {
    const { thingId } = request.query as { thingId?: string };
    const open = () => socket.readyState === socket.OPEN;
    const detach = hub.attach(accountOf(request), {
      send: (m) => open() && socket.send(JSON.stringify(m)),
      ping: () => open() && socket.ping(),
      close: () => socket.close(1001, 'stream closed by the server'),
      // the upgraded connection's socket: a close frame would wait behind the backlog
      cut: () => dropConnection(request.raw.socket),
      backlog: () => socket.bufferedAmount,
    }, thingId);
    socket.on('close', detach);
    socket.on('message', () => {}); // one-way: client messages are ignored
    socket.send(JSON.stringify({ type: 'subscribed', ...(thingId ? { thingId } : {}) }));
  });
}
