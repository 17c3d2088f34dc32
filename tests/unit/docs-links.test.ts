/**
 * Every relative link of README.md, docs/*.md and bench/README.md names a file that exists, and every
 * #anchor a heading (GitHub's slugs) of the page it points into: pages are shrunk and split, and a link
 * that silently stops resolving is a reader lost.
 */
import fs from 'node:fs';
import path from 'node:path';
import { describe, expect, it } from 'vitest';

const root = path.resolve(import.meta.dirname, '..', '..');
const pages = [
  'README.md',
  'bench/README.md',
  ...fs
    .readdirSync(path.join(root, 'docs'))
    .filter((f) => f.endsWith('.md'))
    .map((f) => `docs/${f}`),
];

/** GitHub's heading anchor: lower case, punctuation but `-` and `_` dropped, spaces to `-`. */
function slug(heading: string): string {
  return heading
    .trim()
    .toLowerCase()
    .replace(/[^\p{L}\p{N}\s_-]/gu, '')
    .replace(/\s/g, '-');
}

function anchorsOf(file: string): Set<string> {
  const anchors = new Set<string>();
  const seen = new Map<string, number>();
  let fenced = false;
  for (const line of fs.readFileSync(path.join(root, file), 'utf8').split('\n')) {
    if (line.startsWith('```')) fenced = !fenced;
    const m = fenced ? null : /^#{1,6}\s+(.*)$/.exec(line);
    if (!m) continue;
    const base = slug(m[1]!);
    const n = seen.get(base);
    seen.set(base, n === undefined ? 0 : n + 1);
    anchors.add(n === undefined ? base : `${base}-${n + 1}`);
  }
  return anchors;
}

function brokenLinks(file: string): string[] {
  const text = fs.readFileSync(path.join(root, file), 'utf8').replace(/```[\s\S]*?```/g, '');
  const broken: string[] = [];
  for (const [, target] of text.matchAll(/\]\(([^)\s]+)\)/g)) {
    if (/^[a-z]+:/.test(target!)) continue;
    const [p, anchor] = target!.split('#');
    const dest = p ? path.normalize(path.join(path.dirname(file), p)) : file;
    if (!fs.existsSync(path.join(root, dest))) broken.push(`${target} (no such file)`);
    else if (anchor !== undefined && dest.endsWith('.md') && !anchorsOf(dest).has(anchor))
      broken.push(`${target} (no such heading)`);
  }
  return broken;
}

describe('documentation links', () => {
  it('reads the pages it checks', () => {
    expect(pages.length).toBeGreaterThan(15);
  });

  it.each(pages)('%s: every relative link and #anchor resolves', (file) => {
    expect(brokenLinks(file)).toEqual([]);
  });

  it('finds a broken anchor (the check can fail)', () => {
    expect(anchorsOf('docs/operations.md').has('what-stays-enforced-at-each-transition')).toBe(true);
    expect(anchorsOf('docs/operations.md').has('no-such-section')).toBe(false);
  });
});
