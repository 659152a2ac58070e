import { execFile } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { promisify } from 'node:util';
import { describe, expect, it } from 'vitest';
import { domains } from '../src/domains.js';
import { checkWiring } from '../src/wiring.js';
import type { AnyActorKind } from '../src/actors/store.js';
import { PUBLISHED_READ_MODELS, actorTableOffences, gatewayServicesOffences, crossModuleOffences, lifecycleWriteOffences, migrationTables, migrationViews, perGatewayStateOffences, projectedWriteOffences, viewOffences, viewsOf } from './architectureRules.js';

const run = promisify(execFile);
const root = path.resolve(import.meta.dirname, '..');

function sourceFiles(dir: string): string[] {
  return fs.readdirSync(dir, { withFileTypes: true }).flatMap((e) => {
    const p = path.join(dir, e.name);
    return e.isDirectory() ? sourceFiles(p) : e.name.endsWith('.ts') ? [p] : [];
  });
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

  const kinds = domains.flatMap((d) => (d.kinds ?? []) as AnyActorKind[]);
  const projected = kinds.filter((k) => k.projection);
  const projectedTables = new Set(projected.map((k) => k.projection!.table));
  const src = sourceFiles(path.join(root, 'src')).map((file) => ({
    file: path.relative(root, file),
    module: path.relative(path.join(root, 'src'), file).split(path.sep)[0].replace(/\.ts$/, ''),
    source: fs.readFileSync(file, 'utf8'),
  }));
  const outsideStore = src.filter((f) => f.module !== 'actors');

  it('no SQL outside the actor store writes a column an actor kind projects (UPDATE, INSERT, dynamic column lists)', () => {
    const offences = outsideStore.flatMap((f) => projected.flatMap((k) => projectedWriteOffences(f.source, k.projection!.table, k.projection!.columns).map((o) => `${f.file}: ${o} (projected by actor kind ${k.type})`)));
    expect(offences).toEqual([]);
  });

  it('no SQL outside the actor store writes a lifecycle column of a table without a machine (exceptions: test/architectureRules.ts)', () => {
    const offences = outsideStore.flatMap((f) => lifecycleWriteOffences(f.source, projectedTables).map((o) => `${f.file}: ${o}`));
    expect(offences).toEqual([]);
  });

  it('no SQL outside the actor store reads, writes or deletes actor rows', () => {
    const offences = outsideStore.flatMap((f) => actorTableOffences(f.source).map((o) => `${f.file}: ${o}`));
    expect(offences).toEqual([]);
  });

  it('each module owns its tables: no SQL on another module\'s tables but its published read models', () => {
    const migrations = path.join(root, 'src', 'db', 'migrations');
    const tables = migrationTables(migrations);
    const views = migrationViews(migrations);
    expect(crossModuleOffences(src, new Set([...tables, ...views.keys()]))).toEqual([]);
    // a published read model exists, and a view reads only its owner's tables
    expect(viewOffences(src, tables, views)).toEqual([]);
  });

  it('no module-level state per gateway (WeakMap<Gateway>): a domain\'s state is what its init returns', () => {
    expect(src.flatMap((f) => perGatewayStateOffences(f.source).map((o) => `${f.file}: ${o}`))).toEqual([]);
  });

  const serviceNames = domains.flatMap((d) => (d.provides ?? []) as string[]);

  it('tests use public interfaces or declared test hooks, never a gateway\'s wired services (RunningGateway.services)', () => {
    const tests = sourceFiles(path.join(root, 'test')).map((file) => ({ file: path.relative(root, file), source: fs.readFileSync(file, 'utf8') }));
    expect(tests.flatMap((f) => gatewayServicesOffences(f.source, serviceNames).map((o) => `${f.file}: ${o}`))).toEqual([]);
  });

  it('the rules catch planted violations', () => {
    const tables = new Set(['things', 'factory_services', 'quota_requests']);
    // an INSERT of a projected lifecycle column, and a dynamic update of a projected table
    expect(projectedWriteOffences("await sql`insert into things (id, lifecycle_state) values (${id}, 'ROLLEDOFF')`", 'things', ['lifecycle_state'])).toEqual(['insert things.lifecycle_state']);
    expect(projectedWriteOffences('await db`update quota_requests set ${db(fields)} where id = ${id}`', 'quota_requests', ['status'])).toEqual(['update quota_requests with a dynamic column list']);
    expect(projectedWriteOffences('await db`update quota_requests set status = ${s}, decided_at = now() where id = ${id}`', 'quota_requests', ['status', 'decided_at'])).toEqual(['update quota_requests.status', 'update quota_requests.decided_at']);
    expect(projectedWriteOffences('update quota_requests set reason = 1 where id = 2', 'quota_requests', ['status'])).toEqual([]);
    // a lifecycle column of a table no machine owns
    expect(lifecycleWriteOffences('await sql`update webhook_things set revoked_at = now() where id = ${id}`', new Set())).toEqual(['update webhook_things.revoked_at']);
    // actor rows read or deleted beside the store
    expect(actorTableOffences("await sql`select snapshot from actors where type = 'x'`")).toEqual(['read actors']);
    expect(actorTableOffences("await sql`delete from actors where id = ${id}`")).toEqual(['delete actors']);
    // per-gateway state in a module-level WeakMap, whatever its key type says
    expect(perGatewayStateOffences('const sealers = new WeakMap<object, Sealer>();\nfunction init(gw) { sealers.set(gw, s); }')).toEqual(['module-level WeakMap sealers keyed by a gateway']);
    expect(perGatewayStateOffences('const x = new WeakMap<Gateway, number>();')).toEqual(['WeakMap<Gateway>']);
    expect(perGatewayStateOffences('const compiled = new WeakMap<readonly string[], BlockList>();\ncompiled.get(list);')).toEqual([]);
    // a test reaching into a gateway's services (built here so that this file does not read them itself)
    const svc = 'services';
    expect(gatewayServicesOffences(`await gw.${svc}.trust.expireClaimGroups();\nconst b = node2.${svc}?.iam.cache;`, serviceNames)).toEqual(['reads services.trust of a gateway', 'reads services.iam of a gateway']);
    expect(gatewayServicesOffences(`const iam = (gw.${svc} as Record<string, any>).iam;\nconst all = gw.${svc};`, serviceNames)).toEqual(['takes gw.services whole']);
    // a docker-compose file's services and a test backend's map are no gateway's
    expect(gatewayServicesOffences(`compose.${svc}.postgres.healthcheck; Object.entries(compose.${svc}); compose.${svc}[name]; backend.${svc}.set(id, creds); m.${svc}.provision!.id`, serviceNames)).toEqual([]);
    // a read of factory_services from another domain
    const planted = [
      { module: 'factory', file: 'src/factory/repo.ts', source: 'sql`select * from factory_services where id = ${id}`' },
      { module: 'trust', file: 'src/trust/repo.ts', source: 'sql`select f.id from things t join factory_services f on f.model_id = t.model_id`' },
    ];
    expect(crossModuleOffences(planted, tables)).toEqual(['src/trust/repo.ts: read factory_services (owned by factory)']);
    // comments are not SQL
    expect(crossModuleOffences([{ module: 'trust', file: 'x.ts', source: '// read from factory_services by the factory domain' }, planted[0]], tables)).toEqual([]);
    // a published read model (a view) is read by other modules, never written; an unpublished view has no owner once two modules use it
    const relations = new Set([...tables, 'thing_directory', 'trust_private_view']);
    const readers = [
      { module: 'feed', file: 'src/feed/repo.ts', source: 'sql`select t.serial from domain_events e join thing_directory t on t.id = e.actor_id::uuid`' },
      { module: 'ota', file: 'src/ota/repo.ts', source: 'sql`update thing_directory set serial = ${s} where id = ${id}`' },
      { module: 'trust', file: 'src/trust/repo.ts', source: 'sql`select 1 from trust_private_view`' },
      { module: 'feed', file: 'src/feed/other.ts', source: 'sql`select 1 from trust_private_view`' },
    ];
    expect(crossModuleOffences(readers, relations)).toEqual([
      'src/ota/repo.ts: update thing_directory (owned by trust)',
      'src/trust/repo.ts: read trust_private_view: several modules use it and none is declared its owner (DECLARED_OWNERS)',
      'src/feed/other.ts: read trust_private_view: several modules use it and none is declared its owner (DECLARED_OWNERS)',
    ]);
    // a published view over another module's table; a published read model no migration creates
    const views = new Map([['thing_directory', ' select t.id, f.registrar_id from things t join factory_services f on f.model_id = t.model_id']]);
    expect(viewOffences([...planted, readers[0]], tables, views)).toEqual([
      ...Object.keys(PUBLISHED_READ_MODELS).filter((n) => n !== 'thing_directory').map((n) => `published read model ${n}: no migration creates it`),
      'view thing_directory (owned by trust): read factory_services (owned by factory)',
    ]);
    expect(viewsOf('create or replace view thing_directory as\n  select id, serial -- from factory_services\n  from things;\ncreate view x (a) as select 1 from y;'))
      .toEqual([['thing_directory', '\n  select id, serial \n  from things'], ['x', ' select 1 from y']]);
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
