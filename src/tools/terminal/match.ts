// deny_args, what only the terminal has. The entry rule itself (which binary an args key names)
// is the engine's one command matcher: commandEntryMatches in src/engine/command.ts.

/** Splits a deny_args pattern into lower-cased tokens (whitespace-separated). */
export function patternTokens(pattern: string): string[] {
  return pattern
    .split(/[ \t]+/)
    .filter((t) => t.length > 0)
    .map((t) => t.toLowerCase());
}

/**
 * Does one argument satisfy one pattern token? Compared case-insensitively (over-denying is the
 * safe direction). A long option `--flag` also matches `--flag=value` and any abbreviation of it
 * (`--fl`, `--fla=x`: getopt_long and git accept unambiguous prefixes); a single-letter `-f` also
 * matches a bundle of short flags such as `-fu`. Those are the spellings programs accept for the
 * same option.
 */
function tokenMatches(token: string, arg: string): boolean {
  const a = arg.toLowerCase();
  if (a === token) return true;
  if (token.startsWith('--') && token.length > 2 && a.startsWith('--') && a.length > 2) {
    const name = a.includes('=') ? a.slice(0, a.indexOf('=')) : a;
    if (name.length > 2 && token.startsWith(name)) return true;
  }
  if (/^-[a-z0-9]$/.test(token) && /^-[a-z0-9]{2,}$/.test(a)) return a.includes(token[1]!);
  return false;
}

/** The first deny_args pattern all of whose tokens appear among `args` (any order), or null. */
export function matchDenyArgs(patterns: readonly string[], args: readonly string[]): string | null {
  for (const pattern of patterns) {
    const tokens = patternTokens(pattern);
    if (tokens.length === 0) continue;
    if (tokens.every((t) => args.some((a) => tokenMatches(t, a)))) return pattern;
  }
  return null;
}
