/**
 * Service control policies: deny-based documents in the IAM policy format. Pure functions (no I/O):
 * `evaluateScps` answers the first explicit Deny that matches an action, or undefined.
 *
 * Matching rules (recorded in docs/decisions.md): actions are `<service>:<Resource>:<Verb>`;
 * patterns compare case-insensitively; `*` matches any run of characters (colons included) and
 * `?` exactly one; an `Allow` statement never grants and never overrides a Deny.
 */
export interface ScpStatement {
  Sid?: string;
  Effect: 'Allow' | 'Deny';
  Action: string | string[];
  Resource: string | string[];
}

export interface ScpDocument {
  Version: string;
  Statement: ScpStatement | ScpStatement[];
}

export interface AttachedScp {
  id: string;
  name: string;
  document: ScpDocument;
}

const regexCache = new Map<string, RegExp>();

/** `*` any run, `?` one character, everything else literal; case-insensitive; whole string. */
export function patternToRegExp(pattern: string): RegExp {
  let re = regexCache.get(pattern);
  if (!re) {
    const body = pattern.replace(/[.+^${}()|[\]\\]/g, '\\$&').replace(/\*/g, '.*').replace(/\?/g, '.');
    re = new RegExp(`^${body}$`, 'is');
    if (regexCache.size > 10_000) regexCache.clear();
    regexCache.set(pattern, re);
  }
  return re;
}

export function matches(pattern: string, value: string): boolean {
  return patternToRegExp(pattern).test(value);
}

const list = (v: string | string[]) => (Array.isArray(v) ? v : [v]);
export const statementsOf = (doc: ScpDocument) => (Array.isArray(doc.Statement) ? doc.Statement : [doc.Statement]);

/** The statement that explicitly denies `action` on `resource`, with its policy; else undefined. */
export function evaluateScps(scps: readonly AttachedScp[], action: string, resource = '*'): { scp: AttachedScp; statement: ScpStatement } | undefined {
  for (const scp of scps) {
    for (const statement of statementsOf(scp.document)) {
      if (statement.Effect !== 'Deny') continue;
      if (!list(statement.Action).some((p) => matches(p, action))) continue;
      if (!list(statement.Resource).some((p) => p === '*' || matches(p, resource))) continue;
      return { scp, statement };
    }
  }
  return undefined;
}

/** A copy where a single Statement object and single Action/Resource strings become arrays (for validation). */
export function normalizeScpDocument(raw: unknown): unknown {
  if (!raw || typeof raw !== 'object' || Array.isArray(raw)) return raw;
  const doc = { ...(raw as Record<string, unknown>) };
  const wrap = (v: unknown) => (typeof v === 'string' || (v && typeof v === 'object' && !Array.isArray(v)) ? [v] : v);
  doc.Statement = wrap(doc.Statement);
  if (Array.isArray(doc.Statement)) {
    doc.Statement = doc.Statement.map((st) => {
      if (!st || typeof st !== 'object' || Array.isArray(st)) return st;
      const copy = { ...(st as Record<string, unknown>) };
      if (typeof copy.Action === 'string') copy.Action = [copy.Action];
      if (typeof copy.Resource === 'string') copy.Resource = [copy.Resource];
      return copy;
    });
  }
  return doc;
}
