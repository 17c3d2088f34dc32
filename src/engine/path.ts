// Filesystem paths.
//
// An entry is absolute. Without glob characters (`*`, `?`, `[`) it names a path and covers it and
// everything beneath it: `/home/a` matches `/home/a` and `/home/a/x`, never `/home/ab`. With them
// it is a glob over the whole path: `*` is any run of characters within one segment, `?` one
// character other than `/`, `[abc]`, `[a-z]`, `[!abc]` / `[^abc]` a class (never matching `/`),
// `**` inside a segment any run of characters across segments, and a `**` segment zero or more
// whole segments (`/a/**/b` matches `/a/b` and `/a/x/y/b`; `/a/**` is the same as `/a`). A glob
// also covers what is beneath a match (`/home/*/.ssh` denies `/home/u/.ssh/id_ed25519`), so
// globs and plain entries mean the same kind of thing: a set of paths and their contents. No
// backslash escapes.
//
// Subjects and entries are normalised lexically before matching: `//` and `/./` collapse, `..`
// removes the previous segment, `..` at the root stays at the root (`/../../etc` is `/etc`), a
// trailing `/` is dropped. Symlinks are not resolved (the kernel reports the opened path).
//
// Index: plain entries and the literal directory prefix of every glob sit in one hash table keyed
// by an FNV hash of the prefix. A lookup hashes the subject once, left to right, and probes at each
// `/` boundary, so it costs O(path length) whatever the list size; a glob runs only when the
// subject passes through its literal prefix, in O(path length x glob tokens) with no
// backtracking. Globs sharing one prefix are tried in turn.
import { FNV_INIT, IntTable, fnvStep } from './hash.js';
import type { EntryProblem } from './types.js';

/**
 * Normalises an absolute path lexically. Returns null for a path that is not absolute.
 * Already-normal paths (the common case) are returned as-is without allocating.
 */
export function normalizePath(p: string): string | null {
  if (p.length === 0 || p.charCodeAt(0) !== 47) return null;
  if (isNormal(p)) return p;
  const out: string[] = [];
  let i = 1;
  while (i <= p.length) {
    let j = p.indexOf('/', i);
    if (j < 0) j = p.length;
    const seg = p.slice(i, j);
    if (seg === '..') out.pop();
    else if (seg !== '' && seg !== '.') out.push(seg);
    i = j + 1;
  }
  return '/' + out.join('/');
}

/** True when `p` (absolute) has no `//`, `.` or `..` segment and no trailing `/`. */
function isNormal(p: string): boolean {
  const n = p.length;
  if (n === 1) return true;
  if (p.charCodeAt(n - 1) === 47) return false;
  for (let i = 0; i < n; i++) {
    if (p.charCodeAt(i) !== 47) continue;
    const a = i + 1 < n ? p.charCodeAt(i + 1) : -1;
    if (a === 47) return false;
    if (a === 46) {
      const b = i + 2 < n ? p.charCodeAt(i + 2) : 47;
      if (b === 47) return false; // "/." segment
      if (b === 46) {
        const c = i + 3 < n ? p.charCodeAt(i + 3) : 47;
        if (c === 47) return false; // "/.." segment
      }
    }
  }
  return true;
}

/** True when an entry is a glob (contains `*`, `?` or `[`). */
export function isGlob(entry: string): boolean {
  for (let i = 0; i < entry.length; i++) {
    const c = entry.charCodeAt(i);
    if (c === 42 || c === 63 || c === 91) return true;
  }
  return false;
}

/** One step of a compiled glob. */
export type GlobToken =
  | { t: 'lit'; s: string }
  | { t: 'one' } // ?
  | { t: 'class'; negate: boolean; ranges: number[] } // [a-z], [!abc]: code point pairs lo,hi
  | { t: 'star' } // * : any run without '/'
  | { t: 'any' } // ** inside a segment: any run
  | { t: 'segs' }; // a ** segment: nothing, or '/' and any run

/**
 * Parses a normalised glob entry into tokens, or returns the problem (an unterminated `[`).
 * The matcher (matchGlob) runs these tokens over a path in O(path length x tokens) time with
 * no backtracking, so several `**` cannot be turned against it by a deep, attacker-made path.
 */
export function parseGlob(glob: string): GlobToken[] | EntryProblem {
  const out: GlobToken[] = [];
  const lit = (c: string): void => {
    const last = out[out.length - 1];
    if (last !== undefined && last.t === 'lit') last.s += c;
    else out.push({ t: 'lit', s: c });
  };
  const segs = glob.split('/');
  for (let k = 1; k < segs.length; k++) {
    const seg = segs[k]!;
    if (seg === '**') {
      out.push({ t: 'segs' });
      continue;
    }
    lit('/');
    const chars = Array.from(seg);
    for (let i = 0; i < chars.length; i++) {
      const ch = chars[i]!;
      if (ch === '*') {
        if (chars[i + 1] === '*') {
          while (chars[i + 1] === '*') i++;
          out.push({ t: 'any' });
        } else {
          out.push({ t: 'star' });
        }
      } else if (ch === '?') {
        out.push({ t: 'one' });
      } else if (ch === '[') {
        let j = i + 1;
        let negate = false;
        if (chars[j] === '!' || chars[j] === '^') {
          negate = true;
          j++;
        }
        const bodyStart = j;
        if (chars[j] === ']') j++; // a leading ']' is literal
        while (j < chars.length && chars[j] !== ']') j++;
        if (j >= chars.length) {
          return { code: 'bad_glob', message: 'an unterminated "[" class (a class cannot contain "/")' };
        }
        const body = chars.slice(bodyStart, j).map((c) => c.codePointAt(0)!);
        const ranges: number[] = [];
        for (let m = 0; m < body.length; m++) {
          if (m + 2 < body.length && body[m + 1] === 45 /* - */) {
            ranges.push(Math.min(body[m]!, body[m + 2]!), Math.max(body[m]!, body[m + 2]!));
            m += 2;
          } else {
            ranges.push(body[m]!, body[m]!);
          }
        }
        out.push({ t: 'class', negate, ranges });
        i = j;
      } else {
        lit(ch);
      }
    }
  }
  return out;
}

let cur = new Uint8Array(256);
let nxt = new Uint8Array(256);

function inClass(tok: { negate: boolean; ranges: number[] }, cp: number): boolean {
  if (cp === 47) return false;
  let hit = false;
  for (let r = 0; r < tok.ranges.length; r += 2) {
    if (cp >= tok.ranges[r]! && cp <= tok.ranges[r + 1]!) {
      hit = true;
      break;
    }
  }
  return hit !== tok.negate;
}

/**
 * True when the glob tokens match `path` (normalised) or one of its ancestors, i.e. the glob
 * covers the path. Runs the tokens as a set of reachable positions (a Thompson-style simulation):
 * each token maps the positions where it may start to the positions where it may end, in one
 * left-to-right pass, so the cost is O(path length x tokens) whatever the glob.
 */
export function matchGlob(tokens: readonly GlobToken[], path: string): boolean {
  const n = path.length;
  if (cur.length < n + 1) {
    cur = new Uint8Array(2 * (n + 1));
    nxt = new Uint8Array(2 * (n + 1));
  }
  cur.fill(0, 0, n + 1);
  cur[0] = 1;
  for (const tok of tokens) {
    nxt.fill(0, 0, n + 1);
    let alive = false;
    switch (tok.t) {
      case 'lit':
        for (let i = 0; i + tok.s.length <= n; i++) {
          if (cur[i] === 1 && path.startsWith(tok.s, i)) {
            nxt[i + tok.s.length] = 1;
            alive = true;
          }
        }
        break;
      case 'one':
      case 'class':
        for (let i = 0; i < n; i++) {
          if (cur[i] !== 1) continue;
          const cp = path.codePointAt(i)!;
          if (tok.t === 'one' ? cp !== 47 : inClass(tok, cp)) {
            nxt[i + (cp > 0xffff ? 2 : 1)] = 1;
            alive = true;
          }
        }
        break;
      case 'star': {
        let r = 0;
        for (let i = 0; i <= n; i++) {
          r = cur[i] === 1 || (r === 1 && path.charCodeAt(i - 1) !== 47) ? 1 : 0;
          nxt[i] = r;
          if (r === 1) alive = true;
        }
        break;
      }
      case 'any': {
        let r = 0;
        for (let i = 0; i <= n; i++) {
          if (cur[i] === 1) r = 1;
          nxt[i] = r;
          if (r === 1) alive = true;
        }
        break;
      }
      case 'segs': {
        let seen = false;
        for (let i = 0; i <= n; i++) {
          const v = cur[i] === 1 || seen;
          nxt[i] = v ? 1 : 0;
          if (v) alive = true;
          if (cur[i] === 1 && i < n && path.charCodeAt(i) === 47) seen = true;
        }
        break;
      }
    }
    if (!alive) return false;
    const t = cur;
    cur = nxt;
    nxt = t;
  }
  for (let i = 0; i <= n; i++) if (cur[i] === 1 && (i === n || path.charCodeAt(i) === 47)) return true;
  return false;
}

/**
 * Returns why a filesystem entry can never match, or null when it is well-formed: subjects are
 * absolute paths, so a relative or `~` entry never matches one (Leash does not expand `~`:
 * whose home would it be, the operator's or the agent's?).
 */
export function pathEntryProblem(entry: unknown): EntryProblem | null {
  if (typeof entry !== 'string') return { code: 'not_a_string', message: 'an entry must be a string' };
  if (entry.length === 0) return { code: 'empty', message: 'the entry is empty' };
  if (entry.includes('\u0000')) return { code: 'whitespace', message: 'a path cannot contain NUL' };
  if (entry.charCodeAt(0) === 126 /* ~ */) {
    return { code: 'home_path', message: '"~" is not expanded; write the absolute path' };
  }
  if (entry.charCodeAt(0) !== 47) {
    return { code: 'relative_path', message: 'a relative path never matches; write an absolute path' };
  }
  if (isGlob(entry)) {
    const tokens = parseGlob(normalizePath(entry)!);
    if (!Array.isArray(tokens)) return tokens;
  }
  return null;
}

interface Glob {
  rule: string;
  tokens: GlobToken[];
}

interface PrefixNode {
  /** The normalised prefix (verification after a hash hit). */
  path: string;
  next: PrefixNode | null;
  /** A plain entry naming this path (covers it and everything beneath). */
  rule: string | null;
  /** Globs whose literal directory prefix is this path. */
  globs: Glob[] | null;
}

/** The literal directory part of a glob before its first wildcard segment ("" for the root). */
function globPrefix(glob: string): string {
  let first = glob.length;
  for (let i = 0; i < glob.length; i++) {
    const c = glob.charCodeAt(i);
    if (c === 42 || c === 63 || c === 91) {
      first = i;
      break;
    }
  }
  const slash = glob.lastIndexOf('/', first);
  return glob.slice(0, slash < 0 ? 0 : slash);
}

/** A compiled set of path entries (one filesystem list). Build once, query many times. */
export class PathIndex {
  private readonly map = new IntTable<PrefixNode>();
  /** Entry `/` (covers everything) and globs whose first segment has a wildcard (`/*`, `/**`). */
  private rootRule: string | null = null;
  private rootGlobs: Glob[] | null = null;
  size = 0;

  private node(prefix: string): PrefixNode {
    let h = FNV_INIT;
    for (let i = 0; i < prefix.length; i++) h = fnvStep(h, prefix.charCodeAt(i));
    const head = this.map.get(h) ?? null;
    let n = head;
    while (n !== null && n.path !== prefix) n = n.next;
    if (n === null) {
      n = { path: prefix, next: head, rule: null, globs: null };
      this.map.set(h, n);
    }
    return n;
  }

  /** Adds an entry; inert entries are skipped (they can never match by definition). */
  add(entry: unknown): void {
    if (pathEntryProblem(entry) !== null) return;
    const rule = entry as string;
    const p = normalizePath(rule)!;
    this.size++;
    if (isGlob(p)) {
      const glob = { rule, tokens: parseGlob(p) as GlobToken[] };
      const prefix = globPrefix(p);
      if (prefix === '') (this.rootGlobs ??= []).push(glob);
      else (this.node(prefix).globs ??= []).push(glob);
      return;
    }
    if (p === '/') {
      this.rootRule ??= rule;
      return;
    }
    this.node(p).rule ??= rule;
  }

  /**
   * The most specific entry covering `path` (already normalised), or null. Walks the path once,
   * probing the map at every segment boundary; the deepest plain match wins over shallower ones.
   */
  match(path: string): string | null {
    let best: string | null = this.rootRule;
    if (this.rootGlobs !== null) {
      const r = testGlobs(this.rootGlobs, path);
      if (r !== null) best = r;
    }
    if (this.map.size === 0) return best;
    const n = path.length;
    let h = FNV_INIT;
    for (let i = 0; i <= n; i++) {
      const c = i < n ? path.charCodeAt(i) : 47;
      if (c === 47 && i > 0) {
        let node = this.map.get(h) ?? null;
        while (node !== null) {
          if (node.path.length === i && path.startsWith(node.path)) {
            if (node.rule !== null) best = node.rule;
            if (node.globs !== null) {
              const r = testGlobs(node.globs, path);
              if (r !== null) best = r;
            }
            break;
          }
          node = node.next;
        }
      }
      if (i < n) h = fnvStep(h, c);
    }
    return best;
  }
}

function testGlobs(globs: Glob[], path: string): string | null {
  for (let i = 0; i < globs.length; i++) if (matchGlob(globs[i]!.tokens, path)) return globs[i]!.rule;
  return null;
}
