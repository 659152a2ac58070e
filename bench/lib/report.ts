import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const FILE = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..', '..', 'docs', 'benchmarks.md');

/**
 * Replaces a benchmark's section of docs/benchmarks.md (or appends it). The section's first line
 * is its heading; the old section runs to the next heading of the same or a higher level.
 */
export function writeBenchmarkSection(section: string): void {
  const heading = section.slice(0, section.indexOf('\n'));
  const level = /^#+/.exec(heading)?.[0].length;
  if (!level) throw new Error(`a benchmark section starts with its heading, not "${heading}"`);
  const escaped = heading.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');
  const re = new RegExp(`${escaped}[\\s\\S]*?(?=\\n#{1,${level}} |$)`);
  const text = fs.readFileSync(FILE, 'utf8');
  const body = section.trimEnd() + '\n';
  fs.writeFileSync(FILE, re.test(text) ? text.replace(re, () => body) : `${text.trimEnd()}\n\n${body}`);
  console.log('docs/benchmarks.md updated');
}
