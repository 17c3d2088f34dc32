/**
 * Entries that can match, but never what they look like (docs/policy.md "Entries that look like
 * another"): `/etc/shаdow` with a Cyrillic а denies a file nobody has and lets /etc/shadow through;
 * a zero-width space, a bidi control or a control character hides in a path or a command name.
 *
 * - filesystem, commands: any control (Cc), format (Cf: zero-width, bidi, soft hyphen) or
 *   default-ignorable character, and U+FFFD (what a decoder leaves of a bad byte);
 * - filesystem, commands, tools: a word (a run of letters) that mixes Latin, Greek, Cyrillic,
 *   Armenian or Cherokee letters, the scripts whose letters pass for one another.
 * Network entries are ASCII already (a non-ASCII name is inert: non_ascii), and tool names are
 * compared after removing invisible characters (src/engine/tool.ts), so only mixed scripts and
 * U+FFFD (a command-line argument that was not UTF-8) count there. The finding is `entry_lookalike`: critical on a deny list, a warning on an allow list;
 * a write that adds one is refused with the same code.
 */
import { forEachListEntry } from '../../engine/index.js';
import type { Surface } from '../../engine/types.js';

export interface Lookalike {
  surface: Surface;
  list: 'allow' | 'deny' | 'ask';
  entry: string;
  /** The first offending character, as U+XXXX. */
  codePoint: string;
  message: string;
}

const INVISIBLE = /[\p{Cc}\p{Cf}\p{Default_Ignorable_Code_Point}\uFFFD]/u;
const WORD = /\p{L}+/gu;
const SCRIPTS: [string, RegExp][] = [
  ['Latin', /\p{Script=Latin}/u],
  ['Greek', /\p{Script=Greek}/u],
  ['Cyrillic', /\p{Script=Cyrillic}/u],
  ['Armenian', /\p{Script=Armenian}/u],
  ['Cherokee', /\p{Script=Cherokee}/u],
];
const ASCII = /^[\x20-\x7e]*$/;

const hex = (c: string) => `U+${c.codePointAt(0)!.toString(16).toUpperCase().padStart(4, '0')}`;

function scriptOf(ch: string): string | null {
  for (const [name, re] of SCRIPTS) if (re.test(ch)) return name;
  return null;
}

/** Why `entry` does not mean what it looks like on `surface`, or null. */
export function lookalikeProblem(surface: Surface, entry: unknown): { codePoint: string; message: string } | null {
  if (typeof entry !== 'string' || ASCII.test(entry) || surface === 'network') return null;
  // Tool names are compared with invisible characters removed, so only U+FFFD counts there.
  {
    const m = surface === 'tools' ? /\uFFFD/u.exec(entry) : INVISIBLE.exec(entry);
    if (m) {
      const c = m[0];
      const kind =
        c === '\uFFFD'
          ? 'a replacement character (a byte that was not UTF-8)'
          : /\p{Cc}/u.test(c)
            ? 'a control character'
            : 'an invisible character (zero-width, bidi or format)';
      return { codePoint: hex(c), message: `${hex(c)} is ${kind}; the entry does not name what it shows` };
    }
  }
  for (const w of entry.match(WORD) ?? []) {
    const seen = new Map<string, string>();
    for (const ch of w) {
      const s = scriptOf(ch);
      if (s !== null && !seen.has(s)) seen.set(s, ch);
    }
    if (seen.size > 1) {
      // Name the character of the script that is not the word's first.
      const [[first], [other, ch]] = [...seen.entries()] as [[string, string], [string, string]];
      return {
        codePoint: hex(ch),
        message: `${hex(ch)} is a ${other} letter in a ${first} word (${JSON.stringify(w)}): it looks like another letter, so the entry names something else`,
      };
    }
  }
  return null;
}

/** Every look-alike entry of a config or fragment (any object with surface sections). */
export function lookalikeEntries(policyLike: unknown): Lookalike[] {
  const out: Lookalike[] = [];
  forEachListEntry(policyLike, (surface, list, entry) => {
    const p = lookalikeProblem(surface, entry);
    if (p) out.push({ surface, list, entry: entry as string, ...p });
  });
  return out;
}
