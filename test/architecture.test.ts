import { execFile } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { promisify } from 'node:util';
import { describe, expect, it } from 'vitest';
import { domains } from '../src/domains.js';
import { checkWiring } from '../src/wiring.js';
import type { AnyActorKind } from '../src/actors/store.js';

const run = promisify(execFile);
const root = path.resolve(import.meta.dirname, '..');

function sourceFiles(dir: string): string[] {
  return fs.readdirSync(dir, { withFileTypes: true }).flatMap((e) => {
    const p = path.join(dir, e.name);
    return e.isDirectory() ? sourceFiles(p) : e.name.endsWith('.ts') ? [p] : [];
  });
}

/** `update <table> set <assignments>` statements in a file (SQL in template literals). */
export function projectedWrites(source: string, table: string, columns: readonly string[]): string[] {
  const found: string[] = [];
  const statement = new RegExp(`update\\s+${table}\\s+(?:as\\s+\\w+\\s+|\\w+\\s+)?set\\b([\\s\\S]*?)(?:\\bwhere\\b|\\breturning\\b|\`|;)`, 'gi');
  for (const m of source.matchAll(statement)) {
    for (const col of columns) {
      if (new RegExp(`(^|[\\s,(])${col}\\s*=`, 'i').test(m[1])) found.push(`${table}.${col}`);
    }
  }
  return found;
}

describe('architecture', () => {
  it('dependency rules hold (.dependency-cruiser.cjs): pure machines, no cross-domain imports, no HTTP in the core', async () => {
    const bin = path.join(root, 'node_modules', '.bin', 'depcruise');
    const result = await run(bin, ['src', 'machines', '--config', '.dependency-cruiser.cjs', '--output-type', 'err'], { cwd: root }).then(
      (r) => ({ code: 0, out: r.stdout }),
      (e: { code: number; stdout: string; stderr: string }) => ({ code: e.code, out: `${e.stdout}\n${e.stderr}` }),
    );
    expect(result.out, result.out).not.toMatch(/error /);
    expect(result.code, result.out).toBe(0);
  }, 120_000);

  it('no SQL outside the actor store writes a column an actor kind projects', () => {
    const kinds = domains.flatMap((d) => (d.kinds ?? []) as AnyActorKind[]);
    const projected = kinds.filter((k) => k.projection);
    const offences: string[] = [];
    for (const file of sourceFiles(path.join(root, 'src'))) {
      if (file.includes(`${path.sep}actors${path.sep}`)) continue;
      const text = fs.readFileSync(file, 'utf8');
      for (const k of projected) {
        for (const w of projectedWrites(text, k.projection!.table, k.projection!.columns)) offences.push(`${path.relative(root, file)} writes ${w} (projected by actor kind ${k.type})`);
      }
    }
    expect(offences).toEqual([]);
  });

  it('the projection check catches a hand-written lifecycle write', () => {
    const sql = 'await db`update quota_requests set status = ${s}, decided_at = now() where id = ${id}`';
    expect(projectedWrites(sql, 'quota_requests', ['status', 'decided_at'])).toEqual(['quota_requests.status', 'quota_requests.decided_at']);
    expect(projectedWrites('update quota_requests set reason = 1 where id = 2', 'quota_requests', ['status'])).toEqual([]);
  });

  it('every actor kind is declared by exactly one domain', () => {
    const types = domains.flatMap((d) => (d.kinds ?? []).map((k) => (k as AnyActorKind).type));
    expect(new Set(types).size).toBe(types.length);
  });

  it('domain wiring: each requirement is provided earlier; a wrong order fails with a message that says what to move', () => {
    expect(() => checkWiring(domains)).not.toThrow();
    const reversed = [...domains].reverse();
    expect(() => checkWiring(reversed)).toThrow(/requires service '\w+' from domain '[\w-]+', which comes later in src\/domains.ts: move/);
    const missing = domains.filter((d) => d.name !== 'accounts');
    expect(() => checkWiring(missing)).toThrow(/requires service 'accounts', which no domain provides/);
  });
});
