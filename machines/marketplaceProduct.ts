import { assign, emit, setup } from 'xstate';

/**
 * A marketplace product (issue 20, item 1): one of an account's models offered with a copy of
 * some of its software bundles, a name, a description and a semver version.
 *
 *   DRAFT -> PUBLISH -> PUBLISHED -> UNPUBLISH -> UNPUBLISHED -> PUBLISH -> PUBLISHED ...
 *   DRAFT -> DELETE -> DELETED (only a never-published product is deleted)
 *
 * Versions: a draft takes any version. A live change (UPDATE while PUBLISHED) is a new release at
 * once: its version must be greater than the published one, or is the next patch when none is
 * sent. An UPDATE while UNPUBLISHED prepares the next release; republishing it needs a version
 * greater than the last published one (unchanged content republishes as it was). A product
 * needs at least one bundle to be published. Pure: time comes as `at`.
 */
export interface ProductBundle {
  kind: 'software' | 'driver';
  name: string;
  version: string;
  url: string;
  sha256?: string;
}

export interface ProductContent {
  name: string;
  description: string;
  version: string;
  bundles: ProductBundle[];
}

export interface MarketplaceProductInput extends ProductContent {
  id: string;
  accountId: string;
  modelId: string;
  at: string;
}

export interface MarketplaceProductContext extends ProductContent {
  id: string;
  accountId: string;
  modelId: string;
  createdAt: string;
  updatedAt: string;
  /** the version live now (PUBLISHED) or last published (UNPUBLISHED); null until first published */
  publishedVersion: string | null;
  publishedAt: string | null;
  unpublishedAt: string | null;
  /** UNPUBLISHED only: updated since it was last published (republishing then needs a greater version) */
  changedSincePublished: boolean;
}

export type ProductChanges = Partial<ProductContent>;

export type MarketplaceProductEvent =
  | { type: 'UPDATE'; at: string; changes: ProductChanges }
  | { type: 'PUBLISH'; at: string }
  | { type: 'UNPUBLISH'; at: string }
  | { type: 'DELETE'; at: string };

export const PRODUCT_STATES = ['DRAFT', 'PUBLISHED', 'UNPUBLISHED', 'DELETED'] as const;
export type ProductState = (typeof PRODUCT_STATES)[number];

type Emitted =
  | { type: 'marketplaceProduct.published'; productId: string; accountId: string; modelId: string; version: string }
  | { type: 'marketplaceProduct.revised'; productId: string; accountId: string; modelId: string; version: string }
  | { type: 'marketplaceProduct.unpublished'; productId: string; accountId: string; modelId: string; version: string };

// --- semantic versions (semver.org 2.0.0; the machine may import nothing but xstate)

const SEMVER = /^(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)(?:-((?:0|[1-9]\d*|\d*[a-zA-Z-][0-9a-zA-Z-]*)(?:\.(?:0|[1-9]\d*|\d*[a-zA-Z-][0-9a-zA-Z-]*))*))?(?:\+([0-9a-zA-Z-]+(?:\.[0-9a-zA-Z-]+)*))?$/;

export function isSemver(v: string): boolean {
  return SEMVER.test(v);
}

/** Digit strings without leading zeros compare by length, then as text (no size limit). */
function compareDigits(a: string, b: string): number {
  return a.length !== b.length ? Math.sign(a.length - b.length) : a < b ? -1 : a > b ? 1 : 0;
}

/** Semver precedence: -1, 0 or 1 (build metadata is ignored). Both must be valid. */
export function compareSemver(a: string, b: string): number {
  const x = SEMVER.exec(a)!;
  const y = SEMVER.exec(b)!;
  for (let i = 1; i <= 3; i++) {
    const c = compareDigits(x[i], y[i]);
    if (c) return c;
  }
  if (x[4] === undefined || y[4] === undefined) return x[4] === y[4] ? 0 : x[4] === undefined ? 1 : -1;
  const p = x[4].split('.');
  const q = y[4].split('.');
  for (let i = 0; i < Math.min(p.length, q.length); i++) {
    const pn = /^\d+$/.test(p[i]);
    const qn = /^\d+$/.test(q[i]);
    const c = pn && qn ? compareDigits(p[i], q[i]) : pn !== qn ? (pn ? -1 : 1) : p[i] < q[i] ? -1 : p[i] > q[i] ? 1 : 0;
    if (c) return c;
  }
  return Math.sign(p.length - q.length);
}

/** The next patch release: 1.2.3 -> 1.2.4; a pre-release becomes its release (1.3.0-rc.1 -> 1.3.0). */
export function nextPatch(v: string): string {
  const [, major, minor, patch, pre] = SEMVER.exec(v)!;
  return pre !== undefined ? `${major}.${minor}.${patch}` : `${major}.${minor}.${(BigInt(patch) + 1n).toString()}`;
}

// --- why an event is refused (the guards below and the service's 409 details use the same answers)

/** Why PUBLISH is refused in DRAFT or UNPUBLISHED, or undefined when it is accepted. */
export function whyNotPublishable(c: MarketplaceProductContext): string | undefined {
  if (c.bundles.length === 0) return 'a product needs at least one software bundle to be published';
  if (c.publishedVersion !== null && c.changedSincePublished && compareSemver(c.version, c.publishedVersion) <= 0) {
    return `the product changed since version ${c.publishedVersion} was published: set a greater version than ${c.publishedVersion} (now ${c.version}) to republish`;
  }
  return undefined;
}

/** Why an UPDATE of a PUBLISHED product is refused, or undefined when it is accepted. */
export function whyNotLiveUpdatable(c: MarketplaceProductContext, changes: ProductChanges): string | undefined {
  if (changes.bundles?.length === 0) return 'a published product keeps at least one software bundle (unpublish it first)';
  if (changes.version !== undefined && c.publishedVersion !== null && compareSemver(changes.version, c.publishedVersion) <= 0) {
    return `a published product's version only increases: ${changes.version} is not greater than ${c.publishedVersion}`;
  }
  return undefined;
}

const validChanges = (changes: ProductChanges) => changes.version === undefined || isSemver(changes.version);

const apply = (c: MarketplaceProductContext, changes: ProductChanges, at: string): Partial<MarketplaceProductContext> => ({
  name: changes.name ?? c.name,
  description: changes.description ?? c.description,
  bundles: changes.bundles ?? c.bundles,
  version: changes.version ?? c.version,
  updatedAt: at,
});

export const marketplaceProductMachine = setup({
  types: {
    context: {} as MarketplaceProductContext,
    input: {} as MarketplaceProductInput,
    events: {} as MarketplaceProductEvent,
    emitted: {} as Emitted,
  },
  guards: {
    validChanges: ({ event }) => event.type === 'UPDATE' && validChanges(event.changes),
    liveUpdatable: ({ context, event }) => event.type === 'UPDATE' && validChanges(event.changes) && whyNotLiveUpdatable(context, event.changes) === undefined,
    publishable: ({ context }) => whyNotPublishable(context) === undefined,
  },
  actions: {
    edit: assign(({ context, event }) => (event.type === 'UPDATE' ? apply(context, event.changes, event.at) : {})),
    /** an offline edit: republishing will need a greater version */
    editUnpublished: assign(({ context, event }) => (event.type === 'UPDATE' ? { ...apply(context, event.changes, event.at), changedSincePublished: true } : {})),
    /** a live edit is a release at once: the version sent, or the next patch */
    release: assign(({ context, event }) => {
      if (event.type !== 'UPDATE') return {};
      const version = event.changes.version ?? nextPatch(context.version);
      return { ...apply(context, { ...event.changes, version }, event.at), publishedVersion: version, publishedAt: event.at };
    }),
    publish: assign(({ context, event }) => ({
      publishedVersion: context.version, publishedAt: event.at, updatedAt: event.at, changedSincePublished: false,
    })),
    unpublish: assign(({ event }) => ({ unpublishedAt: event.at, updatedAt: event.at })),
    announce: emit(({ context }, params: { type: Emitted['type'] }) => ({
      type: params.type, productId: context.id, accountId: context.accountId, modelId: context.modelId, version: context.version,
    })),
  },
}).createMachine({
  id: 'marketplaceProduct',
  context: ({ input }) => ({
    id: input.id, accountId: input.accountId, modelId: input.modelId,
    name: input.name, description: input.description, version: input.version, bundles: input.bundles,
    createdAt: input.at, updatedAt: input.at,
    publishedVersion: null, publishedAt: null, unpublishedAt: null, changedSincePublished: false,
  }),
  initial: 'DRAFT',
  states: {
    DRAFT: {
      on: {
        UPDATE: { guard: 'validChanges', actions: 'edit' },
        PUBLISH: { guard: 'publishable', target: 'PUBLISHED', actions: ['publish', { type: 'announce', params: { type: 'marketplaceProduct.published' } }] },
        DELETE: { target: 'DELETED', actions: assign({ updatedAt: ({ event }) => event.at }) },
      },
    },
    PUBLISHED: {
      on: {
        UPDATE: { guard: 'liveUpdatable', actions: ['release', { type: 'announce', params: { type: 'marketplaceProduct.revised' } }] },
        UNPUBLISH: { target: 'UNPUBLISHED', actions: ['unpublish', { type: 'announce', params: { type: 'marketplaceProduct.unpublished' } }] },
      },
    },
    UNPUBLISHED: {
      on: {
        UPDATE: { guard: 'validChanges', actions: 'editUnpublished' },
        PUBLISH: { guard: 'publishable', target: 'PUBLISHED', actions: ['publish', { type: 'announce', params: { type: 'marketplaceProduct.published' } }] },
      },
    },
    DELETED: { type: 'final' },
  },
});
