import fs from 'node:fs';
import { createRequire } from 'node:module';
import path from 'node:path';
import { describe, expect, it } from 'vitest';

/**
 * The patches in patches/ are applied at install (patch-package, postinstall): this fails when an
 * install skipped them or a dependency moved under them (patches/README.md says why each exists).
 */
describe('patched dependencies', () => {
  // the package's folder from its entry point (its exports do not include package.json)
  const require = createRequire(import.meta.url);
  const main = require.resolve('postgres');
  const postgresDir = main.slice(0, main.lastIndexOf(`${path.sep}node_modules${path.sep}postgres${path.sep}`)) + `${path.sep}node_modules${path.sep}postgres`;

  it('postgres.js is the version the patch is for', () => {
    const { version } = JSON.parse(fs.readFileSync(path.join(postgresDir, 'package.json'), 'utf8')) as { version: string };
    expect(fs.existsSync(path.join(process.cwd(), 'patches', `postgres+${version}.patch`))).toBe(true);
  });

  it.each(['src/connection.js', 'cjs/src/connection.js'])('postgres.js %s writes COPY data without copying the chunk', (file) => {
    const source = fs.readFileSync(path.join(postgresDir, file), 'utf8');
    const copyIn = source.slice(source.indexOf('function CopyInResponse()'), source.indexOf('function CopyBothResponse()'));
    expect(copyIn).toContain('socket.cork()');
    expect(copyIn).toContain('socket.write(chunk, callback)');
    expect(copyIn).not.toContain('raw(chunk)');
  });

  it.each(['src/connection.js', 'cjs/src/connection.js'])('postgres.js %s sets TCP_NODELAY on its sockets (no delayed-ACK wait after a COPY)', (file) => {
    const source = fs.readFileSync(path.join(postgresDir, file), 'utf8');
    const connect = source.slice(source.indexOf('async function connect()'), source.indexOf('function reconnect()'));
    expect(connect).toContain('socket.setNoDelay(true)');
  });

  const aedesMain = require.resolve('aedes');
  const aedesDir = aedesMain.slice(0, aedesMain.lastIndexOf(`${path.sep}node_modules${path.sep}aedes${path.sep}`)) + `${path.sep}node_modules${path.sep}aedes`;

  it('aedes drains a client\'s queues without stream.pipeline (no AbortController per connect)', () => {
    const { version } = JSON.parse(fs.readFileSync(path.join(aedesDir, 'package.json'), 'utf8')) as { version: string };
    expect(fs.existsSync(path.join(process.cwd(), 'patches', `aedes+${version}.patch`))).toBe(true);
    for (const file of ['lib/client.js', 'lib/handlers/connect.js']) {
      const source = fs.readFileSync(path.join(aedesDir, file), 'utf8');
      expect(source, file).toContain('forEachItem(');
      expect(source, file).not.toContain('pipeline(');
    }
  });

  it('aedes honours the Receive Maximum a client announces (live and stored QoS 1/2 sends wait for room; acks free it)', () => {
    const read = (file: string) => fs.readFileSync(path.join(aedesDir, file), 'utf8');
    const client = read('lib/client.js');
    expect(client).toContain('sendInWindow (packet, write, abort)');
    expect(client).toContain('releaseInWindow (messageId)');
    expect(client).toContain('that.sendInWindow(packet, doWriteQoS)');
    expect(read('lib/handlers/connect.js')).toContain('client.sendInWindow(packet, () => write(client, packet, next)');
    expect(read('lib/handlers/puback.js')).toContain('client.releaseInWindow(packet.messageId)');
    expect(read('lib/handlers/pubrec.js')).toContain('client.releaseInWindow(packet.messageId)');
  });
});
