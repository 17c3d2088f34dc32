/**
 * The regular expressions of `tools.args` rules, matched in time linear in the input: tool inputs
 * come from the agent, and a backtracking engine lets `(a+)+$` keep the gate busy for seconds on a
 * 33-character value. Patterns are compiled with re2js (a pure-JavaScript port of RE2: an automaton,
 * no backtracking), so every accepted pattern matches in O(pattern × input).
 *
 * The syntax is RE2's (docs/tools.md "Argument patterns"). What it cannot match in linear time is
 * refused when the policy is written or loaded: backreferences and lookaround, with one exception
 * that `leash mcp learn` writes: a leading negative lookahead guard `^(?!G)REST`, which is exactly
 * "G does not match at the start and ^REST matches", so it is compiled as two linear patterns.
 * JavaScript's `\uXXXX` / `\u{X}` escapes are read as RE2's `\x{X}`, and Python's `\A`, `\Z`, `\z`
 * as the start and end of the value.
 */
import { RE2JS } from 're2js';
import { LeashError } from '../../errors.js';

export interface LinearRegex {
  /** True when the pattern matches anywhere in `text` (anchor with ^ and $). */
  test(text: string): boolean;
  readonly source: string;
}

/** A pattern that cannot be read as a linear-time regex (config_invalid: it comes from a policy). */
export class LinearRegexError extends LeashError {
  constructor(message: string, options?: { cause?: unknown }) {
    super('config_invalid', message, undefined, options);
  }
}

/** Rewrites JS/Python-only escapes to RE2 syntax, leaving `\\` pairs alone. */
function translate(p: string): string {
  return p.replace(
    /\\\\|\\A|\\[Zz]|\\u\{([0-9A-Fa-f]{1,6})\}|\\u([0-9A-Fa-f]{4})/g,
    (m, braced?: string, four?: string) => {
      if (m === '\\\\') return m;
      if (m === '\\A') return '^';
      if (m === '\\Z' || m === '\\z') return '$';
      return `\\x{${braced ?? four}}`;
    },
  );
}

/** The index of the `)` closing the group opened at `open`, or -1 (escapes and classes skipped). */
function closeOf(p: string, open: number): number {
  let depth = 0;
  let inClass = false;
  for (let k = open; k < p.length; k++) {
    const c = p[k];
    if (c === '\\') {
      k++;
      continue;
    }
    if (inClass) {
      if (c === ']') inClass = false;
      continue;
    }
    if (c === '[') inClass = true;
    else if (c === '(') depth++;
    else if (c === ')' && --depth === 0) return k;
  }
  return -1;
}

function compileOne(p: string): RE2JS {
  try {
    return RE2JS.compile(p);
  } catch (e) {
    const why = (e as Error).message.replace(/^error parsing regexp: /, '');
    const hint = /\(\?[=!<]|\\[1-9]|\\k</.test(p)
      ? ' (lookaround and backreferences cannot be matched in linear time; only a leading ^(?!…) guard is read)'
      : '';
    throw new LinearRegexError(`${why}${hint}`, { cause: e });
  }
}

/** Compiles a pattern; throws LinearRegexError naming what cannot be read. */
export function compileLinear(pattern: string): LinearRegex {
  const p = translate(pattern);
  let guard: RE2JS | null = null;
  let main: string = p;
  if (p.startsWith('^(?!')) {
    const close = closeOf(p, 1);
    if (close < 0) throw new LinearRegexError('missing closing ) of the leading (?! guard');
    guard = compileOne(`^(?:${p.slice(4, close)})`);
    main = `^${p.slice(close + 1)}`;
  }
  const re = compileOne(main);
  return {
    source: pattern,
    test: (text) => !(guard !== null && guard.matcher(text).lookingAt()) && re.matcher(text).find(),
  };
}
