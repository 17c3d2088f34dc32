/**
 * Commands. An entry with a `/` is an absolute path and matches exactly that binary (both sides
 * normalised lexically); an entry without one is a basename and matches a binary of that name in
 * any directory. A copied or renamed binary evades a basename deny: honest blocking of commands
 * needs whitelist mode (docs/policy.md says so; `leash validate` warns about it).
 */
import { IntTable, hashRange, rangeEquals } from './hash.js';
import { normalizePath } from './path.js';
import type { EntryProblem } from './types.js';

/**
 * Returns why a command entry can never match, or null when it is well-formed. Subjects are the
 * kernel's absolute path of the executable, so a relative path (`./x`, `bin/x`, `~/bin/x`) never
 * matches, and neither does an entry with arguments (`rm -rf`): the surface sees binaries only.
 */
export function commandEntryProblem(entry: unknown): EntryProblem | null {
  if (typeof entry !== 'string') return { code: 'not_a_string', message: 'an entry must be a string' };
  if (entry.length === 0) return { code: 'empty', message: 'the entry is empty' };
  if (/[\s\u0000-\u001f\u007f]/.test(entry)) {
    return {
      code: 'arguments',
      message: 'a command entry is one binary (a name or an absolute path), never a command line with arguments',
    };
  }
  if (entry.charCodeAt(0) === 126 /* ~ */) {
    return { code: 'home_path', message: '"~" is not expanded; write the absolute path' };
  }
  if (entry.includes('/')) {
    if (entry.charCodeAt(0) !== 47) {
      return { code: 'relative_path', message: 'a relative path never matches; write a name or an absolute path' };
    }
    const p = normalizePath(entry)!;
    if (p === '/') return { code: 'bad_name', message: '"/" is not a binary' };
    return null;
  }
  if (/[*?[]/.test(entry)) {
    return { code: 'glob_not_supported', message: 'command entries are matched literally; globs are not supported' };
  }
  if (entry === '.' || entry === '..') return { code: 'bad_name', message: `"${entry}" is not a binary name` };
  return null;
}

interface NameNode {
  key: string;
  rule: string;
  next: NameNode | null;
}

/** Adds `key -> rule` to a hashed table of chains (first entry for a key wins). */
function put(table: IntTable<NameNode>, key: string, rule: string): void {
  const h = hashRange(key, 0, key.length);
  const head = table.get(h) ?? null;
  for (let n = head; n !== null; n = n.next) if (n.key === key) return;
  table.set(h, { key, rule, next: head });
}

/** The rule stored for `s[start, end)`, found without creating a substring. */
function lookup(table: IntTable<NameNode>, s: string, start: number, end: number): string | null {
  for (let n = table.get(hashRange(s, start, end)) ?? null; n !== null; n = n.next) {
    if (rangeEquals(s, start, end, n.key)) return n.rule;
  }
  return null;
}

/** A compiled set of command entries (one commands list). Build once, query many times. */
export class CommandIndex {
  private readonly byPath = new IntTable<NameNode>();
  private readonly byName = new IntTable<NameNode>();
  size = 0;

  /** Adds an entry; inert entries are skipped (they can never match by definition). */
  add(entry: unknown): void {
    if (commandEntryProblem(entry) !== null) return;
    const rule = entry as string;
    this.size++;
    if (rule.includes('/')) put(this.byPath, normalizePath(rule)!, rule);
    else put(this.byName, rule, rule);
  }

  /**
   * The entry matching `binary` (an absolute path already normalised, or a bare name as
   * `leash check commands ls` passes it), or null. The exact path is preferred as more specific.
   */
  match(binary: string): string | null {
    if (this.byPath.size > 0) {
      const r = lookup(this.byPath, binary, 0, binary.length);
      if (r !== null) return r;
    }
    if (this.byName.size === 0) return null;
    return lookup(this.byName, binary, binary.lastIndexOf('/') + 1, binary.length);
  }
}

/**
 * Normalises a command subject: an absolute path lexically, a bare name as it is. Throws on an
 * empty or relative-with-slash binary: the kernel always reports an absolute path, so anything
 * else is an enforcer bug, judged as `engine_error`.
 */
export function normalizeBinary(binary: string): string {
  if (typeof binary !== 'string' || binary.length === 0) throw new TypeError('subject binary is empty');
  if (!binary.includes('/')) return binary;
  const p = normalizePath(binary);
  if (p === null) throw new TypeError('subject binary is a relative path');
  return p;
}

/**
 * The commands surface's entry rule for one entry and one name, outside a compiled index (the
 * terminal's `commands.args` keys against the binary and argv[0]): an entry containing `/` is a
 * path matched exactly after lexical normalisation, otherwise a basename compared with the last
 * segment; case-sensitive, as Linux file names are. A name as typed may be relative (`./ls`): it
 * is normalised the same way, without a root.
 */
export function commandEntryMatches(entry: string, binary: string): boolean {
  if (entry.includes('/')) return lexicalName(entry) === lexicalName(binary);
  const b = lexicalName(binary);
  return b.slice(b.lastIndexOf('/') + 1) === entry;
}

/** `..`, `//`, `.` and a trailing `/` folded; a relative name keeps the `..` it cannot fold. */
function lexicalName(p: string): string {
  if (!p.includes('/')) return p;
  if (p.charCodeAt(0) === 47) return normalizePath(p)!;
  const out: string[] = [];
  for (const seg of p.split('/')) {
    if (seg === '' || seg === '.') continue;
    if (seg === '..' && out.length > 0 && out[out.length - 1] !== '..') out.pop();
    else out.push(seg);
  }
  return out.length ? out.join('/') : '.';
}
