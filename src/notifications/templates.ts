/**
 * Template rendering and the seeded catalogue. Variables are `{{name}}` or `{{a.b}}` paths into
 * `data`; in HTML bodies every value is HTML-escaped; subjects and titles are single-line text.
 */

export interface TemplateRecord {
  id: string;
  categoryId: string;
  subject: string;
  title: string;
  bodyText: string;
  bodyHtml: string;
}

export interface Rendered {
  subject: string;
  title: string;
  text: string;
  html: string;
}

const VAR = /\{\{\s*([A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z0-9_]+)*)\s*\}\}/g;

export class MissingVariables extends Error {
  constructor(readonly names: string[]) {
    super(`missing data variable(s): ${names.join(', ')}`);
  }
}

export function escapeHtml(s: string): string {
  return s.replace(/[&<>"'`=]/g, (c) => `&#${c.charCodeAt(0)};`);
}

function lookup(data: Record<string, unknown>, path: string): unknown {
  let cur: unknown = data;
  for (const part of path.split('.')) {
    if (cur === null || typeof cur !== 'object' || !Object.prototype.hasOwnProperty.call(cur, part)) return undefined;
    cur = (cur as Record<string, unknown>)[part];
  }
  return cur;
}

function stringify(v: unknown): string {
  if (v === null || v === undefined) return '';
  if (typeof v === 'string') return v;
  if (typeof v === 'number' || typeof v === 'boolean' || typeof v === 'bigint') return String(v);
  return JSON.stringify(v);
}

/** Names of the variables a template text uses. */
export function variablesOf(...texts: string[]): string[] {
  const names = new Set<string>();
  for (const t of texts) for (const m of t.matchAll(VAR)) names.add(m[1]);
  return [...names];
}

function fill(text: string, data: Record<string, unknown>, encode: (s: string) => string): string {
  return text.replace(VAR, (_, name: string) => encode(stringify(lookup(data, name))));
}

const oneLine = (s: string) => s.replace(/[\r\n\t]+/g, ' ').trim();

/**
 * Renders a template. `strict` (publish requests): every variable must be present in `data`,
 * else MissingVariables. Non-strict (domain events): missing variables render empty.
 * `vars` adds computed variables (actionUrl, consoleUrl).
 */
export function render(t: Pick<TemplateRecord, 'subject' | 'title' | 'bodyText' | 'bodyHtml'>, data: Record<string, unknown>, opts: { strict: boolean; vars?: Record<string, string> }): Rendered {
  const all = { ...data, ...opts.vars };
  if (opts.strict) {
    const missing = variablesOf(t.subject, t.title, t.bodyText, t.bodyHtml).filter((n) => lookup(all, n) === undefined);
    if (missing.length) throw new MissingVariables(missing);
  }
  return {
    subject: oneLine(fill(t.subject, all, (s) => s)).slice(0, 998),
    title: oneLine(fill(t.title, all, (s) => s)),
    text: fill(t.bodyText, all, (s) => s),
    html: fill(t.bodyHtml, all, escapeHtml),
  };
}

/** Seeded categories: localized display names (en required). */
export const SEED_CATEGORIES: { id: string; names: Record<string, string> }[] = [
  { id: 'devices', names: { en: 'Devices', de: 'Geräte', fr: 'Appareils', es: 'Dispositivos' } },
  { id: 'claim-groups', names: { en: 'Claim groups', de: 'Claim-Gruppen', fr: 'Groupes de revendication', es: 'Grupos de reclamación' } },
  { id: 'quotas', names: { en: 'Quotas', de: 'Kontingente', fr: 'Quotas', es: 'Cuotas' } },
  { id: 'organizations', names: { en: 'Organizations', de: 'Organisationen', fr: 'Organisations', es: 'Organizaciones' } },
  { id: 'general', names: { en: 'General', de: 'Allgemein', fr: 'Général', es: 'General' } },
];

const layout = (heading: string, body: string) =>
  `<div style="font-family:sans-serif"><h2>${heading}</h2>${body}<p><a href="{{actionUrl}}">Open in the console</a></p></div>`;

/** Seeded templates, for the gateway's own events and for general use. */
export const SEED_TEMPLATES: TemplateRecord[] = [
  {
    id: 'device/revoked',
    categoryId: 'devices',
    subject: 'Device {{serial}} was revoked',
    title: 'Device {{serial}} was revoked',
    bodyText: 'Device {{serial}} (model {{model}}, thing {{thingId}}) was revoked by {{by}}: its certificate {{certificateSerial}} is on the CRL and the device can no longer connect.\n\n{{actionUrl}}\n',
    bodyHtml: layout('Device {{serial}} was revoked', '<p>Device <b>{{serial}}</b> (model {{model}}, thing <code>{{thingId}}</code>) was revoked by {{by}}: its certificate <code>{{certificateSerial}}</code> is on the CRL and the device can no longer connect.</p>'),
  },
  {
    id: 'device/certificate-expiring',
    categoryId: 'devices',
    subject: 'The certificate of device {{deviceSerial}} expires on {{notAfter}}',
    title: 'The certificate of device {{deviceSerial}} expires on {{notAfter}}',
    bodyText: 'Certificate {{serial}} of device {{deviceSerial}} (thing {{thingId}}) expires on {{notAfter}}. The device must renew it before then (POST /ddi/v1/{{thingId}}/certificate/renew or MQTT devices/{{thingId}}/certificate/renew), or it can no longer connect.\n\n{{actionUrl}}\n',
    bodyHtml: layout('The certificate of device {{deviceSerial}} expires on {{notAfter}}', '<p>Certificate <code>{{serial}}</code> of device <b>{{deviceSerial}}</b> (thing <code>{{thingId}}</code>) expires on {{notAfter}}. The device must renew it before then, or it can no longer connect.</p>'),
  },
  {
    id: 'license/requested',
    categoryId: 'devices',
    subject: 'Device {{serial}} requests a license',
    title: 'Device {{serial}} requests a license: approve or deny it',
    bodyText: 'Device {{serial}} (thing {{thingId}}) requested a license ({{licenseId}}); its model needs a tenant\'s approval. Users with the approve_licenses capability decide it with POST /api/v1/licenses/{{licenseId}}/approve or /deny.\n\n{{actionUrl}}\n',
    bodyHtml: layout('Device {{serial}} requests a license', '<p>Device <b>{{serial}}</b> (thing <code>{{thingId}}</code>) requested a license; its model needs a tenant\'s approval.</p>'),
  },
  {
    id: 'claim-group/capped',
    categoryId: 'claim-groups',
    subject: 'Claim group {{name}} is full',
    title: 'Claim group {{name}} reached its limit of {{maxDevices}} devices',
    bodyText: 'Claim group {{name}} ({{claimGroupId}}) reached its limit of {{maxDevices}} devices; further devices cannot join it.\n\n{{actionUrl}}\n',
    bodyHtml: layout('Claim group {{name}} is full', '<p>Claim group <b>{{name}}</b> reached its limit of {{maxDevices}} devices; further devices cannot join it.</p>'),
  },
  {
    id: 'quota/request-decided',
    categoryId: 'quotas',
    subject: 'Quota request {{decision}}: {{serviceCode}}/{{quotaCode}}',
    title: 'Your request for {{serviceCode}}/{{quotaCode}} = {{desiredValue}} was {{decision}}',
    bodyText: 'Your quota increase request {{requestId}} for {{serviceCode}}/{{quotaCode}} (desired value {{desiredValue}}) was {{decision}}. {{reason}}\n\n{{actionUrl}}\n',
    bodyHtml: layout('Quota request {{decision}}', '<p>Your quota increase request for <b>{{serviceCode}}/{{quotaCode}}</b> (desired value {{desiredValue}}) was <b>{{decision}}</b>.</p><p>{{reason}}</p>'),
  },
  {
    id: 'organization/leave-blocked',
    categoryId: 'organizations',
    subject: 'Leaving the organization is blocked',
    title: 'Your account cannot leave organization {{organizationId}}',
    bodyText: 'Your account cannot leave organization {{organizationId}} ({{reason}}). Denied quota requests: {{deniedRequestIds}}.\n\n{{actionUrl}}\n',
    bodyHtml: layout('Leaving the organization is blocked', '<p>Your account cannot leave organization <code>{{organizationId}}</code> ({{reason}}).</p><p>Denied quota requests: {{deniedRequestIds}}</p>'),
  },
  {
    id: 'webhook/subscription-suspended',
    categoryId: 'general',
    subject: 'Webhook subscription {{subscriptionId}} was suspended ({{reason}})',
    title: 'Webhook subscription {{subscriptionId}} was suspended ({{reason}})',
    bodyText: 'State-change subscription {{subscriptionId}} was suspended at {{at}} ({{reason}}: delivery-failures = deliveries in a row were dropped after every attempt failed or timed out; receiver-gone = its receiver answered 410 Gone; owner = a user of the account suspended it). Its pending deliveries were dropped and no change is delivered while it is suspended: keep polling the feed. Once the receiver works, reactivate it with PATCH /provisioning/v1/state-change-subscriptions/{{subscriptionId}} {"status":"ACTIVE"}.\n\n{{actionUrl}}\n',
    bodyHtml: layout('Webhook subscription suspended', '<p>State-change subscription <code>{{subscriptionId}}</code> was suspended at {{at}} (<b>{{reason}}</b>). Its pending deliveries were dropped and no change is delivered while it is suspended: keep polling the feed. Once the receiver works, reactivate it with <code>PATCH /provisioning/v1/state-change-subscriptions/{{subscriptionId}}</code> <code>{"status":"ACTIVE"}</code>.</p>'),
  },
  {
    id: 'bridge/rule-failing',
    categoryId: 'general',
    subject: 'Data bridge rule {{name}} is failing',
    title: 'Data bridge rule {{name}} is failing: its sink refuses deliveries',
    bodyText: 'Rule {{name}} ({{ruleId}}) has had every delivery refused by its sink since {{since}} (last error: {{error}}). Deliveries are retried and resume from where they stopped once the sink accepts them again; nothing is lost while the telemetry history keeps the data. Check the bridge (GET /api/v1/rules/{{ruleId}} shows the lag and last error).\n\n{{actionUrl}}\n',
    bodyHtml: layout('Data bridge rule failing', '<p>Rule <b>{{name}}</b> (<code>{{ruleId}}</code>) has had every delivery refused by its sink since {{since}}.</p><p>Last error: <code>{{error}}</code></p><p>Deliveries are retried and resume from where they stopped once the sink accepts them again.</p>'),
  },
  {
    id: 'general/message',
    categoryId: 'general',
    subject: '{{subject}}',
    title: '{{subject}}',
    bodyText: '{{message}}\n',
    bodyHtml: '<div style="font-family:sans-serif"><p>{{message}}</p></div>',
  },
];

/** Picks the best display name for an Accept-Language header (q-values honoured), falling back to en. */
export function localize(names: Record<string, string>, acceptLanguage: string | undefined): string {
  const prefs = (acceptLanguage ?? '')
    .split(',')
    .map((part, i) => {
      const [tag, ...params] = part.trim().split(';');
      const q = params.map((p) => p.trim()).find((p) => p.startsWith('q='));
      const qv = q ? Number(q.slice(2)) : 1;
      return { tag: tag.trim(), q: Number.isFinite(qv) ? qv : 0, i };
    })
    .filter((p) => p.tag && p.q > 0)
    .sort((a, b) => b.q - a.q || a.i - b.i);
  const keys = Object.keys(names);
  for (const { tag } of prefs) {
    if (tag === '*') break;
    const exact = keys.find((k) => k.toLowerCase() === tag.toLowerCase());
    if (exact) return names[exact];
    const base = tag.split('-')[0].toLowerCase();
    const partial = keys.find((k) => k.split('-')[0].toLowerCase() === base);
    if (partial) return names[partial];
  }
  return names.en ?? names[keys[0]] ?? '';
}
