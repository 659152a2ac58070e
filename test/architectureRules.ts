import fs from 'node:fs';
import path from 'node:path';

/**
 * The SQL rules of the architecture (docs/decisions.md, "Architecture step 2"), as functions over
 * source text so that a planted violation can be shown to fail them (test/architecture.test.ts).
 * SQL is read from template literals by regular expressions: a statement built from pieces that
 * name no table is out of their sight, and the rules say so where it matters.
 */

/** Columns that record a lifecycle decision: only a machine (through the actor store) writes them. */
export const LIFECYCLE_COLUMNS = ['state', 'status', 'lifecycle_state', 'revoked', 'revoked_at', 'used_at', 'decision', 'decided_at', 'suspended_at', 'approved_at'] as const;

/**
 * Tables whose lifecycle columns are written outside a machine, each with its reason. This is the
 * one list of exceptions; anything else that writes such a column outside the store fails.
 */
export const LIFECYCLE_EXCEPTIONS: Record<string, string> = {
  ota_actions: 'one row per target device and rollout, thousands per rollout: the rolloutGroup machine decides over their tallies; each action follows the pure otaAction machine in code (machines/otaAction.ts) without an actor of its own, to keep a rollout of 100,000 devices to one row write per report',
  eligibility_artifacts: 'a revocable token with no states beyond revoked; revoking is one idempotent write, nothing is decided from the revocation but "refuse redemption"',
  ingest_job_errors: 'per-item outcomes of a job (REJECTED and why) are data the ingestJob machine reports, not a lifecycle',
  iam_temporary_credentials: 'STS credentials live at most 12 hours and are only ever revoked: one idempotent write',
};

/** Tables other modules may read (never write): a read model the owner publishes, with its reason. */
export const PUBLISHED_READ_MODELS: Record<string, { owner: string; why: string }> = {
  domain_events: { owner: 'actors', why: 'the actor store\'s event log: the state-change feed, notifications and the registry\'s reconcile read committed events from it' },
  // SQL views an owner creates in its migration (1700-1703) over its own tables: what other modules
  // may read of them, joined in their queries (a view inlines into the plan: the same plan as the join
  // on the table had); never written
  thing_directory: { owner: 'trust', why: 'things as other modules join them: identity, model, owner, lifecycle state, enrollment and revocation (the feed\'s pages, OTA\'s skip of revoked things, the registry\'s references and reconcile)' },
  model_directory: { owner: 'trust', why: 'models as other modules name them: id, owner, VID:PID (the blacklist\'s model names, the registry\'s vendor namespace and model checks, the factory\'s model check)' },
  device_status: { owner: 'broker', why: 'a thing\'s connectivity (connected, since, last seen, protocol): trust\'s fleet registry filters and sorts on it' },
  device_twin_versions: { owner: 'broker', why: 'a thing\'s twin versions and their times (not the documents): the fleet registry\'s thing detail' },
  device_latest_telemetry: { owner: 'broker', why: 'a thing\'s latest telemetry: the fleet registry\'s thing detail' },
  account_directory: { owner: 'iam', why: 'which accounts exist: quotas checks an account and locks its row (`for update` through the view) to serialize the account\'s membership changes, as it did on the table' },
  factory_service_directory: { owner: 'factory', why: 'which models an account\'s factory services bind to a registrar: the feed\'s registrar scope' },
};

export interface Statement { table: string; kind: 'update' | 'insert' | 'delete' | 'read'; columns: string[]; dynamic: boolean }

/** Every SQL statement's table and the columns it writes, found in a file's text. */
export function statements(text: string): Statement[] {
  // comments out (`//` only after a space or at a line's start: not the one in `http://`)
  const source = text.replace(/\/\*[\s\S]*?\*\//g, '').replace(/(^|\s)\/\/.*$/gm, '$1');
  const found: Statement[] = [];
  for (const m of source.matchAll(/\bupdate\s+([a-z_][a-z0-9_]*)\s+(?:as\s+\w+\s+|(?!set\b)\w+\s+)?set\b([\s\S]*?)(?:\bwhere\b|\breturning\b|\bfrom\b|`|;)/gi)) {
    const body = m[2];
    const columns = [...body.matchAll(/(?:^|[\s,(])([a-z_][a-z0-9_]*)\s*=/gi)].map((c) => c[1].toLowerCase());
    found.push({ table: m[1].toLowerCase(), kind: 'update', columns, dynamic: /\$\{/.test(body.split('=')[0] ?? '') || /^\s*\$\{/.test(body) });
  }
  for (const m of source.matchAll(/\binsert\s+into\s+([a-z_][a-z0-9_]*)\s*(\(([^)]*)\)|\$\{)?/gi)) {
    const columns = m[3] ? m[3].split(',').map((c) => c.trim().toLowerCase()) : [];
    found.push({ table: m[1].toLowerCase(), kind: 'insert', columns, dynamic: !m[3] });
  }
  for (const m of source.matchAll(/\bdelete\s+from\s+([a-z_][a-z0-9_]*)/gi)) found.push({ table: m[1].toLowerCase(), kind: 'delete', columns: [], dynamic: false });
  for (const m of source.matchAll(/\b(?:from|join)\s+([a-z_][a-z0-9_]*)\b/gi)) {
    const before = source.slice(Math.max(0, m.index! - 7), m.index!).toLowerCase();
    if (!before.endsWith('delete ')) found.push({ table: m[1].toLowerCase(), kind: 'read', columns: [], dynamic: false });
  }
  return found;
}

/** Writes of projected columns (UPDATE or INSERT), and dynamic writes (`set ${...}`, `insert into t ${...}`) of a projected table. */
export function projectedWriteOffences(source: string, table: string, columns: readonly string[]): string[] {
  const out: string[] = [];
  for (const s of statements(source)) {
    if (s.table !== table || (s.kind !== 'update' && s.kind !== 'insert')) continue;
    if (s.dynamic) out.push(`${s.kind} ${table} with a dynamic column list`);
    for (const c of s.columns) if (columns.includes(c)) out.push(`${s.kind} ${table}.${c}`);
  }
  return out;
}

/** Writes of lifecycle columns of tables no actor kind projects (outside the listed exceptions). */
export function lifecycleWriteOffences(source: string, projectedTables: ReadonlySet<string>): string[] {
  const out: string[] = [];
  for (const s of statements(source)) {
    if ((s.kind !== 'update' && s.kind !== 'insert') || projectedTables.has(s.table) || s.table in LIFECYCLE_EXCEPTIONS) continue;
    for (const c of s.columns) if ((LIFECYCLE_COLUMNS as readonly string[]).includes(c)) out.push(`${s.kind} ${s.table}.${c}`);
  }
  return out;
}

/** SQL on the actor store's own table (reads included) outside src/actors. */
export function actorTableOffences(source: string): string[] {
  return statements(source).filter((s) => s.table === 'actors').map((s) => `${s.kind} actors`);
}

/** The migrations' SQL, `--` comments out. */
function migrationSql(dir: string): string[] {
  return fs.readdirSync(dir).filter((n) => n.endsWith('.sql')).sort().map((f) => fs.readFileSync(path.join(dir, f), 'utf8').replace(/--.*$/gm, ''));
}

/** Tables created by the migrations. */
export function migrationTables(dir: string): Set<string> {
  const tables = new Set<string>();
  for (const sql of migrationSql(dir)) {
    for (const m of sql.matchAll(/create\s+table\s+(?:if\s+not\s+exists\s+)?([a-z_][a-z0-9_]*)/gi)) tables.add(m[1].toLowerCase());
  }
  return tables;
}

/** The views a migration's SQL creates, each with its query (`--` comments out). */
export function viewsOf(sql: string): [string, string][] {
  return [...sql.replace(/--.*$/gm, '').matchAll(/create\s+(?:or\s+replace\s+)?view\s+([a-z_][a-z0-9_]*)\b[^;]*?\bas\b([^;]*)/gi)].map((m) => [m[1].toLowerCase(), m[2]]);
}

/** Views created by the migrations, each with its query (the last definition wins: `create or replace`). */
export function migrationViews(dir: string): Map<string, string> {
  return new Map(migrationSql(dir).flatMap(viewsOf));
}

/**
 * Which module (top-level folder of src/) owns each table: the one folder whose SQL names it, or
 * for a table several folders name, the owner declared here. Any other folder's SQL on it (read
 * or write) is an offence, unless the table is a published read model (read only).
 */
export const DECLARED_OWNERS: Record<string, string> = {
  actors: 'actors',
  domain_events: 'actors',
  accounts: 'iam',
  things: 'trust',
  models: 'trust',
  factory_services: 'factory',
  device_connectivity: 'broker',
  device_twins: 'broker',
  device_telemetry_latest: 'broker',
};

/**
 * The owner of each table or view that `files` use: declared (DECLARED_OWNERS), published (a read
 * model's owner), or the one module whose SQL names it; undefined when several do and none is declared.
 */
function owners(files: { module: string; source: string }[], relations: ReadonlySet<string>): Map<string, string | undefined> {
  const users = new Map<string, Set<string>>();
  for (const f of files) for (const s of statements(f.source)) if (relations.has(s.table)) (users.get(s.table) ?? users.set(s.table, new Set()).get(s.table)!).add(f.module);
  const out = new Map<string, string | undefined>();
  for (const t of relations) out.set(t, DECLARED_OWNERS[t] ?? PUBLISHED_READ_MODELS[t]?.owner ?? (users.get(t)?.size === 1 ? [...users.get(t)!][0] : undefined));
  return out;
}

/**
 * `module -> file -> source` of src/ → cross-module SQL offences (`file: read things (owned by trust)`).
 * `relations` are the migrations' tables and views: a view is owned like a table (a published read
 * model by its publisher), so another module may read it only when it is published.
 */
export function crossModuleOffences(files: { module: string; file: string; source: string }[], relations: ReadonlySet<string>): string[] {
  const owner = owners(files, relations);
  const out: string[] = [];
  for (const f of files) {
    for (const s of statements(f.source).filter((s) => relations.has(s.table))) {
      const o = owner.get(s.table);
      if (o === undefined) { out.push(`${f.file}: ${s.kind} ${s.table}: several modules use it and none is declared its owner (DECLARED_OWNERS)`); continue; }
      if (o === f.module) continue;
      if (s.kind === 'read' && PUBLISHED_READ_MODELS[s.table]?.owner === o) continue;
      out.push(`${f.file}: ${s.kind} ${s.table} (owned by ${o})`);
    }
  }
  return [...new Set(out)];
}

/**
 * The migrations' views against the same rule: a view reads only its owner's tables (and published
 * read models); every published read model exists (a table or a view of the migrations).
 */
export function viewOffences(files: { module: string; source: string }[], tables: ReadonlySet<string>, views: ReadonlyMap<string, string>): string[] {
  const relations = new Set([...tables, ...views.keys()]);
  const owner = owners(files, relations);
  const out: string[] = [];
  for (const name of Object.keys(PUBLISHED_READ_MODELS)) if (!relations.has(name)) out.push(`published read model ${name}: no migration creates it`);
  for (const [name, query] of views) {
    const o = owner.get(name);
    if (o === undefined) continue; // read by no module (or several, which crossModuleOffences reports)
    for (const s of statements(query).filter((s) => relations.has(s.table))) {
      const t = owner.get(s.table);
      if (t === o || (s.kind === 'read' && PUBLISHED_READ_MODELS[s.table]?.owner === t)) continue;
      out.push(`view ${name} (owned by ${o}): ${s.kind} ${s.table} (owned by ${t ?? 'several modules'})`);
    }
  }
  return [...new Set(out)];
}

/**
 * Module-level state per gateway: a WeakMap declared at a module's top level (whatever its key
 * type says: `WeakMap<Gateway, …>`, `WeakMap<object, …>`) that is keyed by a gateway (`gw`,
 * `gateway`). A domain's state is what its `init` returns; such a map is a second, hidden wiring.
 */
export function perGatewayStateOffences(source: string): string[] {
  const out: string[] = [];
  if (/WeakMap<\s*Gateway\b/.test(source)) out.push('WeakMap<Gateway>');
  for (const m of source.matchAll(/^(?:export\s+)?(?:const|let)\s+(\w+)\s*=\s*new\s+WeakMap\b/gm)) {
    if (new RegExp(`\\b${m[1]}\\.(?:get|set|has)\\(\\s*(?:gw|gateway)\\b`).test(source)) out.push(`module-level WeakMap ${m[1]} keyed by a gateway`);
  }
  return out;
}

/**
 * A test reading a gateway's wired services (RunningGateway.services) instead of its public
 * interfaces or its declared test hooks (`testHooks.<domain>`): a member `services` followed by
 * the name of a declared service (through `.`, `?.` or a quoted index), or the whole object taken
 * (cast with `as`, or assigned as the end of a statement). Other objects with a `services` member
 * (a docker-compose file's, a test backend's map of credentials) name none of the gateway's services.
 */
export function gatewayServicesOffences(source: string, serviceNames: readonly string[]): string[] {
  const out: string[] = [];
  const named = new RegExp(`\\.services\\s*(?:\\?\\.|\\.|\\[\\s*['"\`])\\s*(${serviceNames.join('|')})\\b`, 'g');
  for (const m of source.matchAll(named)) out.push(`reads services.${m[1]} of a gateway`);
  for (const m of source.matchAll(/\b(\w+)\.services\s*(?:\bas\b|;)/g)) out.push(`takes ${m[1]}.services whole`);
  return [...new Set(out)];
}
