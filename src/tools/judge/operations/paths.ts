/**
 * Paths as the operation rules see them: absolute (a relative path against the workspace, `~`
 * against the home directory), `..` resolved, existing symbolic links resolved. A path is judged
 * under every reading a server may give it: the kernel's (each component in turn, a symlink
 * followed before the `..` after it) and the lexical one most servers use (`path.resolve`, then
 * `realpath` of what exists). When the two differ both are resources, so an allow needs both to
 * match and a deny either.
 */
import fs from 'node:fs';
import path from 'node:path';
import { nativeTools } from '../../../native.js';
import type { NativeWalkCache } from '../../addon.js';
import type { ServerModel } from './model.js';

export interface PathContext {
  workspace: string;
  home: string;
  /** The gate's walker (createValidatedWalker); the plain walk per call without one. */
  walker?: PathWalker | null;
  /** The gate's model of its server (./model.ts): where a relative path lands. None: relative paths are unknown. */
  model?: ServerModel | null;
}

/** A walk that remembers: `walk` answers what the plain walk would. */
export interface PathWalker {
  walk(raw: string): string;
  /** Applies what the kernel has queued now (tests: the invalidation judged without timing). */
  sync(): void;
  close(): void;
  stats(): ReturnType<NativeWalkCache['stats']>;
  /** The addon's WalkCache behind the walker: the gate's native judge asks it what it remembers. */
  readonly cache?: NativeWalkCache;
}

/** Expands `~` and makes the path absolute against `base` (no filesystem access). */
export function absolute(p: string, base: string, home: string): string {
  if (p === '~') return home;
  if (p.startsWith('~/')) return path.join(home, p.slice(2));
  return path.resolve(base, p);
}

/** lstat without an exception for a missing or unreachable path (an exception costs more than the call). */
function lstatOrNull(p: string): fs.Stats | null {
  try {
    return fs.lstatSync(p, { throwIfNoEntry: false }) ?? null;
  } catch {
    return null; // ENOTDIR, EACCES, ELOOP: nothing to follow there
  }
}

/**
 * Walks the components in order, replacing an existing symlink by its target (realpath) and, in
 * the kernel's reading, a `..` by the parent of what was reached so far. Once a component is
 * missing the rest is appended as written. For a path without `..` this is the realpath of the
 * longest existing prefix with the rest appended (the lexical reading); on a path with `..` it is
 * the kernel's reading.
 */
export function walkJs(raw: string): string {
  const parts = raw.split('/').filter((c) => c !== '' && c !== '.');
  let cur = '/';
  let missing = false;
  for (const c of parts) {
    if (c === '..') {
      cur = path.dirname(cur);
      continue;
    }
    const next = cur === '/' ? `/${c}` : `${cur}/${c}`;
    if (!missing) {
      const st = lstatOrNull(next);
      if (st !== null) {
        if (!st.isSymbolicLink()) cur = next;
        else
          try {
            cur = fs.realpathSync.native(next);
          } catch {
            cur = next; // a dangling or looping link: kept as named, nothing below it exists
            missing = true;
          }
        continue;
      }
      missing = true;
    }
    cur = next;
  }
  return cur;
}

/**
 * The walk, from the native addon when it loads (one openat2 for a plain existing path, lstat in C
 * otherwise: on this kind of VM a Node lstat costs about twice a C one), else `walkJs`. Both give
 * the same answer (tests/unit/tools/paths-walk.test.ts compares them on generated trees).
 */
let walk: (raw: string) => string = (raw) => {
  try {
    const n = nativeTools();
    if (typeof n.walkPath !== 'function') throw new Error('an addon built before walkPath');
    walk = (r) => n.walkPath(r);
  } catch {
    walk = walkJs;
  }
  return walk(raw);
};

/**
 * A walk with a memory for one gate (native/tools/walkcache.h): a plain path whose walk gave itself is
 * remembered until inotify or the mount table says something it went through may have changed,
 * which a thread of the addon applies as it happens. Null when the addon (or inotify) is not
 * available: the caller walks per call.
 */
export function createValidatedWalker(): PathWalker | null {
  let c: NativeWalkCache;
  try {
    const n = nativeTools();
    if (typeof n.WalkCache !== 'function') return null;
    c = new n.WalkCache();
  } catch {
    return null;
  }
  const buf = typeof c.shared === 'function' ? c.shared() : null;
  if (buf === null)
    return { walk: (r) => c.walk(r), sync: () => c.sync(), close: () => c.close(), stats: () => c.stats(), cache: c };
  return memoized(c, new Uint32Array(buf));
}

const MEMO_MAX = 4096;

/**
 * The addon's remembered answers again, in a Map, without a call into the addon: used only while nothing is
 * waiting to be applied (`w[1]` zero) and the generation (`w[0]`, moved by the addon whenever a remembered path
 * may have been forgotten) is the one the memo was filled under; only answers the addon itself remembered
 * (`w[2]`) go in. So the memo is never truer or staler than the addon's own memory.
 */
function memoized(c: NativeWalkCache, w: Uint32Array): PathWalker {
  const memo = new Map<string, string>();
  let gen = w[0]!;
  return {
    walk(raw) {
      if (w[1] === 0) {
        if (w[0] !== gen) {
          memo.clear();
          gen = w[0]!;
        } else {
          const m = memo.get(raw);
          if (m !== undefined) return m;
        }
      }
      const before = w[0];
      const r = c.walk(raw);
      if (w[2] === 1 && w[1] === 0 && w[0] === before && before === gen) {
        if (memo.size >= MEMO_MAX) memo.clear();
        memo.set(raw, r);
      }
      return r;
    },
    sync() {
      c.sync();
    },
    close() {
      memo.clear();
      c.close();
    },
    stats() {
      return c.stats();
    },
    cache: c,
  };
}

const walkWith = (w: PathWalker | null, raw: string): string => (w !== null ? w.walk(raw) : walk(raw));

/**
 * The resolved readings of a path argument (one, or two when the kernel's and the lexical reading
 * differ). A path with a NUL byte, or that is not a string, is null: the call is `unknown`. A name
 * outside ASCII is also judged in Unicode NFC (rules are compiled in NFC: every spelling of a name
 * meets the same rules), and, for a server that opens a missing name through an NFC-equal entry
 * (`unicodeEquivalent`), through the entry it would open.
 */
export function resolvePath(p: string, base: string, ctx: PathContext, unicodeEquivalent = false): string[] | null {
  if (p.length === 0 || p.includes('\0')) return null;
  let raw: string;
  if (p === '~' || p.startsWith('~/')) raw = p === '~' ? ctx.home : `${ctx.home}/${p.slice(2)}`;
  else raw = p.startsWith('/') ? p : `${base}/${p}`;
  const w = ctx.walker ?? null;
  let out: string[];
  // Without a `..` component the kernel's walk is the lexical one, and both walks drop empty and
  // `.` components themselves: one walk of the path as given, not two.
  if (!raw.includes('..') || !/(^|\/)\.\.(\/|$)/.test(raw)) out = [walkWith(w, raw)];
  else {
    const lexical = walkWith(w, path.resolve(raw));
    const kernel = walkWith(w, raw);
    out = lexical === kernel ? [lexical] : [lexical, kernel];
  }
  if (!NON_ASCII.test(raw)) return out;
  if (unicodeEquivalent) {
    const u = walkEquivalent(path.resolve(raw));
    if (!out.includes(u)) out.push(u);
  }
  for (const x of [...out]) {
    const n = x.normalize('NFC');
    if (!out.includes(n)) out.push(n);
  }
  return out;
}

const NON_ASCII = /[^\x00-\x7f]/;

/**
 * server-filesystem's reading of a path that does not exist as written (lib.js
 * resolveUnicodeEquivalentPath): each missing name is looked for among its directory's entries by
 * NFC equality, and what is found is followed (symlinks resolved) before the next name.
 */
export function walkEquivalent(abs: string): string {
  const parts = abs.split('/').filter((c) => c !== '');
  let cur = '/';
  for (let i = 0; i < parts.length; i++) {
    const c = parts[i]!;
    const join = (x: string) => (cur === '/' ? `/${x}` : `${cur}/${x}`);
    let name: string | undefined = lstatOrNull(join(c)) !== null ? c : undefined;
    if (name === undefined) {
      let entries: string[] = [];
      try {
        entries = fs.readdirSync(cur);
      } catch {
        /* not a directory, unreadable: nothing to match */
      }
      const want = c.normalize('NFC');
      name = entries.find((e) => e.normalize('NFC') === want);
      if (name === undefined) return [cur === '/' ? '' : cur, ...parts.slice(i)].join('/');
    }
    try {
      cur = fs.realpathSync.native(join(name));
    } catch {
      return [cur === '/' ? '' : cur, name, ...parts.slice(i + 1)].join('/');
    }
  }
  return cur;
}

/**
 * A path whose deepest existing component is a symlink pointing nowhere (the walk keeps such a link
 * as named): where a write through it lands, since open(O_CREAT) creates the link's target. Null when
 * the path has no such link. Only writes ask (a read through it fails anyway), so reads pay nothing.
 */
export function danglingTarget(p: string): string | null {
  let link = p;
  for (let depth = 0; depth < 64 && link !== '/'; depth++) {
    const st = lstatOrNull(link);
    if (st === null) {
      link = path.dirname(link);
      continue;
    }
    if (!st.isSymbolicLink()) return null;
    let to: string;
    try {
      to = fs.readlinkSync(link);
    } catch {
      return null;
    }
    return path.resolve(path.dirname(link), to) + p.slice(link.length);
  }
  return null;
}
