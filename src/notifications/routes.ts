import { z } from 'zod';
import type { FastifyRequest } from 'fastify';
import type { Gateway, ZodApp } from '../gateway.js';
import { principalOf } from '../http/auth/plugin.js';
import { parseAccountIdHeader } from '../http/auth/accountHeader.js';
import { invalid, refused, unauthenticated } from '../lib/errors.js';
import { drained, dropConnection } from '../lib/backlog.js';
import { traceparentFor } from '../http/trace.js';
import type { Reader } from './repo.js';
import {
  authzDecisionSchema, authzRequestSchema, categoryBody, categoryItem, CATEGORY_ID, feedQuery, feedResponse, idParams, preferencesBody, preferencesResponse, publishBody,
  publishResponse, templateBody, templateItem, type StreamData,
} from './schemas.js';
import { STREAM_COOKIE, STREAM_TTL_SECONDS, type AuthzRequest, type NotificationsService } from './service.js';
import type { StreamSink } from './streams.js';

/** Humans who read a feed: account users (acc-* and idc-* through assignments) and platform staff. */
export const READER_ROLES = ['admin', 'operator', 'viewer', 'platform-admin', 'platform-operator', 'notification-reader'] as const;
const read = (action: string) => ({ auth: { action: `notifications:${action}`, roles: READER_ROLES } });
const problem = z.object({ type: z.string(), title: z.string(), status: z.number(), detail: z.string() }).passthrough();
const noContent = z.null().describe('No Content');

/** The reader of a feed call: the caller, plus X-Account-Id's account only if the caller acts on it. */
function readerOf(request: FastifyRequest): Reader {
  const p = principalOf(request);
  const accountId = parseAccountIdHeader(request.headers['x-account-id']);
  return { sub: p.sub, accountId: accountId !== undefined && p.accountId === accountId ? accountId : null };
}

function cookieOf(request: FastifyRequest, name: string): string | undefined {
  const header = request.headers.cookie;
  if (!header) return undefined;
  for (const part of header.split(';')) {
    const eq = part.indexOf('=');
    if (eq > 0 && part.slice(0, eq).trim() === name) return part.slice(eq + 1).trim();
  }
  return undefined;
}

function lastEventIdOf(request: FastifyRequest, query: string | undefined): number | undefined {
  const raw = (request.headers['last-event-id'] as string | undefined) ?? query;
  if (raw === undefined || raw === '') return undefined;
  if (!/^\d{1,15}$/.test(raw)) throw invalid('Last-Event-ID must be the id of an event this stream sent');
  return Number(raw);
}

const streamQuery = z.object({ lastEventId: z.string().optional().describe('for clients that cannot set the Last-Event-ID header') });

/**
 * The feed, preferences and stream routes; registered under both /api/notifications and
 * /console/notifications (`prefix` is passed in for the stream cookie's Path).
 */
export function feedRoutes(svc: NotificationsService, prefix: string) {
  return async (app: ZodApp) => {
    const tags = ['notifications'];
    const streamPath = `${prefix}/stream`;

    app.get('/feed', {
      config: read('Feed:Read'),
      schema: { tags, summary: 'The caller\'s feed, newest first (own user-scope plus the X-Account-Id account\'s tenant-scope notifications)', querystring: feedQuery, response: { 200: feedResponse, 400: problem } },
    }, async (request) => svc.feed(readerOf(request), request.query));

    app.get('/unseen/count', {
      config: read('Feed:Read'),
      schema: { tags, summary: 'Number of unread, not dismissed notifications (badge)', response: { 200: z.object({ count: z.number().int() }) } },
    }, async (request) => ({ count: await svc.unseenCount(readerOf(request)) }));

    app.patch('/:id/read', {
      config: read('Feed:Update'),
      schema: { tags, summary: 'Mark one notification read (404 when it is not the caller\'s)', params: idParams, response: { 204: noContent, 404: problem } },
    }, async (request, reply) => {
      await svc.markRead(readerOf(request), request.params.id);
      return reply.code(204).send(null);
    });

    app.patch('/read-all', {
      config: read('Feed:Update'),
      schema: { tags, summary: 'Mark every notification of the feed read', response: { 204: noContent } },
    }, async (request, reply) => {
      await svc.readAll(readerOf(request));
      return reply.code(204).send(null);
    });

    app.patch('/:id/dismiss', {
      config: read('Feed:Update'),
      schema: { tags, summary: 'Hide one notification from the default feed (404 when it is not the caller\'s)', params: idParams, response: { 204: noContent, 404: problem } },
    }, async (request, reply) => {
      await svc.dismiss(readerOf(request), request.params.id);
      return reply.code(204).send(null);
    });

    app.patch('/dismiss-all', {
      config: read('Feed:Update'),
      schema: { tags, summary: 'Hide every notification of the feed', response: { 204: noContent } },
    }, async (request, reply) => {
      await svc.dismissAll(readerOf(request));
      return reply.code(204).send(null);
    });

    app.get('/categories', {
      config: read('Category:List'),
      schema: { tags, summary: 'Registered categories, display names localized by Accept-Language', response: { 200: z.object({ items: z.array(categoryItem) }) } },
    }, async (request) => svc.categories(request.headers['accept-language']));

    app.get('/preferences', {
      config: read('Preferences:Read'),
      schema: { tags, summary: 'The caller\'s preferences for user-scope notifications', response: { 200: preferencesResponse } },
    }, async (request) => svc.preferences(principalOf(request).sub));

    app.put('/preferences', {
      config: read('Preferences:Update'),
      schema: { tags, summary: 'Replace the caller\'s preferences (global mute, disabled categories, quiet hours)', body: preferencesBody, response: { 200: preferencesResponse, 400: problem } },
    }, async (request) => svc.putPreferences(principalOf(request).sub, request.body));

    app.post('/stream/auth', {
      config: read('Stream:Connect'),
      schema: { tags, summary: 'Exchange the bearer token (and X-Account-Id) for a one-hour stream cookie', response: { 204: noContent } },
    }, async (request, reply) => {
      const token = await svc.createStreamSession(readerOf(request));
      reply.header('set-cookie', `${STREAM_COOKIE}=${token}; Path=${streamPath}; Max-Age=${STREAM_TTL_SECONDS}; HttpOnly; Secure; SameSite=Strict`);
      reply.header('cache-control', 'no-store');
      return reply.code(204).send(null);
    });

    const authenticateStream = async (request: FastifyRequest): Promise<Reader> => {
      const reader = await svc.resolveStreamSession(cookieOf(request, STREAM_COOKIE));
      if (!reader) throw unauthenticated(`no valid stream cookie; POST ${prefix}/stream/auth with your bearer token first (the cookie lasts one hour)`);
      return reader;
    };

    app.get('/stream', {
      config: { auth: 'public' },
      schema: {
        tags, summary: 'Server-Sent Events: `event: notification` frames (created, dismissed), comment heartbeats; authenticated by the stream cookie; resumes after Last-Event-ID',
        querystring: streamQuery,
        response: { 401: problem },
      },
    }, async (request, reply) => {
      const reader = await authenticateStream(request);
      const lastId = lastEventIdOf(request, request.query.lastEventId);
      const since = lastId ?? (await svc.lastStreamSeq());
      reply.hijack();
      const res = reply.raw;
      res.writeHead(200, {
        'content-type': 'text/event-stream; charset=utf-8',
        'cache-control': 'no-cache, no-transform',
        connection: 'keep-alive',
        'x-accel-buffering': 'no',
        traceparent: traceparentFor(request.id),
      });
      request.raw.socket.setNoDelay(true);
      res.write('retry: 3000\n: connected\n\n');
      let closed = false;
      let detach: (() => void) | undefined;
      res.on('close', () => {
        closed = true;
        detach?.();
      });
      res.on('error', (err) => request.log.debug({ err }, 'notification stream write failed'));
      const write = (text: string) => {
        if (res.writableEnded || res.destroyed) return 0;
        res.write(text);
        return Buffer.byteLength(text);
      };
      const sink: StreamSink = {
        transport: 'sse',
        send: (seq: number, data: StreamData) => write(`id: ${seq}\nevent: notification\ndata: ${JSON.stringify(data)}\n\n`),
        heartbeat: () => write(': heartbeat\n\n'),
        close: () => {
          if (!res.writableEnded) res.end();
        },
        cut: () => dropConnection(request.raw.socket),
        backlog: () => res.writableLength,
        drained: (ms) => drained(request.raw.socket, ms),
      };
      try {
        detach = await svc.hub.attach(reader, sink, since, (s) => svc.streamEventsSince(reader, s));
      } catch (err) {
        request.log.error({ err }, 'notification stream could not start');
        res.end();
        return;
      }
      if (closed) detach();
    });

    app.get('/stream/ws', {
      websocket: true,
      config: { auth: 'public' },
      schema: { tags, summary: 'The same events over WebSocket (messages `{ id, event: "notification", data }`); stream cookie; `?lastEventId=` resumes', querystring: streamQuery },
      preValidation: async (request) => {
        (request as FastifyRequest & { streamReader?: Reader }).streamReader = await authenticateStream(request);
        lastEventIdOf(request, (request.query as { lastEventId?: string }).lastEventId);
      },
    }, async (socket, request) => {
      const reader = (request as FastifyRequest & { streamReader?: Reader }).streamReader!;
      const lastId = lastEventIdOf(request, (request.query as { lastEventId?: string }).lastEventId);
      let closed = false;
      let detach: (() => void) | undefined;
      socket.on('close', () => {
        closed = true;
        detach?.();
      });
      socket.on('message', () => {}); // the stream is one-way; client messages are ignored
      const sink: StreamSink = {
        transport: 'websocket',
        send: (seq, data) => {
          if (socket.readyState !== socket.OPEN) return 0;
          const text = JSON.stringify({ id: seq, event: 'notification', data });
          socket.send(text);
          return Buffer.byteLength(text);
        },
        heartbeat: () => {
          if (socket.readyState === socket.OPEN) socket.ping();
        },
        close: () => socket.close(1001, 'server closing'),
        // the upgraded connection's socket: no close frame, it would wait behind the backlog
        cut: () => dropConnection(request.raw.socket),
        backlog: () => socket.bufferedAmount,
        drained: (ms) => drained(request.raw.socket, ms),
      };
      try {
        const since = lastId ?? (await svc.lastStreamSeq());
        detach = await svc.hub.attach(reader, sink, since, (s) => svc.streamEventsSince(reader, s));
      } catch (err) {
        request.log.error({ err }, 'notification websocket could not start');
        socket.close(1011, 'internal error');
        return;
      }
      if (closed) detach();
    });
  };
}

/** Publish, catalogue administration and the default authorization service (under /api/notifications and /internal). */
export function apiRoutes(svc: NotificationsService, gw: Gateway) {
  return async (app: ZodApp) => {
    const tags = ['notifications'];
    app.post('/api/notifications/publish', {
      config: { auth: { action: 'notifications:Notification:Publish', roles: ['notification-publisher'] } },
      schema: {
        tags, summary: 'Publish one notification (email and/or in-app); 201 sent, 200 dropped by the recipient\'s preferences (final, do not retry)',
        body: publishBody,
        response: { 200: publishResponse, 201: publishResponse, 400: problem, 401: problem, 403: problem, 500: problem, 502: problem },
      },
    }, async (request, reply) => {
      const result = await svc.publish(principalOf(request), request.body);
      return reply.code(result.status === 'sent' ? 201 : 200).send(result);
    });

    app.get('/api/notifications/templates', {
      config: { auth: { action: 'notifications:Template:List', roles: ['notification-publisher', 'platform-admin', 'platform-operator'] } },
      schema: { tags, summary: 'The template catalogue', response: { 200: z.object({ items: z.array(templateItem) }) } },
    }, async () => ({ items: await svc.templates() }));

    app.put('/api/notifications/templates/:namespace/:name', {
      config: { auth: { action: 'notifications:Template:Put', roles: ['platform-admin'] } },
      schema: {
        tags, summary: 'Create or replace a template <namespace>/<name> (platform admins)',
        params: z.object({ namespace: z.string().regex(CATEGORY_ID, 'namespace: lower-case letters, digits, -'), name: z.string().regex(CATEGORY_ID, 'name: lower-case letters, digits, -') }),
        body: templateBody,
        response: { 200: templateItem, 201: templateItem, 400: problem },
      },
    }, async (request, reply) => {
      const { namespace, name } = request.params;
      const r = await svc.putTemplate({ id: `${namespace}/${name}`, ...request.body }, principalOf(request).sub);
      return reply.code(r.created ? 201 : 200).send(r.template);
    });

    app.put('/api/notifications/categories/:categoryId', {
      config: { auth: { action: 'notifications:Category:Put', roles: ['platform-admin'] } },
      schema: {
        tags, summary: 'Create or replace a category with localized display names (platform admins)',
        params: z.object({ categoryId: z.string().regex(CATEGORY_ID, 'category id: lower-case letters, digits, -') }),
        body: categoryBody,
        response: { 200: categoryItem, 201: categoryItem },
      },
    }, async (request, reply) => {
      const r = await svc.putCategory(request.params.categoryId, request.body.names, principalOf(request).sub);
      return reply.code(r.created ? 201 : 200).send(r.category);
    });

    app.post('/internal/notifications/authorize', {
      // the caller proves itself with the shared secret, not by its address (behind a load balancer every peer is private)
      config: { auth: { schemes: ['internal'] } },
      schema: {
        tags: ['internal'], summary: 'Default authorization service for notification sends (NOTIFY_AUTHZ_URL unset); X-Internal-Secret required',
        body: authzRequestSchema,
        response: { 200: authzDecisionSchema },
      },
    }, async (request) => {
      return svc.defaultDecision(request.body as AuthzRequest);
    });
  };
}
