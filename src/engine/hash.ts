/**
 * Allocation-free string hashing for the indexes. Lookups hash a slice of the subject in place
 * (no substring, no split), then verify the candidate with `startsWith` at an offset, so a
 * decision allocates nothing however long the lists are.
 */

/** FNV-1a offset basis (32-bit). */
export const FNV_INIT = 0x811c9dc5 | 0;

/** Folds one UTF-16 code unit into a running FNV-1a hash; the result stays an int32 (a small integer in V8). */
export function fnvStep(h: number, c: number): number {
  return Math.imul(h ^ c, 16777619);
}

/** Hashes `s[start, end)` without creating a substring. */
export function hashRange(s: string, start: number, end: number): number {
  let h = FNV_INIT;
  for (let i = start; i < end; i++) h = fnvStep(h, s.charCodeAt(i));
  return h;
}

/** True when `s[start, end)` is exactly `candidate` (no substring created). */
export function rangeEquals(s: string, start: number, end: number, candidate: string): boolean {
  return candidate.length === end - start && s.startsWith(candidate, start);
}
