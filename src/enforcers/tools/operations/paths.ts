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

export interface PathContext {
  workspace: string;
  home: string;
}

/** Expands `~` and makes the path absolute against `base` (no filesystem access). */
export function absolute(p: string, base: string, home: string): string {
  if (p === '~') return home;
  if (p.startsWith('~/')) return path.join(home, p.slice(2));
  return path.resolve(base, p);
}

/** realpath of the longest existing prefix, the rest appended. */
function realPrefix(abs: string): string {
  let head = abs;
  const rest: string[] = [];
  for (;;) {
    try {
      const r = fs.realpathSync.native(head);
      return rest.length ? path.join(r, ...rest.reverse()) : r;
    } catch {
      const parent = path.dirname(head);
      if (parent === head) return abs;
      rest.push(path.basename(head));
      head = parent;
    }
  }
}

/** The kernel's reading: components in order, a symlink replaced by its target before a later `..`. */
function kernelResolve(raw: string): string {
  const parts = raw.split('/').filter((c) => c !== '' && c !== '.');
  let cur = '/';
  let missing = false;
  for (const c of parts) {
    if (c === '..') {
      cur = path.dirname(cur);
      continue;
    }
    const next = path.join(cur, c);
    if (!missing) {
      try {
        const st = fs.lstatSync(next);
        cur = st.isSymbolicLink() ? fs.realpathSync.native(next) : next;
        continue;
      } catch {
        missing = true;
      }
    }
    cur = next;
  }
  return cur;
}

/**
 * The resolved readings of a path argument (one, or two when the kernel's and the lexical reading
 * differ). A path with a NUL byte, or that is not a string, is null: the call is `unknown`.
 */
export function resolvePath(p: string, base: string, ctx: PathContext): string[] | null {
  if (p.length === 0 || p.includes('\0')) return null;
  let raw: string;
  if (p === '~' || p.startsWith('~/')) raw = p === '~' ? ctx.home : `${ctx.home}/${p.slice(2)}`;
  else raw = p.startsWith('/') ? p : `${base}/${p}`;
  const lexical = realPrefix(path.resolve(raw));
  const kernel = kernelResolve(raw);
  return lexical === kernel ? [lexical] : [lexical, kernel];
}
