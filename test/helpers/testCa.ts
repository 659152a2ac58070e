import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';

export interface TestServerPki {
  /** folder holding ca.pem (trust it through OUTBOUND_CA_FILE) */
  dir: string;
  caFile: string;
  caPem: string;
  certPem: string;
  keyPem: string;
  remove(): void;
}

/**
 * A throw-away CA and a server certificate it signed for `localhost` and 127.0.0.1 (openssl),
 * for HTTPS servers inside tests that the gateway must trust (never the system store).
 */
export function makeServerPki(): TestServerPki {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'test-ca-'));
  const f = (n: string) => path.join(dir, n);
  const run = (args: string[]) => execFileSync('openssl', args, { stdio: 'ignore' });
  run(['req', '-x509', '-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:P-256', '-nodes', '-keyout', f('ca.key'), '-out', f('ca.pem'), '-subj', '/CN=test backend CA', '-days', '2',
    '-addext', 'basicConstraints=critical,CA:TRUE', '-addext', 'keyUsage=critical,keyCertSign,cRLSign']);
  run(['req', '-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:P-256', '-nodes', '-keyout', f('server.key'), '-out', f('server.csr'), '-subj', '/CN=localhost']);
  fs.writeFileSync(f('ext.cnf'), 'subjectAltName=DNS:localhost,IP:127.0.0.1\nextendedKeyUsage=serverAuth\n');
  run(['x509', '-req', '-in', f('server.csr'), '-CA', f('ca.pem'), '-CAkey', f('ca.key'), '-CAcreateserial', '-out', f('server.pem'), '-days', '2', '-extfile', f('ext.cnf')]);
  return {
    dir, caFile: f('ca.pem'), caPem: fs.readFileSync(f('ca.pem'), 'utf8'), certPem: fs.readFileSync(f('server.pem'), 'utf8'), keyPem: fs.readFileSync(f('server.key'), 'utf8'),
    remove: () => fs.rmSync(dir, { recursive: true, force: true }),
  };
}
