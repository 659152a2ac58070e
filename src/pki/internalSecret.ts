import crypto from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';

/** The file of the generated internal secret, beside the other keys in CERTS_DIR. */
export const INTERNAL_SECRET_FILE = 'internal-api.secret';

/**
 * The secret of the internal endpoints (`X-Internal-Secret`: the broker's authentication hook, the
 * notification authorization call) when INTERNAL_API_SECRET is not set: read from CERTS_DIR, or
 * created there on the first start (mode 0600, like the other keys). Nodes sharing the folder share
 * the secret: the file is created by a hard link of a complete temporary file, which fails when
 * another node created it first, so no node ever reads half a secret or replaces another's.
 */
export function ensureInternalSecret(dir: string): { secret: string; file: string } {
  const file = path.join(dir, INTERNAL_SECRET_FILE);
  if (!fs.existsSync(file)) {
    fs.mkdirSync(dir, { recursive: true });
    const tmp = `${file}.${process.pid}.${crypto.randomBytes(4).toString('hex')}.tmp`;
    fs.writeFileSync(tmp, crypto.randomBytes(32).toString('base64url') + '\n', { mode: 0o600 });
    try {
      fs.linkSync(tmp, file);
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== 'EEXIST') throw err;
    } finally {
      fs.rmSync(tmp, { force: true });
    }
  }
  const secret = fs.readFileSync(file, 'utf8').trim();
  if (secret.length < 32) throw new Error(`${file} holds fewer than 32 characters; delete it (a new one is generated) or set INTERNAL_API_SECRET`);
  return { secret, file };
}
