/**
 * How a file's problems are named, for every reader of Leash's files (the config, a profile, the
 * gate's and the terminal's policy files, the CLI's commands): where (a path such as
 * `commands.allow[0]`) and what was probably meant (the closest known word by edit distance).
 */

/** A path into a document as the problem lines print it: `a.b[2].c`, `(root)` for the document. */
export function formatPath(p: readonly PropertyKey[]): string {
  let s = '';
  for (const seg of p) {
    if (typeof seg === 'number') s += `[${seg}]`;
    else s += s ? `.${String(seg)}` : String(seg);
  }
  return s || '(root)';
}

/** Levenshtein distance: the fewest single-character insertions, deletions and substitutions. */
export function editDistance(a: string, b: string): number {
  let prev = Array.from({ length: b.length + 1 }, (_, i) => i);
  for (let i = 1; i <= a.length; i++) {
    const cur = [i];
    for (let j = 1; j <= b.length; j++) {
      cur[j] = Math.min(prev[j]! + 1, cur[j - 1]! + 1, prev[j - 1]! + (a[i - 1] === b[j - 1] ? 0 : 1));
    }
    prev = cur;
  }
  return prev[b.length]!;
}

/** The closest known key within an edit distance that still reads as a typo. */
export function suggest(word: string, candidates: readonly string[]): string | null {
  let best: string | null = null;
  let bestD = Infinity;
  for (const c of candidates) {
    const d = editDistance(word.toLowerCase(), c);
    if (d < bestD) {
      best = c;
      bestD = d;
    }
  }
  return best !== null && bestD <= Math.min(Math.max(2, Math.floor(best.length / 3)), word.length - 1) ? best : null;
}
