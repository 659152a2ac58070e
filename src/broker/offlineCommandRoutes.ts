import { z } from 'zod';
import type { ZodApp } from '../gateway.js';
import { DEVICE_COMMAND_STATUSES } from '../../machines/deviceCommand.js';
import type { OfflineCommands } from './offlineCommands.js';
import { commandBody, thingParams } from './schemas.js';
import type { ConnectedDeviceService } from './service.js';

const READERS = ['admin', 'operator', 'viewer'];
const WRITERS = ['admin', 'operator'];
const isoOrNull = z.string().nullable();

/** POST body: `ttlSeconds` makes the command durable (202, delivered on reconnect) instead of synchronous. */
export const commandWithTtlBody = commandBody.extend({
  ttlSeconds: z.number().int().min(1).max(30 * 24 * 3600).optional()
    .describe('store the command for this long when the device is offline and answer 202 at once (without it: wait for the reply, 409 when offline)'),
});

export const commandStatus = z.enum(DEVICE_COMMAND_STATUSES as [string, ...string[]]);

export const commandAccepted = z.object({
  id: z.uuid(),
  status: commandStatus.describe('`delivered` when sent before this answer (the device connected to this node, subscribed to its command topic, with room in its MQTT 5 Receive Maximum window), else `pending` (sent later by the node holding the device)'),
  expiresAt: z.string(),
});

export const storedCommand = z.object({
  id: z.uuid(),
  thingId: z.string(),
  name: z.string(),
  payload: z.unknown(),
  ttlSeconds: z.number().int(),
  status: commandStatus,
  createdAt: z.string(),
  expiresAt: z.string(),
  deliveredAt: isoOrNull,
  completedAt: isoOrNull.describe('when the reply came (succeeded, failed) or the TTL passed (expired)'),
  response: z.unknown().describe("the device's reply (JSON when it parses), null before it"),
});

/** The status routes of commands sent with `ttlSeconds`. */
export async function offlineCommandRoutes(app: ZodApp, devices: ConnectedDeviceService, commands: OfflineCommands): Promise<void> {
  app.get('/api/v1/things/:thingId/commands/:commandId', {
    config: { auth: { action: 'device:Command:Read', roles: READERS } },
    schema: {
      tags: ['devices'], summary: 'Status, times and reply of a command sent with a time to live',
      params: thingParams.extend({ commandId: z.uuid() }), response: { 200: storedCommand },
    },
  }, async (request) => {
    const { thingId, commandId } = request.params;
    await devices.requireThing(request.principal!, thingId);
    return commands.require(request.principal!.accountId!, thingId, commandId);
  });

  app.get('/api/v1/things/:thingId/commands', {
    config: { auth: { action: 'device:Command:Read', roles: READERS } },
    schema: {
      tags: ['devices'], summary: 'Commands sent to a thing with a time to live, newest first',
      params: thingParams,
      querystring: z.strictObject({ status: commandStatus.optional(), limit: z.coerce.number().int().min(1).max(500).default(100) }),
      response: { 200: z.object({ items: z.array(storedCommand) }) },
    },
  }, async (request) => {
    const { thingId } = request.params;
    await devices.requireThing(request.principal!, thingId);
    const status = request.query.status as (typeof DEVICE_COMMAND_STATUSES)[number] | undefined;
    return { items: await commands.list(request.principal!.accountId!, thingId, status, request.query.limit) };
  });

  app.post('/api/v1/things/:thingId/commands/:commandId/cancel', {
    config: { auth: { action: 'device:Command:Cancel', roles: WRITERS } },
    schema: {
      tags: ['devices'], summary: 'Cancel a pending command (409 once it was delivered, answered or expired)',
      params: thingParams.extend({ commandId: z.uuid() }), response: { 200: storedCommand },
    },
  }, async (request) => {
    const { thingId, commandId } = request.params;
    await devices.requireThing(request.principal!, thingId);
    return commands.cancel(request.principal!.accountId!, thingId, commandId);
  });
}
