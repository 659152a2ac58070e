/**
 * bench:registry — what standing reference requests cost the enrollment path. One gateway,
 * autocannon on `POST /api/v1/enrollments` (each request a new serial: a new thing, its
 * certificate, its thing.enrolled event), alternating rounds between a model whose registrar has
 * three approved reference requests (every new thing becomes three thing references, added by
 * the batched event handler) and a model without any. Target ratio: 0.8 or more. Then the time
 * of one approval's initial reconcile over the things enrolled so far.
 *
 *   npm run bench:registry [-- --duration 5 --connections 16 --rounds 4 --no-write]
 *
 * Prints only (the lead merges figures into docs/benchmarks.md).
 */
import os from 'node:os';
import autocannon from 'autocannon';
import { startBenchGateway } from './lib/gateway.js';
import { roundOptions } from './lib/args.js';
import { gatewayClient, must } from '../src/clients/api.js';

const { duration, connections, rounds } = roundOptions();

async function main() {
  const gw = await startBenchGateway('registry');
  try {
    const base = gw.httpUrl;
    // the typed client generated from the gateway's own document (src/clients/api.ts): a contract change breaks this bench at compile time
    const anon = gatewayClient(base);
    const dev = async (body: { realm: string; sub: string; roles: string[] }) => (await must(anon.POST('/dev/token', { body }))).access_token;
    const platform = gatewayClient(base, { bearer: await dev({ realm: 'platform', sub: 'bench-op', roles: ['platform-operator'] }) });
    const account = async (name: string) => {
      const created = await gw.services.accounts.create({ name });
      const admin = await dev({ realm: `acc-${created.id}`, sub: `${name}-admin`, roles: ['admin'] });
      return { id: created.id, admin, api: gatewayClient(base, { bearer: admin }) };
    };
    const id = (value: string) => ({ params: { path: { id: value } } });

    const maker = await account('maker');
    const m = maker.api;
    await must(m.POST('/api/v1/vendors', { body: {} }));
    await must(m.POST('/api/v1/factory-registrations', { body: {} }));
    await must(platform.POST('/api/v1/factory-registrations/{account_id}/approve', { params: { path: { account_id: maker.id } }, body: {} }));
    const shared = await must(m.POST('/api/v1/models', { body: { pid: '0001', name: 'shared', provisioning_method: 'none' } }));
    const plain = await must(m.POST('/api/v1/models', { body: { pid: '0002', name: 'plain', provisioning_method: 'none' } }));
    const registrar = await must(m.POST('/api/v1/registrars', { body: { name: 'line' } }));
    await must(m.PUT('/api/v1/registrars/{id}/canonical-model', { ...id(registrar.id), body: { model_id: shared.id } }));
    await must(platform.POST('/api/v1/registrars/{id}/approve', { ...id(registrar.id), body: {} }));
    /** a partner account with an approved eligibility grant and an approved reference request on the registrar */
    const partnerOf = async (name: string) => {
      const partner = await account(name);
      const artifact = await must(m.POST('/api/v1/eligibility-artifacts', { body: {} }));
      const grant = await must(partner.api.POST('/api/v1/eligibility-artifacts/redeem', { body: { token: artifact.token } }));
      await must(m.POST('/api/v1/eligibility-grants/{id}/approve', { ...id(grant.id), body: {} }));
      return { partner, request: await must(partner.api.POST('/api/v1/reference-requests', { body: { registrar_id: registrar.id } })) };
    };
    const partners = [];
    for (let i = 0; i < 3; i++) {
      const { partner, request } = await partnerOf(`partner${i}`);
      await must(m.POST('/api/v1/reference-requests/{id}/approve', { ...id(request.id), body: {} }));
      partners.push(partner);
    }

    let n = 0;
    const run = (descriptor: string, seconds: number) => autocannon({
      url: base, connections, duration: seconds, pipelining: 1,
      requests: [{
        method: 'POST',
        setupRequest: (req) => ({
          ...req, path: '/api/v1/enrollments',
          headers: { ...req.headers, authorization: `Bearer ${maker.admin}`, 'content-type': 'application/json' },
          body: JSON.stringify({ model: descriptor, serial: `SN-${n++}` }),
        }),
      }],
    });

    console.log('warm-up...');
    await run(plain.descriptor, 2);
    await run(shared.descriptor, 2);
    const withRefs: number[] = [];
    const without: number[] = [];
    let errors = 0;
    const loadBefore = os.loadavg()[0];
    for (let i = 0; i < rounds; i++) {
      const a = await run(plain.descriptor, duration);
      const b = await run(shared.descriptor, duration);
      errors += a.errors + a.non2xx + b.errors + b.non2xx;
      without.push(a.requests.average);
      withRefs.push(b.requests.average);
      console.log(`round ${i + 1}: no reference requests ${a.requests.average.toFixed(1)} enrollments/s (p99 ${a.latency.p99} ms); 3 approved ${b.requests.average.toFixed(1)} enrollments/s (p99 ${b.latency.p99} ms)`);
    }
    const mean = (xs: number[]) => xs.reduce((s, x) => s + x, 0) / xs.length;
    const ratios = withRefs.map((x, i) => x / without[i]).sort((x, y) => x - y);
    const mid = Math.floor(ratios.length / 2);
    const ratio = ratios.length % 2 ? ratios[mid] : (ratios[mid - 1] + ratios[mid]) / 2;

    // every shared thing reached every partner (the handler keeps up; nothing waits for the sweep)
    const sharedThings = await gw.gw.sql<{ n: number }[]>`select count(*)::int as n from things where model_id = ${shared.id}`;
    const start = Date.now();
    let refs = 0;
    while (Date.now() - start < 30_000) {
      [{ n: refs }] = await gw.gw.sql<{ n: number }[]>`select count(*)::int as n from thing_references`;
      if (refs >= sharedThings[0].n * 3) break;
      await new Promise((r) => setTimeout(r, 100));
    }
    console.log(`thing references: ${refs} for ${sharedThings[0].n} shared things x 3 partners (caught up ${Date.now() - start} ms after the last round)`);

    // one more partner's approval: the initial reconcile over every shared thing so far
    const { request } = await partnerOf('late');
    const t0 = performance.now();
    const approved = await must(m.POST('/api/v1/reference-requests/{id}/approve', { ...id(request.id), body: {} }));
    const approveMs = performance.now() - t0;

    console.log(`without reference requests: ${mean(without).toFixed(1)} enrollments/s; with 3 approved: ${mean(withRefs).toFixed(1)} enrollments/s;`
      + ` ratio ${ratio.toFixed(2)} [${ratios.map((r) => r.toFixed(2)).join(', ')}] (target >= 0.8); errors/non-2xx ${errors}`);
    console.log(`initial reconcile: approve answered in ${approveMs.toFixed(0)} ms with ${approved.references_added} references`);
    console.log(`${os.cpus().length} cores, Node ${process.versions.node}, ${connections} connections, ${rounds} rounds of ${duration} s, load average at start ${loadBefore.toFixed(2)}`);
    if (errors > 0) throw new Error(`${errors} errors or non-2xx answers`);
    if (ratio < 0.8) process.exitCode = 1;
  } finally {
    await gw.stop();
  }
}

main().catch((err) => {
  console.error(err);
  process.exit(1);
});
