// The gate's path reading has two implementations: the native walk (one openat2 for a plain existing
// path, lstat in C otherwise) and walkJs, used where the addon does not load. A server is judged by
// whichever runs, so they must agree on every path: compared here on generated trees of directories,
// files and symlinks (relative, absolute, dangling, looping, to files, to directories), with `.`,
// `..`, doubled slashes and missing names in the paths.
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { loadNative, nativeAvailable } from '../../../src/native.js';
import { resolvePath, walkJs } from '../../../src/tools/judge/operations/paths.js';
import { mulberry32 as rng } from '../../../src/lab/prng.js';

const root = fs.realpathSync(fs.mkdtempSync(path.join(os.tmpdir(), 'leash-walk-')));
afterAll(() => fs.rmSync(root, { recursive: true, force: true }));

const NAMES = ['a', 'b', 'c', 'd', 'e'];

/** Builds a tree under `base`: returns every name made (relative to base). */
function buildTree(base: string, r: () => number): string[] {
  const made: string[] = [''];
  const pick = <T>(xs: readonly T[]): T => xs[Math.floor(r() * xs.length)]!;
  for (let i = 0; i < 30; i++) {
    const dir = pick(
      made.filter((m) => m === '' || fs.lstatSync(path.join(base, m), { throwIfNoEntry: false })?.isDirectory()),
    );
    const name = path.join(dir, pick(NAMES));
    const full = path.join(base, name);
    if (fs.lstatSync(full, { throwIfNoEntry: false })) continue;
    const kind = r();
    if (kind < 0.35) fs.mkdirSync(full);
    else if (kind < 0.55) fs.writeFileSync(full, 'x');
    else {
      // A symlink: to another name made (relative or absolute), to nothing, or to itself.
      const k = r();
      const to =
        k < 0.4
          ? path.relative(path.dirname(full), path.join(base, pick(made)))
          : k < 0.75
            ? path.join(base, pick(made))
            : k < 0.9
              ? path.join(base, 'nowhere', pick(NAMES))
              : full;
      fs.symlinkSync(to || '.', full);
    }
    made.push(name);
  }
  return made.slice(1);
}

function randomPath(base: string, made: string[], r: () => number): string {
  const parts = [base];
  const n = 1 + Math.floor(r() * 5);
  for (let i = 0; i < n; i++) {
    const k = r();
    if (k < 0.5) parts.push(made[Math.floor(r() * made.length)]!);
    else if (k < 0.65) parts.push('..');
    else if (k < 0.72) parts.push('.');
    else if (k < 0.78) parts.push('');
    else parts.push(NAMES[Math.floor(r() * NAMES.length)]!);
  }
  return parts.join('/');
}

describe.skipIf(!nativeAvailable())('the native path walk', () => {
  const native = loadNative();

  it('agrees with walkJs on 20,000 paths over 40 generated trees', () => {
    let compared = 0;
    let differ = 0;
    let plain = 0;
    for (let t = 0; t < 40; t++) {
      const r = rng(20261202 + t);
      const base = path.join(root, `t${t}`);
      fs.mkdirSync(base);
      const made = buildTree(base, r);
      for (let i = 0; i < 500; i++) {
        const p = randomPath(base, made, r);
        const want = walkJs(p);
        expect(native.walkPath(p), p).toBe(want);
        compared++;
        if (want !== path.resolve(p)) differ++;
        else if (fs.existsSync(p)) plain++;
      }
    }
    expect(compared).toBe(20_000);
    // The trees give both kinds of path: many readings differ from the text, many are plain existing ones.
    expect(differ).toBeGreaterThan(2_000);
    expect(plain).toBeGreaterThan(2_000);
  });

  it('answers the cases the readings are for', () => {
    const b = path.join(root, 'cases');
    fs.mkdirSync(path.join(b, 'real', 'sub'), { recursive: true });
    fs.writeFileSync(path.join(b, 'real', 'f'), 'x');
    fs.symlinkSync(path.join(b, 'real', 'sub'), path.join(b, 'down'));
    fs.symlinkSync('missing', path.join(b, 'dangling'));
    fs.symlinkSync('loop', path.join(b, 'loop'));
    const w = (p: string) => native.walkPath(path.join(b, p));
    expect(w('real/f')).toBe(path.join(b, 'real', 'f'));
    expect(w('real/new/deeper')).toBe(path.join(b, 'real', 'new', 'deeper'));
    expect(w('down/x')).toBe(path.join(b, 'real', 'sub', 'x'));
    // The kernel's reading: `..` after a symlink is the parent of its target.
    expect(native.walkPath(`${b}/down/../f`)).toBe(path.join(b, 'real', 'f'));
    expect(w('dangling/x')).toBe(path.join(b, 'dangling', 'x'));
    expect(w('loop')).toBe(path.join(b, 'loop'));
    expect(w('real/f/under-a-file')).toBe(path.join(b, 'real', 'f', 'under-a-file'));
    expect(native.walkPath('/')).toBe('/');
    expect(native.walkPath('//./')).toBe('/');
    expect(() => native.walkPath('relative')).toThrow(TypeError);
    expect(() => native.walkPath('')).toThrow(TypeError);
    // resolvePath (which the gate calls) gives both readings where they differ.
    expect(resolvePath('down/../f', b, { workspace: b, home: '/home/x' })).toEqual([
      path.join(b, 'f'),
      path.join(b, 'real', 'f'),
    ]);
  });
});
