import { describe, expect, it } from 'vitest';
import { createActor } from 'xstate';
import {
  compareSemver, isSemver, marketplaceProductMachine, nextPatch, whyNotPublishable, type MarketplaceProductEvent, type ProductBundle,
} from '../../machines/marketplaceProduct.js';

const bundle: ProductBundle = { kind: 'software', name: 'fw', version: '2.1.0', url: 'https://example.com/fw.bin' };
const input = { id: 'p1', accountId: 'a1', modelId: 'm1', name: 'Thermostat', description: 'd', version: '1.0.0', bundles: [bundle], at: '2026-01-01T00:00:00.000Z' };
const T1 = '2026-01-02T00:00:00.000Z';
const T2 = '2026-01-03T00:00:00.000Z';
const T3 = '2026-01-04T00:00:00.000Z';

function run(events: MarketplaceProductEvent[], start = input) {
  const emitted: { type: string; version?: string }[] = [];
  const actor = createActor(marketplaceProductMachine, { input: start });
  actor.on('*', (e) => emitted.push(e));
  actor.start();
  for (const e of events) actor.send(e);
  return { snapshot: actor.getSnapshot(), emitted };
}
const publish = (at = T1): MarketplaceProductEvent => ({ type: 'PUBLISH', at });
const unpublish = (at = T2): MarketplaceProductEvent => ({ type: 'UNPUBLISH', at });
const update = (changes: Record<string, unknown>, at = T2): MarketplaceProductEvent => ({ type: 'UPDATE', at, changes });

describe('marketplaceProduct machine', () => {
  it('starts as a DRAFT holding its content, never published', () => {
    const { snapshot, emitted } = run([]);
    expect(snapshot.value).toBe('DRAFT');
    expect(snapshot.context).toMatchObject({
      name: 'Thermostat', version: '1.0.0', bundles: [bundle], createdAt: input.at, updatedAt: input.at, publishedVersion: null, publishedAt: null,
    });
    expect(emitted).toEqual([]);
  });

  it('DRAFT -> UPDATE stays DRAFT with any valid version (even a lower one), and announces nothing', () => {
    const { snapshot, emitted } = run([update({ name: 'New', version: '0.1.0', bundles: [] })]);
    expect(snapshot.value).toBe('DRAFT');
    expect(snapshot.context).toMatchObject({ name: 'New', description: 'd', version: '0.1.0', bundles: [], updatedAt: T2 });
    expect(emitted).toEqual([]);
  });

  it('refuses an UPDATE with a version that is not semver (in every state)', () => {
    const bad = update({ version: '1.0' });
    expect(run([]).snapshot.can(bad)).toBe(false);
    expect(run([publish()]).snapshot.can(bad)).toBe(false);
    expect(run([publish(), unpublish()]).snapshot.can(bad)).toBe(false);
  });

  it('DRAFT -> PUBLISH -> PUBLISHED: publishedVersion is the version, announced once', () => {
    const { snapshot, emitted } = run([publish()]);
    expect(snapshot.value).toBe('PUBLISHED');
    expect(snapshot.context).toMatchObject({ publishedVersion: '1.0.0', publishedAt: T1, updatedAt: T1 });
    expect(emitted).toEqual([{ type: 'marketplaceProduct.published', productId: 'p1', accountId: 'a1', modelId: 'm1', version: '1.0.0' }]);
  });

  it('refuses to PUBLISH a product without bundles, and says why', () => {
    const { snapshot } = run([update({ bundles: [] })]);
    expect(snapshot.can(publish())).toBe(false);
    expect(whyNotPublishable(snapshot.context)).toMatch(/at least one software bundle/);
  });

  it('PUBLISHED refuses a second PUBLISH and DELETE', () => {
    const { snapshot } = run([publish()]);
    expect(snapshot.can(publish(T2))).toBe(false);
    expect(snapshot.can({ type: 'DELETE', at: T2 })).toBe(false);
  });

  it('PUBLISHED -> UPDATE without a version is a release of the next patch', () => {
    const { snapshot, emitted } = run([publish(), update({ description: 'better' })]);
    expect(snapshot.value).toBe('PUBLISHED');
    expect(snapshot.context).toMatchObject({ description: 'better', version: '1.0.1', publishedVersion: '1.0.1', publishedAt: T2 });
    expect(emitted.map((e) => [e.type, e.version])).toEqual([['marketplaceProduct.published', '1.0.0'], ['marketplaceProduct.revised', '1.0.1']]);
  });

  it('PUBLISHED -> UPDATE with a greater version takes it; an equal or lower one is refused', () => {
    const published = run([publish()]).snapshot;
    expect(published.can(update({ version: '1.0.0' }))).toBe(false);
    expect(published.can(update({ version: '0.9.9' }))).toBe(false);
    expect(published.can(update({ version: '1.0.0+build.7' }))).toBe(false); // build metadata has no precedence
    expect(published.can(update({ bundles: [] }))).toBe(false); // a live product keeps a bundle
    const { snapshot } = run([publish(), update({ version: '2.0.0-rc.1', name: 'Two' })]);
    expect(snapshot.context).toMatchObject({ version: '2.0.0-rc.1', publishedVersion: '2.0.0-rc.1', name: 'Two' });
    // the next patch of a pre-release is its release
    expect(run([publish(), update({ version: '2.0.0-rc.1' }), update({ name: 'x' }, T3)]).snapshot.context.version).toBe('2.0.0');
  });

  it('PUBLISHED -> UNPUBLISH -> UNPUBLISHED, announced; UNPUBLISH again is refused', () => {
    const { snapshot, emitted } = run([publish(), unpublish()]);
    expect(snapshot.value).toBe('UNPUBLISHED');
    expect(snapshot.context).toMatchObject({ unpublishedAt: T2, publishedVersion: '1.0.0', changedSincePublished: false });
    expect(emitted.map((e) => e.type)).toEqual(['marketplaceProduct.published', 'marketplaceProduct.unpublished']);
    expect(snapshot.can(unpublish(T3))).toBe(false);
    expect(run([]).snapshot.can(unpublish())).toBe(false); // nor from DRAFT
  });

  it('UNPUBLISHED -> PUBLISH without changes republishes the same version', () => {
    const { snapshot, emitted } = run([publish(), unpublish(), publish(T3)]);
    expect(snapshot.value).toBe('PUBLISHED');
    expect(snapshot.context).toMatchObject({ version: '1.0.0', publishedVersion: '1.0.0', publishedAt: T3 });
    expect(emitted.at(-1)).toMatchObject({ type: 'marketplaceProduct.published', version: '1.0.0' });
  });

  it('UNPUBLISHED -> UPDATE stays UNPUBLISHED; republishing then needs a greater version', () => {
    const edited = run([publish(), unpublish(), update({ description: 'changed' }, T3)]).snapshot;
    expect(edited.value).toBe('UNPUBLISHED');
    expect(edited.context).toMatchObject({ description: 'changed', version: '1.0.0', changedSincePublished: true });
    expect(edited.can(publish(T3))).toBe(false);
    expect(whyNotPublishable(edited.context)).toMatch(/set a greater version than 1\.0\.0/);
    const lower = run([publish(), unpublish(), update({ version: '0.5.0' }, T3)]).snapshot;
    expect(lower.can(publish(T3))).toBe(false);
    const { snapshot } = run([publish(), unpublish(), update({ description: 'changed', version: '1.1.0' }, T3), publish(T3)]);
    expect(snapshot.value).toBe('PUBLISHED');
    expect(snapshot.context).toMatchObject({ publishedVersion: '1.1.0', changedSincePublished: false });
  });

  it('DRAFT -> DELETE -> DELETED (final): nothing is accepted after', () => {
    const { snapshot } = run([{ type: 'DELETE', at: T1 }]);
    expect(snapshot.value).toBe('DELETED');
    expect(snapshot.status).toBe('done');
    expect(snapshot.can(publish(T2))).toBe(false);
    expect(snapshot.can(update({ name: 'x' }))).toBe(false);
    // an unpublished product was published once: it is not deleted
    expect(run([publish(), unpublish()]).snapshot.can({ type: 'DELETE', at: T3 })).toBe(false);
  });
});

describe('semantic versions', () => {
  it('validates semver.org 2.0.0', () => {
    for (const v of ['0.0.0', '1.2.3', '1.0.0-alpha', '1.0.0-alpha.1', '1.0.0-0.3.7', '1.0.0-x.7.z.92', '1.0.0+20130313144700', '1.0.0-beta+exp.sha.5114f85', '99999999999999999999.0.0']) {
      expect(isSemver(v), v).toBe(true);
    }
    for (const v of ['1', '1.2', '01.2.3', '1.02.3', '1.2.3-', '1.2.3-01', '1.2.3+', 'v1.2.3', ' 1.2.3', '1.2.3-a..b']) expect(isSemver(v), v).toBe(false);
  });

  it('orders by precedence (the semver.org example), ignoring build metadata', () => {
    const ordered = ['1.0.0-alpha', '1.0.0-alpha.1', '1.0.0-alpha.beta', '1.0.0-beta', '1.0.0-beta.2', '1.0.0-beta.11', '1.0.0-rc.1', '1.0.0', '1.0.1', '1.1.0', '2.0.0', '10.0.0', '99999999999999999999.0.0'];
    for (let i = 0; i < ordered.length - 1; i++) {
      expect(compareSemver(ordered[i], ordered[i + 1]), `${ordered[i]} < ${ordered[i + 1]}`).toBe(-1);
      expect(compareSemver(ordered[i + 1], ordered[i])).toBe(1);
    }
    expect(compareSemver('1.0.0+a', '1.0.0+b')).toBe(0);
  });

  it('bumps the patch', () => {
    expect(nextPatch('1.2.3')).toBe('1.2.4');
    expect(nextPatch('1.2.9+build')).toBe('1.2.10');
    expect(nextPatch('1.3.0-rc.1')).toBe('1.3.0');
    expect(nextPatch('1.0.99999999999999999999')).toBe('1.0.100000000000000000000');
  });
});
