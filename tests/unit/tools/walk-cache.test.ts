// The gate's remembering walk (native/tools/walkcache.h) must never answer what a walk made now would not:
// after any change to the tree (a directory renamed, replaced by a symlink, removed, a symlink created
// where a name was missing, a filesystem mounted over a directory) and once the kernel's news is
// applied, it gives exactly what walkPath gives, on every path. And the news is applied by its own
// thread, without the caller asking: an agent's symlink planted under an allowed tree is seen by the
// next call judged after it.
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { execFileSync } from 'node:child_process';
import { afterAll, describe, expect, it } from 'vitest';
import { loadNative, nativeAvailable } from '../../../src/native.js';
import { mulberry32 as rng } from '../../lab/prng.js';
import { createValidatedWalker, resolvePath } from '../../../src/tools/judge/operations/paths.js';
import { compileRules, decideAction } from '../../../src/tools/judge/operations/rules.js';
import { normalizeCall } from '../../../src/tools/judge/operations/normalize.js';
import { ServerModel } from '../../../src/tools/judge/operations/model.js';
import { MAPPINGS } from '../../../src/tools/judge/operations/mappings.js';

const root = fs.realpathSync(fs.mkdtempSync(path.join(os.tmpdir(), 'leash-walkcache-')));
const mounted: string[] = [];
afterAll(() => {
  for (const m of mounted.reverse()) {
    try {
      execFileSync('umount', [m]);
    } catch {
      /* already gone */
    }
  }
  fs.rmSync(root, { recursive: true, force: true });
});

const NAMES = ['a', 'b', 'c', 'd'];
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** Every path of up to three components over NAMES under base, plus each with a tail that is missing. */
function allPaths(base: string): string[] {
  const out: string[] = [];
  const rec = (p: string, depth: number) => {
    out.push(p, `${p}/missing`, `${p}//./x`);
    if (depth < 3) for (const n of NAMES) rec(`${p}/${n}`, depth + 1);
  };
  rec(base, 0);
  return out;
}

/** A directory outside the trees that the planted symlinks point to (never /etc: nothing is changed through them). */
const outside = path.join(root, 'outside');
fs.mkdirSync(path.join(outside, 'a'), { recursive: true });

/** True when every component of rel under base is a real directory (no symlink, no file on the way). */
function realDirs(base: string, rel: string[]): boolean {
  let p = base;
  for (const c of rel) {
    p = path.join(p, c);
    if (!fs.lstatSync(p, { throwIfNoEntry: false })?.isDirectory()) return false;
  }
  return true;
}

/** One random change to the tree under base, made only where nothing on the way is a symlink. */
function mutate(base: string, r: () => number): string {
  const pick = <T>(xs: readonly T[]): T => xs[Math.floor(r() * xs.length)]!;
  const depth = 1 + Math.floor(r() * 3);
  const parts = Array.from({ length: depth }, () => pick(NAMES));
  if (!realDirs(base, parts.slice(0, -1))) return 'nothing';
  const rel = parts.join('/');
  const full = path.join(base, rel);
  const st = fs.lstatSync(full, { throwIfNoEntry: false });
  if (st === undefined) {
    const k = r();
    if (k < 0.4) fs.mkdirSync(full);
    else if (k < 0.55) fs.writeFileSync(full, 'x');
    else fs.symlinkSync(k < 0.8 ? path.join(base, pick(NAMES)) : outside, full);
    return `create ${rel}`;
  }
  const k = r();
  if (st.isDirectory() && k < 0.3) {
    // A directory renamed away and a symlink put in its place: the classic escape.
    fs.renameSync(full, `${full}.old${Math.floor(r() * 1e9)}`);
    fs.symlinkSync(k < 0.15 ? outside : path.join(base, pick(NAMES)), full);
    return `swap ${rel}`;
  }
  if (k < 0.6) {
    fs.rmSync(full, { recursive: true, force: true });
    return `remove ${rel}`;
  }
  const to = path.join(base, pick(NAMES));
  if (to !== full && !to.startsWith(`${full}/`) && fs.lstatSync(to, { throwIfNoEntry: false }) === undefined) {
    fs.renameSync(full, to);
    return `rename ${rel}`;
  }
  return 'nothing';
}

describe.skipIf(!nativeAvailable())('the remembering walk', () => {
  const native = loadNative();

  it('answers as walkPath after each of 400 random changes over 8 trees, once the news is applied', () => {
    const c = new native.WalkCache();
    // The gate's walker: the same memory, plus the memo JavaScript keeps of it without a call into the addon.
    const jw = createValidatedWalker()!;
    try {
      let compared = 0;
      for (let t = 0; t < 8; t++) {
        const r = rng(20261203 + t);
        const base = path.join(root, `t${t}`);
        fs.mkdirSync(base);
        for (const n of NAMES) if (r() < 0.7) fs.mkdirSync(path.join(base, n));
        const paths = allPaths(base);
        for (const p of paths) expect(c.walk(p), p).toBe(native.walkPath(p));
        for (const p of paths) expect(jw.walk(p), p).toBe(native.walkPath(p));
        for (let i = 0; i < 50; i++) {
          const what = mutate(base, r);
          c.sync();
          jw.sync();
          for (const p of paths) {
            const want = native.walkPath(p);
            expect(c.walk(p), `${p} after ${what}`).toBe(want);
            // Twice: the second answer may come from the memo.
            expect(jw.walk(p), `${p} after ${what} (gate walker)`).toBe(want);
            expect(jw.walk(p), `${p} after ${what} (gate walker, again)`).toBe(want);
            compared++;
          }
        }
      }
      const s = c.stats();
      expect(compared).toBeGreaterThan(100_000);
      // It did remember (a good part of the answers came from memory) and it did forget (changes were seen).
      expect(s.hits).toBeGreaterThan(compared / 5);
      expect(s.forgotten).toBeGreaterThan(100);
      expect(s.broken).toBe(false);
    } finally {
      c.close();
      jw.close();
    }
  });

  it.each([
    ['the addon', () => new native.WalkCache()],
    ['the gate walker (with its memo)', () => createValidatedWalker()!],
  ])('%s sees a symlink planted under a remembered path without being asked to', async (_w, make) => {
    const c = make();
    try {
      const base = fs.mkdtempSync(path.join(root, 'plant-'));
      fs.mkdirSync(path.join(base, 'ws', 'sub'), { recursive: true });
      const p = path.join(base, 'ws', 'sub', 'passwd');
      expect(c.walk(p)).toBe(p);
      expect(c.walk(p)).toBe(p);
      expect(c.walk(p)).toBe(p);
      expect(c.stats().misses).toBe(1);
      fs.renameSync(path.join(base, 'ws', 'sub'), path.join(base, 'ws', 'gone'));
      fs.symlinkSync('/etc', path.join(base, 'ws', 'sub'));
      // The reader thread applies the news on its own; a few milliseconds is far more than it needs.
      let answer = c.walk(p);
      for (let i = 0; i < 100 && answer === p; i++) {
        await sleep(5);
        answer = c.walk(p);
      }
      expect(answer).toBe('/etc/passwd');
      expect(c.stats().wakeups).toBeGreaterThan(0);
    } finally {
      c.close();
    }
  });

  it('remembers nothing on a filesystem whose changes may come without events, and still answers right', () => {
    const c = new native.WalkCache();
    try {
      const p = '/sys/kernel/mm/missing';
      for (let i = 0; i < 5; i++) expect(c.walk(p)).toBe(native.walkPath(p));
      const s = c.stats();
      expect(s.hits).toBe(0);
      expect(s.walkOnly).toBe(1);
    } finally {
      c.close();
    }
  });

  it('a closed cache walks every call', () => {
    const c = new native.WalkCache();
    const base = path.join(root, 'closed');
    fs.mkdirSync(path.join(base, 'd'), { recursive: true });
    const p = path.join(base, 'd', 'f');
    expect(c.walk(p)).toBe(p);
    c.close();
    fs.renameSync(path.join(base, 'd'), path.join(base, 'e'));
    fs.symlinkSync('/etc', path.join(base, 'd'));
    expect(c.walk(p)).toBe('/etc/f');
  });

  it.skipIf(process.getuid?.() !== 0)('forgets everything when a filesystem is mounted over a directory', () => {
    const c = new native.WalkCache();
    try {
      const base = path.join(root, 'mnt');
      fs.mkdirSync(path.join(base, 'ws', 'x'), { recursive: true });
      const p = path.join(base, 'ws', 'x', 'passwd');
      expect(c.walk(p)).toBe(p);
      expect(c.walk(p)).toBe(p);
      // Mounting makes no inotify event in the directories watched: only the mount table tells.
      const top = path.join(base, 'ws');
      execFileSync('mount', ['-t', 'tmpfs', '-o', 'size=1m', 'leash-walkcache', top]);
      mounted.push(top);
      fs.symlinkSync('/etc', path.join(top, 'x'));
      c.sync();
      expect(c.walk(p)).toBe('/etc/passwd');
      execFileSync('umount', [top]);
      mounted.pop();
      c.sync();
      expect(c.walk(p)).toBe(p);
    } finally {
      c.close();
    }
  });
});

describe.skipIf(!nativeAvailable())('rules over operations with the remembering walk', () => {
  it('an allowed read turns into a denied one once its directory is swapped for a symlink', async () => {
    const ws = path.join(root, 'gate-ws');
    fs.mkdirSync(path.join(ws, 'notes'), { recursive: true });
    const problems: string[] = [];
    const rules = compileRules(
      [
        { id: 'ws', effect: 'allow', operations: ['fs.read'], resources: ['${workspace}/**'] },
        { id: 'etc', effect: 'deny', operations: ['fs.read'], resources: ['/etc/**'] },
      ],
      'deny',
      { workspace: ws, home: '/root' },
      problems,
    );
    expect(problems).toEqual([]);
    const walker = createValidatedWalker()!;
    try {
      const ctx = { workspace: ws, home: '/root', walker, model: ServerModel.rootedAt(ws) };
      const judge = () =>
        decideAction(normalizeCall('read_file', { path: 'notes/passwd' }, MAPPINGS.get('filesystem')!, ctx), rules);
      expect(judge()).toMatchObject({ effect: 'allow', rule: 'ws' });
      expect(judge()).toMatchObject({ effect: 'allow', rule: 'ws' });
      expect(walker.stats().misses).toBe(1);
      // The agent plants the escape, then waits a moment before its next call (the cache's thread applies the news
      // within microseconds; up to a second here, for a loaded machine).
      fs.renameSync(path.join(ws, 'notes'), path.join(ws, 'old'));
      fs.symlinkSync('/etc', path.join(ws, 'notes'));
      for (let i = 0; i < 100 && resolvePath('notes/passwd', ws, ctx)?.[0] !== '/etc/passwd'; i++) await sleep(10);
      expect(resolvePath('notes/passwd', ws, ctx)).toEqual(['/etc/passwd']);
      expect(judge()).toMatchObject({ effect: 'deny', rule: 'etc' });
    } finally {
      walker.close();
    }
  });
});
