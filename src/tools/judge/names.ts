/**
 * Name folding for the tools surface.
 *
 * Tool names are compared after NFKC, case folding, trimming and removal of invisible characters,
 * so `Delete_All`, full-width `ｄｅｌｅｔｅ＿ａｌｌ` and `delete_all` with a U+200B are one tool.
 * Member names of the JSON-RPC envelope are never folded: a member that folds to an envelope name
 * without being it is refused (see `isOtherSpelling`).
 */
import { normalizeToolName } from '../../engine/index.js';

// Invisible: controls, format characters (zero-width, bidi, BOM, soft hyphen, tags), combining
// marks, line/paragraph separators, variation selectors, and the Hangul fillers that render blank.
const INVISIBLE = /[\p{Cc}\p{Cf}\p{Mn}\p{Me}\p{Zl}\p{Zp}\u115f\u1160\u3164\uffa0]/gu;

/** Tool names (and selectors such as URIs) compare as the engine normalises them: one definition. */
export { normalizeToolName };

/** Folding for lookalike detection (NFKC, case, invisibles, marks), independent of the engine's fast path. */
function fold(name: string): string {
  let s = name.normalize('NFKC').replace(INVISIBLE, '');
  // toUpperCase then toLowerCase approximates full case folding (ß → SS → ss, ſ → S → s).
  s = s.toUpperCase().toLowerCase().normalize('NFKC').replace(INVISIBLE, '');
  return s.trim();
}

/** A stricter skeleton for lookalike detection: accents are stripped too (`méthod` → `method`). */
export function skeleton(name: string): string {
  return fold(name.normalize('NFKD').replace(INVISIBLE, ''))
    .normalize('NFKD')
    .replace(INVISIBLE, '')
    .replace(/\s+/gu, '');
}

/**
 * True when `key` is not `canonical` but reads as it to a lenient reader (another case, a Unicode
 * fold, invisible characters, accents). Such members are refused, never normalised.
 */
export function isOtherSpelling(key: string, canonical: string): boolean {
  return key !== canonical && skeleton(key) === skeleton(canonical);
}

const tables = new WeakMap<readonly string[], { exact: Set<string>; bySkeleton: Map<string, string> }>();

/**
 * Returns the canonical name that `key` is another spelling of (case, Unicode fold, invisible
 * characters, accents), or null when it is one of them exactly or none at all.
 */
export function otherSpellingOf(key: string, canonicals: readonly string[]): string | null {
  let t = tables.get(canonicals);
  if (!t) {
    t = { exact: new Set(canonicals), bySkeleton: new Map(canonicals.map((c) => [skeleton(c), c])) };
    tables.set(canonicals, t);
  }
  if (t.exact.has(key)) return null; // the usual case: the member is spelled as it should be
  // Printable ASCII folds by case alone (NFKC is the identity there and nothing is invisible).
  const s = /^[\x21-\x7e]*$/.test(key) ? key.toLowerCase() : skeleton(key);
  const c = t.bySkeleton.get(s);
  return c !== undefined && c !== key ? c : null;
}
