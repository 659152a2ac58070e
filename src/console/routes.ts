import fs from 'node:fs';
import { z } from 'zod';
import type { FastifyReply } from 'fastify';
import type { ZodApp } from '../gateway.js';

const PAGES_DIR = new URL('./pages/', import.meta.url);
const ASSETS_DIR = new URL('./assets/', import.meta.url);
const ASSETS = ['console.css', 'common.js', 'chart.js', 'notifications.js', 'fleet.js', 'device.js', 'ota.js', 'provisioning.js', 'iam.js', 'sessions.js', 'bridges.js'] as const;
const PAGES = {
  notifications: 'Notifications', fleet: 'Fleet', device: 'Device',
  ota: 'OTA', provisioning: 'Provisioning', iam: 'Access', sessions: 'Sessions', bridges: 'Bridges',
} as const;

/** Scripts from this origin only (no inline script): device data can never run as code. */
const CSP = "default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; connect-src 'self'; img-src 'self' data:; frame-ancestors 'none'";
const tags = ['console'];

/** Each page is the shell (header, navigation, sign-in) around its fragment; composed once at start. */
function pages(): Record<keyof typeof PAGES, string> {
  const shell = fs.readFileSync(new URL('shell.html', PAGES_DIR), 'utf8');
  const compose = (name: keyof typeof PAGES) => shell
    .replaceAll('{{title}}', PAGES[name])
    .replaceAll('{{name}}', name)
    .replace('{{page}}', () => fs.readFileSync(new URL(`${name}.html`, PAGES_DIR), 'utf8'));
  return Object.fromEntries(Object.keys(PAGES).map((name) => [name, compose(name as keyof typeof PAGES)])) as Record<keyof typeof PAGES, string>;
}

/** The console: static pages and their scripts; everything they show comes from the public APIs. */
export async function consoleRoutes(app: ZodApp): Promise<void> {
  const html = pages();
  const assets = new Map(ASSETS.map((name) => [name, fs.readFileSync(new URL(name, ASSETS_DIR), 'utf8')]));
  const send = (name: keyof typeof PAGES) => async (_request: unknown, reply: FastifyReply) =>
    reply.type('text/html; charset=utf-8').header('content-security-policy', CSP).header('cache-control', 'no-cache').send(html[name]);

  app.get('/console', {
    config: { auth: 'public' },
    schema: { tags, summary: 'Console: the notification feed with live updates' },
  }, send('notifications'));
  app.get('/console/things', {
    config: { auth: 'public' },
    schema: { tags, summary: 'Console: the fleet (registry list with filters, paging and live connectivity)' },
  }, send('fleet'));
  app.get('/console/things/:thingId', {
    config: { auth: 'public' },
    schema: { tags, summary: 'Console: one device (identity, certificate, connectivity, telemetry, twin, commands, revoke)', params: z.object({ thingId: z.uuid() }) },
  }, send('device'));
  app.get('/console/sessions', {
    config: { auth: 'public' },
    schema: { tags, summary: 'Console: connected devices (protocol, since) with live changes; kick for platform operators' },
  }, send('sessions'));
  app.get('/console/ota', {
    config: { auth: 'public' },
    schema: { tags, summary: 'Console: OTA target filters with a live preview, rollouts from a filter, progress per group, start, pause, resume, cancel' },
  }, send('ota'));
  app.get('/console/provisioning', {
    config: { auth: 'public' },
    schema: { tags, summary: 'Console: claim groups (secret shown once), enrollment tokens, factory services (health, rotation), provisioning runs and their legs' },
  }, send('provisioning'));
  app.get('/console/iam', {
    config: { auth: 'public' },
    schema: { tags, summary: "Console: the account's access keys (secret shown once; deactivate, delete) and the roles assigned to its users" },
  }, send('iam'));
  app.get('/console/bridges', {
    config: { auth: 'public' },
    schema: { tags, summary: "Console: the account's data bridges and rules with their delivery counts, lag and last error; enable and disable rules" },
  }, send('bridges'));
  app.get('/console/assets/:file', {
    config: { auth: 'public' },
    schema: { tags, summary: 'Console scripts and stylesheet', params: z.object({ file: z.enum(ASSETS) }) },
  }, async (request, reply) => reply
    .type(request.params.file.endsWith('.css') ? 'text/css; charset=utf-8' : 'text/javascript; charset=utf-8')
    .header('cache-control', 'no-cache')
    .send(assets.get(request.params.file)));
}
