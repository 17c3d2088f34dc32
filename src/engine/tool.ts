/**
 * Tools: matched by exact name after normalisation, so a look-alike spelling of a denied tool
 * is the denied tool. Normalisation removes invisible characters (zero-width, bidi controls,
 * soft hyphen, variation selectors, tags: every Default_Ignorable_Code_Point, format and control
 * character), applies NFKC (full-width and compatibility forms), folds case (upper then lower, so
 * `ß` and `SS` agree), trims and collapses whitespace.
 */
import type { EntryProblem } from './types.js';

const INVISIBLE = /[\p{Default_Ignorable_Code_Point}\p{Cc}\p{Cf}]/gu;
const PLAIN = /^[a-z0-9_.:/-]+$/;

// The last two plain names seen: the gate asks about its method and the tool's name on every call
// (four times a call), and comparing with them is cheaper than the pattern. '' normalises to itself.
let plainA = '';
let plainB = '';

/** The canonical form of a tool name (entries and subjects alike). */
export function normalizeToolName(name: string): string {
  if (name === plainA || name === plainB) return name;
  if (PLAIN.test(name)) {
    // The usual name needs no work.
    plainB = plainA;
    plainA = name;
    return name;
  }
  const folded = name.replace(INVISIBLE, '').normalize('NFKC').toUpperCase().toLowerCase().normalize('NFKC');
  return folded.replace(INVISIBLE, '').trim().replace(/\s+/g, ' ');
}

/** Returns why a tools entry can never match (not a string, or nothing left after normalising), or null. */
export function toolEntryProblem(entry: unknown): EntryProblem | null {
  if (typeof entry !== 'string') return { code: 'not_a_string', message: 'an entry must be a string' };
  if (normalizeToolName(entry) === '') {
    return { code: 'empty', message: 'the entry is empty (or only invisible characters and whitespace)' };
  }
  // Tools are matched by exact name: `*` is a literal character no tool name has, so a deny `*`
  // would block nothing (use mode: whitelist with an empty allow list to refuse every tool).
  if (entry.includes('*')) {
    return { code: 'glob_not_supported', message: 'tools entries are exact names; * is not a wildcard here' };
  }
  return null;
}

/** A compiled set of tool entries (one tools list). */
export class ToolIndex {
  private readonly names = new Map<string, string>();
  size = 0;

  /** Adds an entry; inert entries are skipped. */
  add(entry: unknown): void {
    if (toolEntryProblem(entry) !== null) return;
    const key = normalizeToolName(entry as string);
    this.size++;
    if (!this.names.has(key)) this.names.set(key, entry as string);
  }

  /** The entry naming `name` (already normalised), or null. */
  match(name: string): string | null {
    return this.names.get(name) ?? null;
  }
}
