/**
 * Architecture rules (DESIGN.md sections 2 and 4), checked by test/architecture.test.ts in
 * `npm test`. A violation fails the suite naming the rule, the importing file and the import.
 */
const DOMAINS = '(iam|quotas|trust|broker|notifications|factory|feed|ingest|blacklist|registry|marketplace|console|ota)';

/** @type {import('dependency-cruiser').IConfiguration} */
module.exports = {
  forbidden: [
    {
      name: 'machines-are-pure',
      comment: 'machines/ holds pure XState machines: they import xstate and each other, nothing else',
      severity: 'error',
      from: { path: '^machines/' },
      to: { pathNot: ['^machines/', '^node_modules/xstate/'] },
    },
    {
      name: 'actors-know-no-domain',
      comment: 'the actor store is infrastructure: no domain, no HTTP',
      severity: 'error',
      from: { path: '^src/actors/' },
      to: { path: [`^src/${DOMAINS}/`, '^src/http/', '^node_modules/fastify'] },
    },
    {
      name: 'no-cross-domain-imports',
      comment: 'a domain reaches another only through the Services contracts of src/gateway.ts',
      severity: 'error',
      from: { path: `^src/${DOMAINS}/` },
      to: { path: `^src/${DOMAINS}/`, pathNot: '^src/$1/' },
    },
    {
      name: 'core-knows-no-http',
      comment: 'services, repos and the rest of a domain never see Fastify or src/http, not even as types (routes.ts, schemas.ts and index.ts adapt)',
      severity: 'error',
      from: { path: `^src/${DOMAINS}/`, pathNot: '(routes|index|schemas)\\.ts$' },
      to: { path: ['^node_modules/fastify', '^node_modules/@fastify/', '^src/http/(?!auth/principal\\.ts$)'] },
    },
    {
      name: 'lib-is-a-leaf',
      comment: 'src/lib holds small helpers every layer may use; it depends on nothing of ours',
      severity: 'error',
      from: { path: '^src/lib/' },
      to: { path: '^(src|machines)/', pathNot: '^src/lib/' },
    },
  ],
  options: {
    doNotFollow: { path: 'node_modules' },
    tsPreCompilationDeps: true,
    tsConfig: { fileName: 'tsconfig.json' },
    exclude: { path: '^(test|bench)/' },
  },
};
