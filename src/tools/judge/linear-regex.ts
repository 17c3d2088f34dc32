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
  /** The same test in a form native code runs (the gate's native judge); absent for a pattern left to RE2. */
  readonly native?: NativeRegex;
}

/**
 * A pattern native code can match exactly as `test` does, on ASCII text: a literal (a string search,
 * anchored or not), or deterministic atoms (deterministicOf: a greedy walk never needs a second choice).
 * `chars` is the set of an atom as a string of its printable ASCII characters.
 */
export type NativeRegex =
  | { kind: 'literal'; lit: string; start: boolean; end: boolean }
  | { kind: 'atoms'; atoms: { chars: string; q: '' | '?' | '*' | '+' }[]; end: boolean };

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
  const lit = guard === null ? literalOf(main) : null;
  if (lit !== null) return { source: pattern, test: literalTest(lit), native: lit };
  const atoms = deterministicAtoms(main);
  const det = atoms === null ? null : atomsRegExp(atoms);
  // `test` asks for no groups, so re2js answers with its DFA (a Matcher's find() is 2.5x the cost);
  // the guard is anchored by its own `^`, so a match anywhere is one at the start.
  const main1 = det !== null ? (t: string) => det.test(t) : (t: string) => re.test(t);
  if (guard === null)
    return atoms === null ? { source: pattern, test: main1 } : { source: pattern, test: main1, native: atoms };
  return { source: pattern, test: (text) => !guard.test(text) && main1(text) };
}

/**
 * A pattern that is printable ASCII literals only (metacharacters escaped), with optional `^` and
 * `$`, is the same test as a string search: RE2 reads `^` and `$` as the start and end of the value.
 * Most argument rules are such (`^/etc/`, `\.\.`); the RE2 automaton costs a microsecond a call.
 */
function literalOf(p: string): Extract<NativeRegex, { kind: 'literal' }> | null {
  const start = p.startsWith('^');
  let end = false;
  let lit = '';
  for (let k = start ? 1 : 0; k < p.length; k++) {
    const c = p[k]!;
    if (c === '$' && k === p.length - 1) end = true;
    else if (c === '\\') {
      const n = p[k + 1];
      // An escaped punctuation character is itself; an escaped letter or digit is a class or an assertion.
      if (n === undefined || !/[!-/:-@[-`{-~]/.test(n)) return null;
      lit += n;
      k++;
    } else if (/[ -~]/.test(c) && !'.+*?()|[]{}^$'.includes(c)) lit += c;
    else return null;
  }
  return { kind: 'literal', lit, start, end };
}

function literalTest({ lit, start, end }: { lit: string; start: boolean; end: boolean }): (text: string) => boolean {
  if (start && end) return (t) => t === lit;
  if (start) return (t) => t.startsWith(lit);
  if (end) return (t) => t.endsWith(lit);
  return (t) => t.includes(lit);
}

const META = '.+*?()|[]{}^$';
// An escaped punctuation character is itself; an escaped letter or digit is a class or an assertion.
const PUNCT = /[!-/:-@[-`{-~]/;

/** The printable ASCII characters of a class `[...]` starting at `open`, and its end; null if unsure. */
function classAt(p: string, open: number): { set: Set<number>; end: number } | null {
  const set = new Set<number>();
  let k = open + 1;
  // `[^...]`, `[]...]`, `[[:alpha:]]`: read differently by some engines, left to RE2.
  if (p[k] === '^' || p[k] === ']') return null;
  const one = (): number | null => {
    const c = p[k];
    if (c === undefined || c === '[' || c === ']') return null;
    if (c === '\\') {
      const n = p[k + 1];
      if (n === undefined || !PUNCT.test(n)) return null;
      k += 2;
      return n.charCodeAt(0);
    }
    if (!/[ -~]/.test(c)) return null;
    k++;
    return c.charCodeAt(0);
  };
  while (p[k] !== ']') {
    const lo = one();
    if (lo === null) return null;
    if (p[k] === '-' && p[k + 1] !== ']') {
      k++;
      const hi = one();
      if (hi === null || hi < lo || p[k] === '-') return null;
      for (let c = lo; c <= hi; c++) set.add(c);
    } else set.add(lo);
  }
  return { set, end: k };
}

/**
 * A pattern anchored by `^`, of printable ASCII atoms (characters, escaped punctuation, classes
 * without negation) each once or with `?`, `*` or `+`, optionally ending in `$`, where no
 * repeated atom can also start what follows it: JavaScript's own engine then never has a second
 * choice to try (each backtrack fails at the next character), so it answers in time linear in the
 * value, and as RE2 does (ASCII atoms read the same in UTF-16 and in code points, `^` and `$` are
 * the value's ends in both). Built from the atoms read here, never from the source text. About
 * 20x faster than the RE2 automaton on `^/srv/[a-z/]+\\.txt$`; anything else is left to RE2.
 */
export function deterministicOf(p: string): RegExp | null {
  const atoms = deterministicAtoms(p);
  return atoms === null ? null : atomsRegExp(atoms);
}

/** The atoms of a deterministicOf pattern (null when it is not one). */
function deterministicAtoms(p: string): Extract<NativeRegex, { kind: 'atoms' }> | null {
  if (!p.startsWith('^')) return null;
  const atoms: { set: Set<number>; q: '' | '?' | '*' | '+' }[] = [];
  let end = false;
  for (let k = 1; k < p.length; k++) {
    const c = p[k]!;
    let set: Set<number>;
    if (c === '$' && k === p.length - 1) {
      end = true;
      continue;
    } else if (c === '[') {
      const cls = classAt(p, k);
      if (cls === null) return null;
      set = cls.set;
      k = cls.end;
    } else if (c === '\\') {
      const n = p[k + 1];
      if (n === undefined || !PUNCT.test(n)) return null;
      set = new Set([n.charCodeAt(0)]);
      k++;
    } else if (/[ -~]/.test(c) && !META.includes(c)) set = new Set([c.charCodeAt(0)]);
    else return null;
    const q = p[k + 1];
    if (q === '?' || q === '*' || q === '+') {
      k++;
      // A lazy or possessive suffix, or a second quantifier: left to RE2.
      if (k + 1 < p.length && '?*+{'.includes(p[k + 1]!)) return null;
      atoms.push({ set, q });
    } else if (q === '{') return null;
    else atoms.push({ set, q: '' });
  }
  for (let i = 0; i < atoms.length; i++) {
    if (atoms[i]!.q === '') continue;
    // What may start the rest: every atom up to and including the first that must match once.
    for (let j = i + 1; j < atoms.length; j++) {
      for (const c of atoms[j]!.set) if (atoms[i]!.set.has(c)) return null;
      if (atoms[j]!.q === '' || atoms[j]!.q === '+') break;
    }
  }
  const chars = (set: Set<number>) => String.fromCharCode(...[...set].sort((a, b) => a - b));
  return { kind: 'atoms', atoms: atoms.map((a) => ({ chars: chars(a.set), q: a.q })), end };
}

function atomsRegExp({ atoms, end }: Extract<NativeRegex, { kind: 'atoms' }>): RegExp {
  const hex = (c: number) => `\\x${c.toString(16).padStart(2, '0')}`;
  const src = atoms.map((a) => `[${[...a.chars].map((ch) => hex(ch.charCodeAt(0))).join('')}]${a.q}`).join('');
  return new RegExp(`^${src}${end ? '$' : ''}`);
}
