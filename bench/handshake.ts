/**
 * bench:handshake: the server side of one mutual-TLS handshake (no MQTT), per TLS setting the
 * broker could use: a Node TLS server in a child process (its CPU read from /proc), clients in
 * this process with their TLS contexts prepared beforehand, HANDSHAKES (default 2,000) full
 * handshakes 20 at a time per variant, in alternating rounds. Certificates as the gateway's
 * (ECDSA P-256 server and device certificates, device CA under a root; CRLs of both).
 *
 *   npx tsx bench/handshake.ts
 */
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import tls from 'node:tls';
import { spawn } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { Pki, toPem } from '../src/pki/pki.js';
import { cpuSeconds, freePort, issueDevices } from './lib/brokers.js';

interface Files { key: string; cert: string; root: string; deviceCa: string; crl: string[] }

/** The TLS server options of each variant (the first is the broker's as of issue 19). */
const VARIANTS: Record<string, (f: Files) => tls.TlsOptions> = {
  'broker (chain to root, both CRLs)': (f) => ({ key: f.key, cert: f.cert + f.root, ca: [f.deviceCa, f.root], crl: f.crl }),
  'no CRL in TLS': (f) => ({ key: f.key, cert: f.cert + f.root, ca: [f.deviceCa, f.root] }),
  'device CA as trust anchor, no CRL': (f) => ({ key: f.key, cert: f.cert + f.root, ca: [f.deviceCa], allowPartialTrustChain: true } as tls.TlsOptions),
  'ecdhCurve X25519 only': (f) => ({ key: f.key, cert: f.cert + f.root, ca: [f.deviceCa, f.root], crl: f.crl, ecdhCurve: 'X25519' }),
  'server certificate without the root': (f) => ({ key: f.key, cert: f.cert, ca: [f.deviceCa, f.root], crl: f.crl }),
};

/** Child: a TLS server with the variant's options, answering each handshake with one byte. */
async function server(): Promise<void> {
  const [filesPath, variant, port] = process.argv.slice(3);
  const files = JSON.parse(fs.readFileSync(filesPath, 'utf8')) as Files;
  const s = tls.createServer({ ...VARIANTS[variant](files), requestCert: true, rejectUnauthorized: true, minVersion: 'TLSv1.2' }, (socket) => {
    socket.on('error', () => {});
    socket.end('x');
  });
  s.listen(Number(port), '127.0.0.1', () => process.stdout.write('ready\n'));
}

async function main(): Promise<void> {
  const handshakes = Number(process.env.HANDSHAKES ?? 2000);
  const rounds = Number(process.env.ROUNDS ?? 3);
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'bench-hs-'));
  const loadBefore = os.loadavg()[0];
  try {
    const certsDir = path.join(dir, 'certs');
    // generates the CA hierarchy without a database (Pki.ensure only takes an advisory lock there)
    const noDb = { begin: async (work: (tx: unknown) => Promise<unknown>) => work(async () => []) };
    await Pki.ensure(noDb as never, { dir: certsDir, serverNames: ['localhost'], crlUrl: 'http://127.0.0.1/crl' });
    const creds = await issueDevices(certsDir, 100);
    const pki = await Pki.ensure(undefined as never, { dir: certsDir, serverNames: ['localhost'], crlUrl: 'http://127.0.0.1/crl' });
    const crl = await pki.createCrl([], 1, 3600);
    const rootCrl = pki.rootCrl ? toPem(await pki.rootCrl.der(), 'X509 CRL') : undefined;
    const files: Files = { key: pki.serverKeyPem, cert: pki.serverCertPem, root: pki.rootPem, deviceCa: pki.deviceCaPem, crl: rootCrl ? [crl.pem, rootCrl] : [crl.pem] };
    const filesPath = path.join(dir, 'files.json');
    fs.writeFileSync(filesPath, JSON.stringify(files));
    const contexts = creds.map((c) => tls.createSecureContext({ key: c.key, cert: c.cert, ca: pki.bundlePem }));
    console.log(`bench:handshake  ${handshakes} full mTLS handshakes per variant and round, ${rounds} rounds, node ${process.version}, OpenSSL ${process.versions.openssl}; root CRL ${rootCrl ? 'loaded' : 'absent'}`);
    const results = new Map<string, number[]>();
    for (let round = 0; round < rounds; round++) {
      for (const variant of Object.keys(VARIANTS)) {
        const port = await freePort();
        const child = spawn(process.execPath, ['--import', 'tsx', fileURLToPath(import.meta.url), '--hs-server', filesPath, variant, String(port)], { stdio: ['ignore', 'pipe', 'inherit'] });
        await new Promise((r) => child.stdout!.once('data', r));
        let next = 0;
        let protocol = '';
        const cpu0 = cpuSeconds(child.pid!);
        await Promise.all(Array.from({ length: 20 }, async () => {
          while (next < handshakes) {
            const i = next++;
            await new Promise<void>((resolve, reject) => {
              const s = tls.connect({ port, host: '127.0.0.1', servername: 'localhost', secureContext: contexts[i % contexts.length] }, () => { protocol = `${s.getProtocol()} ${(s.getEphemeralKeyInfo() as { name?: string } | null)?.name ?? ''}`; });
              s.on('data', () => s.end());
              s.on('close', () => resolve());
              s.on('error', reject);
            });
          }
        }));
        const ms = (cpuSeconds(child.pid!) - cpu0) * 1000 / handshakes;
        child.kill();
        results.set(variant, [...(results.get(variant) ?? []), ms]);
        console.log(`  round ${round + 1}  ${variant}: ${ms.toFixed(3)} ms server CPU per handshake (${protocol})`);
      }
    }
    const base = mean(results.get(Object.keys(VARIANTS)[0])!);
    console.log('\n| server TLS setting | server CPU ms per full handshake (rounds) | mean | vs the broker\'s |\n|---|---|---|---|');
    for (const [variant, v] of results) console.log(`| ${variant} | ${v.map((x) => x.toFixed(3)).join(', ')} | ${mean(v).toFixed(3)} | ${(mean(v) / base).toFixed(2)} |`);
    console.log(`load average ${loadBefore.toFixed(1)} at the start, ${os.loadavg()[0].toFixed(1)} at the end`);
  } finally {
    fs.rmSync(dir, { recursive: true, force: true });
  }
}

const mean = (v: number[]) => v.reduce((a, b) => a + b, 0) / v.length;

if (process.argv[2] === '--hs-server') await server();
else await main();
