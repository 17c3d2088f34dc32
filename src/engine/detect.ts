/**
 * The building blocks every detector of the engine is made of (src/engine/secrets.ts for
 * credentials, src/engine/inspect.ts for PII and privilege escalation): a span type, cheap
 * pre-filters, the regex detector, and the masking of a matched value.
 *
 * Every pattern built here must stay linear in its input: a fixed literal or a bounded repetition
 * starts each one, because what they read (tool inputs, command output) is attacker-controlled and
 * can be megabytes long.
 */
import type { InspectCategory } from './types.js';

/** One match inside a string. */
export interface Span {
  start: number;
  end: number;
  detector: string;
  category: InspectCategory;
  /** The match with its sensitive part masked. */
  masked: string;
}

export interface Detector {
  id: string;
  category: InspectCategory;
  find(text: string, out: Span[]): void;
  /** Trigger bits (see TRIGGERS in inspect.ts), set once at load. */
  need?: number;
}

/**
 * A necessary condition for a detector to match: false only when no match can exist in the text.
 * Most tool inputs are short paths and words, and a regex whose pattern opens with a look-behind
 * is tried at every position; one `includes` of a literal that every match contains rules most
 * detectors out at a fraction of that cost. Findings are unchanged: a pre-filter never says false
 * for a text the regex matches (inspect-differential.test.ts compares against the unfiltered code).
 */
export type PreFilter = (text: string) => boolean;

/** Every match contains one of these literals (case-sensitive: only for patterns without the i flag,
 * or literals with no letters in them). */
export function anyOf(...lits: string[]): PreFilter {
  if (lits.length === 1) {
    const l = lits[0]!;
    return (t) => t.includes(l);
  }
  return (t) => {
    for (let i = 0; i < lits.length; i++) if (t.includes(lits[i]!)) return true;
    return false;
  };
}

/** At least `n` ASCII digits in the text. */
export const hasDigits =
  (n: number): PreFilter =>
  (t) => {
    if (t.length < n) return false;
    let c = 0;
    for (let i = 0; i < t.length; i++) {
      const d = t.charCodeAt(i) - 48;
      if (d >= 0 && d <= 9 && ++c >= n) return true;
    }
    return false;
  };

/**
 * Masks a sensitive string: at most its first 4 characters survive (fewer for short values, none
 * under 8), followed by `****`. Known token prefixes (AKIA, ghp_, sk-a, xoxb, eyJh) are what
 * the kept characters usually show, which is enough to tell an operator what kind of secret it was.
 */
export function maskValue(s: string): string {
  const keep = s.length >= 16 ? 4 : s.length >= 8 ? 2 : 0;
  return s.slice(0, keep) + '****';
}

export interface RegexDetectorOptions {
  /** False drops a match (a precision check: Luhn, mixed case, a placeholder value). */
  validate?: (m: RegExpExecArray) => boolean;
  /** The masked form of a match; default maskValue of the whole match. */
  mask?: (m: RegExpExecArray) => string;
}

/** Calls `each` for every non-empty match of `re` (made global) in `text` that passes `pre`. */
export function forEachMatch(g: RegExp, pre: PreFilter, text: string, each: (m: RegExpExecArray) => void): void {
  if (!pre(text)) return;
  g.lastIndex = 0;
  let m: RegExpExecArray | null;
  while ((m = g.exec(text)) !== null) {
    if (m[0].length === 0) {
      g.lastIndex++;
      continue;
    }
    each(m);
  }
}

/** `re` with the g flag (a private copy, so its lastIndex is the detector's own). */
export function globalCopy(re: RegExp): RegExp {
  return new RegExp(re.source, re.flags.includes('g') ? re.flags : re.flags + 'g');
}

export function regexDetector(
  id: string,
  category: InspectCategory,
  re: RegExp,
  pre: PreFilter,
  opts: RegexDetectorOptions = {},
): Detector {
  const g = globalCopy(re);
  return {
    id,
    category,
    find(text, out) {
      forEachMatch(g, pre, text, (m) => {
        if (opts.validate && !opts.validate(m)) return;
        out.push({
          start: m.index,
          end: m.index + m[0].length,
          detector: id,
          category,
          masked: opts.mask ? opts.mask(m) : maskValue(m[0]),
        });
      });
    },
  };
}
