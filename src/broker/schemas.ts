import { z } from 'zod';
import { EXAMPLE, named } from '../http/components.js';

export const thingParams = z.object({ thingId: z.uuid() });

const isoOrNull = z.string().nullable();

export const connectivitySchema = z.object({
  thingId: z.string(),
  connected: z.boolean(),
  protocolVersion: z.number().int().nullable().describe('MQTT protocol level of the current connection: 4 (3.1.1) or 5'),
  connectedAt: isoOrNull,
  disconnectedAt: isoOrNull,
  lastSeen: isoOrNull.describe('last MQTT message (heartbeat, telemetry, twin) or connect'),
});

export const telemetrySchema = z.object({
  thingId: z.string(),
  telemetry: z.record(z.string(), z.unknown()).describe('latest value of every key the device sent'),
  updatedAt: isoOrNull,
});

const twinSide = z.object({ version: z.number().int(), state: z.record(z.string(), z.unknown()), updatedAt: isoOrNull });
export const twinSchema = z.object({ thingId: z.string(), reported: twinSide, desired: twinSide });
export const desiredSchema = twinSide;

export const desiredBody = z.strictObject({
  desired: z.record(z.string(), z.unknown()).describe('the whole desired state (replaces the previous one)'),
  // desired_version is an int4 column: a larger value would fail in PostgreSQL (500), not compare
  ifVersion: z.number().int().min(0).max(2 ** 31 - 1).optional().describe('only apply when the current desired version is this one (409 otherwise)'),
});

export const commandBody = z.strictObject({
  name: z.string().trim().min(1).max(100),
  payload: z.unknown().optional(),
  timeoutMs: z.number().int().min(100).max(60_000).optional().describe('default COMMAND_TIMEOUT_MS'),
});

export const commandResult = z.object({
  id: z.uuid().describe('correlation id of the request'),
  status: z.literal('completed'),
  response: z.unknown().describe("the device's reply (JSON when it parses)"),
});

// --- OpenAPI components (issue 39): the resources above by name, with examples
const E = EXAMPLE;
named(connectivitySchema, 'Connectivity', { example: { thingId: E.thingId, connected: true, protocolVersion: 5, connectedAt: E.at, disconnectedAt: null, lastSeen: E.at } });
named(telemetrySchema, 'Telemetry', { example: { thingId: E.thingId, telemetry: { temperature: 21.5, relay: 'on' }, updatedAt: E.at } });
named(twinSide, 'TwinState', { description: 'One side (reported or desired) of a device twin', example: { version: 3, state: { fan: 'on' }, updatedAt: E.at } });
named(twinSchema, 'Twin', { example: { thingId: E.thingId, reported: { version: 7, state: { fan: 'off' }, updatedAt: E.at }, desired: { version: 3, state: { fan: 'on' }, updatedAt: E.at } } });
named(desiredBody, 'TwinDesiredUpdate', { example: { desired: { fan: 'on' }, ifVersion: 3 } });
named(commandBody, 'Command', { description: 'A command to a connected device (MQTT request/response)', example: { name: 'reboot', payload: { delayS: 5 }, timeoutMs: 10000 } });
named(commandResult, 'CommandResult', { example: { id: E.otherId, status: 'completed', response: { ok: true } } });
