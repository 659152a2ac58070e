import fs from 'node:fs';
import path from 'node:path';
import { build } from 'esbuild';

/** the folders child processes load code from (a test helper entry imports src and machines) */
const FOLDERS = ['src', 'machines', 'test'];

/**
 * Compiles the sources into `out` once for the run (esbuild, the compiler tsx uses, file by file:
 * the same modules, not a bundle), copies what they read beside them (migrations, console pages,
 * WebAssembly) and links node_modules, so that `node out/src/main.js` runs as `tsx src/main.ts`
 * does (test/helpers/compiled.ts).
 */
export async function compileSources(root: string, out: string): Promise<void> {
  const entryPoints: string[] = [];
  for (const folder of FOLDERS) {
    for (const file of fs.readdirSync(path.join(root, folder), { recursive: true }) as string[]) {
      const from = path.join(root, folder, file);
      if (file.endsWith('.ts') && !file.endsWith('.d.ts')) entryPoints.push(from);
      else if (fs.statSync(from).isFile()) {
        const to = path.join(out, folder, file);
        fs.mkdirSync(path.dirname(to), { recursive: true });
        fs.copyFileSync(from, to);
      }
    }
  }
  await build({ entryPoints, outdir: out, outbase: root, format: 'esm', platform: 'node', target: 'node20', logLevel: 'warning' });
  fs.writeFileSync(path.join(out, 'package.json'), JSON.stringify({ type: 'module', private: true }));
  fs.symlinkSync(path.join(root, 'node_modules'), path.join(out, 'node_modules'), 'dir');
}
