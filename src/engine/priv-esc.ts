/**
 * The privilege-escalation detectors of tool input inspection (inspect.ts): sudo, pkexec, doas, su to root, a
 * setuid chmod or call, and an rm that would remove the root. Linear in the input like every detector (detect.ts).
 */
import { anyOf, regexDetector } from './detect.js';
import type { Detector } from './detect.js';
import { normalizePath } from './path.js';

/** `sudo`, `/usr/bin/sudo`, ... as a word of its own (not `pseudo`, not `sudoers`). */
function commandWord(id: string, word: string): Detector {
  return regexDetector(
    id,
    'priv_esc',
    new RegExp(`(?<![\\w.\\/-])(?:\\/[\\w.\\/-]{0,64}\\/)?${word}(?![\\w.-])`),
    anyOf(word),
    { mask: (m) => m[0] },
  );
}

const RM_WORD = /(?<![\w./-])(?:\/[\w./-]{0,64}\/)?rm\s/;
/** Shell words and the separators that end a command (`;`, `&`, `|`, parentheses, backquote, newline). */
const SHELL_TOKENS = /[;&|()`\n\r]|[^\s;&|()`]+/g;
const RM_TOKEN = /^['"]*(?:\/[\w./-]{0,64}\/)?rm$/;
/** Words examined after an rm: enough for any honest flag list, and a bound on the work per rm. */
const RM_MAX_ARGS = 64;

/** Does an operand of rm name the root (`/`, `//`, `/*`, `/.`, `/tmp/..`, quoted)? */
function isRootOperand(token: string): boolean {
  let t = token.replace(/^['"]+|['"]+$/g, '');
  if (!t.startsWith('/')) return false;
  if (t.endsWith('/*')) t = t.slice(0, -1);
  return normalizePath(t) === '/';
}

/**
 * `rm -rf /` in all its spellings: flags in any order and grouping (`-rf`, `-fr`, `-r -f`, `-R`,
 * `--recursive`), extra spaces, quotes, `/*`, `//`, `/tmp/..`, and any rm with `--no-preserve-root`.
 * The text is split into shell words once and each rm looks at most 64 words ahead, so the cost
 * stays linear however many times "rm" appears.
 */
const RM_ROOT: Detector = {
  id: 'rm_rf_root',
  category: 'priv_esc',
  find(text, out) {
    if (!text.includes('rm') || !RM_WORD.test(text)) return;
    const words: string[] = [];
    const starts: number[] = [];
    SHELL_TOKENS.lastIndex = 0;
    let m: RegExpExecArray | null;
    while ((m = SHELL_TOKENS.exec(text)) !== null) {
      words.push(m[0]);
      starts.push(m.index);
    }
    // Classify every word once; the look-ahead below is then integer work only.
    const kinds = new Uint8Array(words.length);
    for (let i = 0; i < words.length; i++) kinds[i] = classify(words[i]!);
    for (let i = 0; i < words.length; i++) {
      if (kinds[i] !== W_RM) continue;
      let recursive = false;
      let root = false;
      let noPreserve = false;
      let optionsEnded = false;
      let k = i + 1;
      for (; k < words.length && k <= i + RM_MAX_ARGS; k++) {
        const kind = kinds[k]!;
        if (kind === W_SEP) break;
        if (optionsEnded) root ||= kind === W_ROOT;
        else if (kind === W_END_OPTIONS) optionsEnded = true;
        else if (kind === W_NO_PRESERVE) noPreserve = true;
        else if (kind === W_RECURSIVE) recursive = true;
        else if (kind === W_ROOT) root = true;
      }
      if ((recursive && root) || noPreserve) {
        const start = starts[i]!;
        const last = k - 1;
        const end = starts[last]! + words[last]!.length;
        out.push({
          start,
          end,
          detector: 'rm_rf_root',
          category: 'priv_esc',
          masked: text.slice(start, end).slice(0, 80),
        });
      }
    }
  },
};

const W_OTHER = 0;
const W_SEP = 1;
const W_RM = 2;
const W_END_OPTIONS = 3;
const W_NO_PRESERVE = 4;
const W_RECURSIVE = 5;
const W_ROOT = 6;

function classify(word: string): number {
  if (word.length === 1 && ';&|()`\n\r'.includes(word)) return W_SEP;
  if (RM_TOKEN.test(word)) return W_RM;
  const t = word.replace(/^['"]+|['"]+$/g, '');
  if (t === '--') return W_END_OPTIONS;
  if (t === '--no-preserve-root') return W_NO_PRESERVE;
  if (t === '--recursive' || /^-[A-Za-z]*[rR][A-Za-z]*$/.test(t)) return W_RECURSIVE;
  if (isRootOperand(t)) return W_ROOT;
  return W_OTHER;
}

export const PRIV_ESC_DETECTORS: Detector[] = [
  commandWord('sudo', 'sudo'),
  commandWord('pkexec', 'pkexec'),
  commandWord('doas', 'doas'),
  regexDetector(
    'su_root',
    'priv_esc',
    /(?<![\w./-])(?:\/[\w./-]{0,64}\/)?su(?:[ \t]+-[A-Za-z]*|[ \t]+root(?![\w-])|(?=[ \t]*$))/,
    anyOf('su'),
    {
      mask: (m) => m[0],
    },
  ),
  regexDetector(
    'setuid_chmod',
    'priv_esc',
    /(?<![\w.-])chmod[ \t]+(?:-[A-Za-z]+[ \t]+){0,4}(?:(?:[ugoa]*[+=-][rwxXst]*,){0,4}[ugoa]*[+=][rwxXt]*s[rwxXst]*|0?[2-7][0-7]{3})(?![\w])/,
    anyOf('chmod'),
    { mask: (m) => m[0] },
  ),
  regexDetector('setuid_call', 'priv_esc', /\bset(?:e|re|res)?[ug]id[ \t]*\([ \t]*0\b/, anyOf('set'), {
    mask: (m) => m[0],
  }),
  RM_ROOT,
];
