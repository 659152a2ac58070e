import { z } from 'zod';

/**
 * Named OpenAPI component schemas (issue 39). A domain's schemas.ts names the resources it
 * returns or takes with `named(schema, 'Thing', { example })`: the zod schema is registered in
 * zod's global registry under that id, and fastify-type-provider-zod then emits every use of it
 * (a route's body or response, or a property inside another schema) as a `$ref` to
 * `#/components/schemas/Thing` instead of an inline copy (src/http/openapi.ts collects them).
 * The registration is by identity: the route must use the very schema object that was named.
 *
 * Names are PascalCase and never end in `Input` (the provider derives `<Name>Input` for the
 * request side of each; openapi.ts folds it back into `<Name>` when both sides are the same).
 */
export interface ComponentOptions {
  /** what the resource is (else the schema's own `.describe()`) */
  description?: string;
  /** one example value; it must satisfy the schema (test/http/contract.test.ts checks it) */
  example?: unknown;
}

const NAME = /^[A-Z][A-Za-z0-9]*$/;
const names = new Set<string>();

export function named<T extends z.ZodType>(schema: T, id: string, options: ComponentOptions = {}): T {
  if (!NAME.test(id) || id.endsWith('Input')) throw new Error(`component name ${id}: PascalCase, not ending in Input`);
  // a module loaded twice (it is not, but tests reload) re-registers the same name: keep the first
  if (names.has(id)) return schema;
  names.add(id);
  const meta = z.globalRegistry.get(schema) ?? {};
  z.globalRegistry.add(schema, {
    ...meta,
    id,
    ...(options.description ? { description: options.description } : {}),
    ...(options.example !== undefined ? { examples: [options.example] } : {}),
  });
  return schema;
}

/** The names registered so far (for the contract test). */
export const componentNames = (): ReadonlySet<string> => names;

// shared example values, so that examples across resources tell one story
export const EXAMPLE = {
  accountId: '7d3c5f1e-2b4a-4c8d-9e6f-0a1b2c3d4e5f',
  thingId: '3f1c2a9e-6b7d-4e8f-9a0b-1c2d3e4f5a6b',
  modelId: 'a1b2c3d4-e5f6-4a7b-8c9d-0e1f2a3b4c5d',
  otherId: '5e6f7a8b-9c0d-4e1f-a2b3-c4d5e6f7a8b9',
  at: '2026-11-22T10:00:00.000Z',
  later: '2026-12-22T10:00:00.000Z',
} as const;
