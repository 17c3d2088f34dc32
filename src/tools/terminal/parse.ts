/**
 * The command-line parser. There is no shell anywhere in the terminal: this turns one line into an
 * argv, handling quotes, and refuses anything a shell would have given meaning to. The refusal
 * happens before any policy check, so a metacharacter can never reach a verdict or a process.
 */

export type ParseResult = { ok: true; argv: string[] } | { ok: false; reason: string };

/** Longer lines are refused: nothing legitimate needs them and they bloat the audit trail. */
export const MAX_COMMAND_LENGTH = 16 * 1024;

// Characters a shell interprets: chaining, pipes, background, redirection, substitution.
// Refused even inside quotes: the model evidently expects shell semantics it will not get,
// and refusing is clearer than passing a literal ';' to a program.
const METACHARS: ReadonlyArray<[string, string]> = [
  [';', 'command separator'],
  ['|', 'pipe'],
  ['&', 'background / and-list'],
  ['<', 'redirection'],
  ['>', 'redirection'],
  ['`', 'command substitution'],
  ['$(', 'command substitution'],
  ['${', 'parameter expansion'],
];

function describeChar(c: string): string {
  return `U+${c.codePointAt(0)!.toString(16).toUpperCase().padStart(4, '0')}`;
}

/**
 * Characters that are refused outright: newlines (a second command to a shell), every other
 * control character, and invisible or non-ASCII spacing, which would let two strings that look
 * the same split into different argv.
 */
function forbiddenChar(c: string): string | null {
  const cp = c.codePointAt(0)!;
  if (c === '\n' || c === '\r') return 'newline';
  if (c === '\t') return null;
  if (cp < 0x20 || cp === 0x7f || (cp >= 0x80 && cp <= 0x9f)) return `control character ${describeChar(c)}`;
  if (/[\p{Zs}\p{Zl}\p{Zp}\p{Cf}]/u.test(c) && c !== ' ') return `invisible or non-ASCII space ${describeChar(c)}`;
  return null;
}

/** Splits `line` into argv (POSIX-like quoting, no expansion of any kind), or says why not. */
export function parseCommandLine(line: string): ParseResult {
  if (typeof line !== 'string') return { ok: false, reason: 'command must be a string' };
  if (line.length > MAX_COMMAND_LENGTH)
    return { ok: false, reason: `command longer than ${MAX_COMMAND_LENGTH} characters` };
  for (const [meta, what] of METACHARS) {
    if (line.includes(meta)) return { ok: false, reason: `shell metacharacter '${meta}' (${what}) refused: no shell` };
  }
  for (const c of line) {
    const bad = forbiddenChar(c);
    if (bad) return { ok: false, reason: `${bad} refused: no shell` };
  }

  const argv: string[] = [];
  let cur = '';
  let inToken = false;
  let i = 0;
  while (i < line.length) {
    const c = line[i]!;
    if (c === ' ' || c === '\t') {
      if (inToken) argv.push(cur);
      cur = '';
      inToken = false;
      i++;
    } else if (c === "'") {
      const end = line.indexOf("'", i + 1);
      if (end < 0) return { ok: false, reason: 'unterminated single quote' };
      cur += line.slice(i + 1, end);
      inToken = true;
      i = end + 1;
    } else if (c === '"') {
      let j = i + 1;
      let closed = false;
      while (j < line.length) {
        const d = line[j]!;
        if (d === '"') {
          closed = true;
          break;
        }
        if (d === '\\' && (line[j + 1] === '"' || line[j + 1] === '\\')) {
          cur += line[j + 1];
          j += 2;
          continue;
        }
        cur += d;
        j++;
      }
      if (!closed) return { ok: false, reason: 'unterminated double quote' };
      inToken = true;
      i = j + 1;
    } else if (c === '\\') {
      if (i + 1 >= line.length) return { ok: false, reason: 'trailing backslash' };
      cur += line[i + 1];
      inToken = true;
      i += 2;
    } else {
      cur += c;
      inToken = true;
      i++;
    }
  }
  if (inToken) argv.push(cur);
  if (argv.length === 0) return { ok: false, reason: 'empty command' };
  if (argv[0] === '') return { ok: false, reason: 'empty command name' };
  return { ok: true, argv };
}
