/**
 * Tool input inspection: secrets, PII and privilege escalation in the (nested) inputs of a tool
 * call, with masking so nothing sensitive leaves the engine. The secret detectors are the one set
 * in secrets.ts (shared with output redaction); PII and privilege escalation are here.
 *
 * Leash's own detectors, not a library (secrets.ts says why). Every pattern here is
 * linear in the input: a fixed literal or a bounded repetition starts each one, and emails are
 * found by scanning for "@" rather than with a backtracking regex, because tool inputs are
 * attacker-controlled and can be megabytes long.
 *
 * Patterns are syntactic, like every detector of their kind: they catch the common shapes
 * (see docs/policy.md for the list) and miss novel or encoded ones. Inspection is a second
 * line behind the tool registry, not a replacement for it.
 */
import { anyOf, hasDigits, maskValue, regexDetector } from './detect.js';
import type { Detector, PreFilter, Span } from './detect.js';
import { normalizePath } from './path.js';
import { PLACEHOLDER, SECRET_DETECTORS } from './secrets.js';
import type { InspectAction, InspectCategory, InspectFinding } from './types.js';

export { maskValue } from './detect.js';

/** `+` then at least 8 digits. */
const PHONE_PRE: PreFilter = (t) => t.includes('+') && hasDigits(8)(t);
/** `ddd-dd-dddd`. */
const SSN_PRE: PreFilter = (t) => t.includes('-') && hasDigits(9)(t);

// ---------------------------------------------------------------- PII

const LOCAL_CHARS = /[A-Za-z0-9._%+-]/;
const DOMAIN_CHARS = /[A-Za-z0-9.-]/;

/** Emails, found by scanning for "@" and growing outwards (bounded), so a long input stays linear. */
const EMAIL: Detector = {
  id: 'email',
  category: 'pii',
  find(text, out) {
    let at = text.indexOf('@');
    while (at >= 0) {
      let s = at;
      while (s > 0 && at - s < 64 && LOCAL_CHARS.test(text[s - 1]!)) s--;
      let e = at + 1;
      while (e < text.length && e - at < 255 && DOMAIN_CHARS.test(text[e]!)) e++;
      while (e > at + 1 && (text[e - 1] === '.' || text[e - 1] === '-')) e--; // "mail me at a@b.com."
      const local = text.slice(s, at);
      const domain = text.slice(at + 1, e);
      const lastDot = domain.lastIndexOf('.');
      if (
        local.length > 0 &&
        lastDot > 0 &&
        /^[A-Za-z]{2,24}$/.test(domain.slice(lastDot + 1)) &&
        !domain.includes('..') &&
        !local.startsWith('.')
      ) {
        const email = text.slice(s, e);
        out.push({ start: s, end: e, detector: 'email', category: 'pii', masked: maskValue(email) });
      }
      at = text.indexOf('@', Math.max(e, at + 1));
    }
  },
};

function luhn(digits: string): boolean {
  let sum = 0;
  let double = false;
  for (let i = digits.length - 1; i >= 0; i--) {
    let d = digits.charCodeAt(i) - 48;
    if (double) {
      d *= 2;
      if (d > 9) d -= 9;
    }
    sum += d;
    double = !double;
  }
  return sum % 10 === 0;
}

const PII_DETECTORS: Detector[] = [
  EMAIL,
  regexDetector('credit_card', 'pii', /(?<![0-9])(?:[0-9][ -]?){12,18}[0-9](?![0-9])/, hasDigits(13), {
    validate: (m) => {
      const digits = m[0].replace(/[ -]/g, '');
      // Issuer prefixes (Visa, Mastercard, Amex, Discover, JCB, UnionPay) cut false positives on long numbers.
      return (
        digits.length >= 13 &&
        digits.length <= 19 &&
        /^(?:4|5[1-5]|2[2-7]|3[47]|6(?:011|5|4[4-9]|2)|35)/.test(digits) &&
        luhn(digits)
      );
    },
    mask: (m) => '****' + m[0].replace(/[ -]/g, '').slice(-4),
  }),
  regexDetector('phone', 'pii', /(?<![\w+])\+[1-9][0-9 ().-]{6,20}[0-9](?![0-9])/, PHONE_PRE, {
    validate: (m) => {
      const n = m[0].replace(/[^0-9]/g, '').length;
      return n >= 8 && n <= 15;
    },
  }),
  regexDetector(
    'us_ssn',
    'pii',
    /(?<![0-9-])(?!000|666|9[0-9]{2})[0-9]{3}-(?!00)[0-9]{2}-(?!0000)[0-9]{4}(?![0-9-])/,
    SSN_PRE,
  ),
];

// ---------------------------------------------------------------- privilege escalation

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

const PRIV_ESC_DETECTORS: Detector[] = [
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

const DETECTORS: readonly Detector[] = [...SECRET_DETECTORS, ...PII_DETECTORS, ...PRIV_ESC_DETECTORS];
const MASKING_DETECTORS: readonly Detector[] = [...SECRET_DETECTORS, ...PII_DETECTORS];

/** Deeper than any honest tool input; deeper input is refused (engine_error) rather than half-inspected. */
const MAX_DEPTH = 256;
/** Findings kept per call, so a flood of matches cannot blow up a verdict or a log line. */
const MAX_FINDINGS = 64;

/** Keys whose string value is a credential whatever it looks like (`{"password": "hunter2"}`). */
const SENSITIVE_KEY =
  /^(?:.*[_.-])?(?:password|passwd|passphrase|pwd|secret|client[_-]?secret|token|access[_-]?token|refresh[_-]?token|auth[_-]?token|api[_-]?key|apikey|access[_-]?key|secret[_-]?key|private[_-]?key|credentials?|authorization|cookie)$/i;

/**
 * One character every match of a detector contains (any one of the listed characters): a single
 * pass over a string tells which of these it holds, and a detector none of whose characters occur
 * is not run at all (its pre-filter and regex would find nothing). The characters are picked from
 * the literal each pattern requires (`-----BEGIN` → G, `eyJ` → J, `xox` → x, `sudo` → u, ...).
 */
const TRIGGERS: Readonly<Record<string, string>> = {
  private_key: 'G',
  aws_access_key: 'A',
  github_token: '_',
  gitlab_token: '-',
  slack_token: 'x',
  slack_webhook: ':',
  stripe_key: '_',
  anthropic_key: '-',
  openai_key: '-',
  google_api_key: 'A',
  npm_token: '_',
  huggingface_token: '_',
  sendgrid_key: 'G',
  jwt: 'J',
  bearer_token: 'B',
  basic_auth: 'B',
  url_credentials: '@',
  credential_assignment: '=:',
  email: '@',
  credit_card: '0123456789',
  phone: '+',
  us_ssn: '-',
  sudo: 'u',
  pkexec: 'k',
  doas: 'o',
  su_root: 'u',
  setuid_chmod: 'h',
  setuid_call: '(',
  rm_rf_root: 'm',
};

/** Bit per trigger character (ASCII only: every trigger is ASCII). */
const CHAR_BITS = new Uint32Array(128);
{
  let next = 0;
  for (const chars of Object.values(TRIGGERS))
    for (const ch of chars) {
      const c = ch.charCodeAt(0);
      if (CHAR_BITS[c] === 0) CHAR_BITS[c] = 1 << next++;
    }
}
// The trigger bits of each detector; all bits (always run) for a detector without triggers.
for (const d of DETECTORS) {
  const t = TRIGGERS[d.id];
  let bits = t === undefined ? ~0 : 0;
  if (t !== undefined) for (const ch of t) bits |= CHAR_BITS[ch.charCodeAt(0)]!;
  d.need = bits;
}

/** Which trigger characters occur in the text (one pass). */
function triggerBits(text: string): number {
  let bits = 0;
  for (let i = 0; i < text.length; i++) {
    const c = text.charCodeAt(i);
    if (c < 128) bits |= CHAR_BITS[c]!;
  }
  return bits;
}

function spansOf(text: string, detectors: readonly Detector[]): Span[] {
  const out: Span[] = [];
  const bits = triggerBits(text);
  for (let i = 0; i < detectors.length; i++) {
    const d = detectors[i]!;
    if ((d.need! & bits) !== 0) d.find(text, out);
  }
  return out;
}

/** Rewrites `text` with the given spans replaced by their masked forms (overlaps merged, first wins). */
function applyMasks(text: string, spans: Span[]): string {
  if (spans.length === 0) return text;
  spans.sort((a, b) => a.start - b.start || b.end - a.end);
  let out = '';
  let pos = 0;
  for (const s of spans) {
    if (s.start < pos) continue;
    out += text.slice(pos, s.start) + s.masked;
    pos = s.end;
  }
  return out + text.slice(pos);
}

/**
 * Masks every secret and PII match in a string (priv_esc matches are not sensitive and stay).
 * For the decision log and any other place a tool input or subject is written down.
 */
export function maskSecrets(text: string): string {
  return applyMasks(text, spansOf(text, MASKING_DETECTORS));
}

/**
 * A deep copy of a tool's inputs with secrets and PII masked in every string and key, and the
 * whole value of a sensitively named key (`password`, `token`, `api_key`, ...) masked.
 */
export function maskInputs(value: unknown, depth = 0): unknown {
  if (depth > MAX_DEPTH) return '****';
  if (typeof value === 'string') return maskSecrets(value);
  if (Array.isArray(value)) return value.map((v) => maskInputs(v, depth + 1));
  if (value !== null && typeof value === 'object') {
    const out: Record<string, unknown> = {};
    for (const [k, v] of Object.entries(value)) {
      const secretScalar = typeof v === 'string' || typeof v === 'number' || typeof v === 'bigint';
      out[maskSecrets(k)] = SENSITIVE_KEY.test(k) && secretScalar ? maskValue(String(v)) : maskInputs(v, depth + 1);
    }
    return out;
  }
  return value;
}

/** What inspection needs of an object key: every detector's matches, and the key as a path step. */
interface KeyInfo {
  /** Matches of all detectors, in detector order (the subset of an active set keeps that order). */
  spans: readonly Span[];
  /** The masked key as a path step: `.name` or `["odd key"]`. */
  step: string;
  identifier: boolean;
  /** SENSITIVE_KEY matches the key. */
  sensitive: boolean;
}

/**
 * Keys repeat from call to call (`path`, `command`, `query`), and each was scanned twice per call
 * (for findings, and masked for the path): the result is a pure function of the key, so short
 * keys keep it in a bounded table that is simply emptied when full.
 */
const KEY_CACHE = new Map<string, KeyInfo>();
const KEY_CACHE_MAX = 4096;
const KEY_CACHE_MAX_LEN = 128;

function keyInfo(key: string): KeyInfo {
  let info = KEY_CACHE.get(key);
  if (info !== undefined) return info;
  const spans = spansOf(key, DETECTORS);
  const k = applyMasks(
    key,
    spans.filter((sp) => sp.category !== 'priv_esc'),
  );
  const identifier = /^[A-Za-z_$][\w$]*$/.test(k);
  info = { spans, step: identifier ? k : `[${JSON.stringify(k)}]`, identifier, sensitive: SENSITIVE_KEY.test(key) };
  if (key.length <= KEY_CACHE_MAX_LEN) {
    if (KEY_CACHE.size >= KEY_CACHE_MAX) KEY_CACHE.clear();
    KEY_CACHE.set(key, info);
  }
  return info;
}

function childPath(parent: string, info: KeyInfo): string {
  if (info.identifier) return parent === '' ? info.step : `${parent}.${info.step}`;
  return parent + info.step;
}

/** The detectors each on/off combination of the three categories runs, built once (8 entries). */
const ACTIVE_SETS: { active: readonly Detector[]; privEsc: readonly Detector[] }[] = [];
for (let bits = 0; bits < 8; bits++) {
  const on = (c: InspectCategory) => (bits & (c === 'secrets' ? 1 : c === 'pii' ? 2 : 4)) !== 0;
  const active = DETECTORS.filter((d) => on(d.category));
  ACTIVE_SETS.push({ active, privEsc: active.filter((d) => d.category === 'priv_esc') });
}
function activeDetectors(actions: Readonly<Record<InspectCategory, InspectAction>>): {
  active: readonly Detector[];
  privEsc: readonly Detector[];
} {
  const bits =
    (actions.secrets !== 'allow' ? 1 : 0) | (actions.pii !== 'allow' ? 2 : 0) | (actions.priv_esc !== 'allow' ? 4 : 0);
  return ACTIVE_SETS[bits]!;
}

/**
 * Inspects a tool's inputs: every string value and every key, at any depth, plus each array of
 * scalars joined with spaces (so `["rm", "-rf", "/"]` reads as `rm -rf /`), and the string value
 * of every sensitively named key. Returns the findings, masked, with the action `actions` gives
 * their category; categories set to `allow` are not reported. Throws on input nested deeper than
 * 256 levels (the engine turns that into `engine_error`).
 */
export function inspectInputs(
  inputs: unknown,
  actions: Readonly<Record<InspectCategory, InspectAction>>,
): InspectFinding[] {
  const findings: InspectFinding[] = [];
  const { active, privEsc } = activeDetectors(actions);
  if (active.length === 0) return findings;
  // Allocated on the first finding: most calls have none.
  let seen: Set<string> | null = null;

  const report = (detector: string, category: InspectCategory, at: string, masked: string): void => {
    const key = `${detector}\u0000${at}\u0000${masked}`;
    seen ??= new Set();
    if (seen.has(key) || findings.length >= MAX_FINDINGS) return;
    seen.add(key);
    findings.push({ category, detector, at: at === '' ? '$' : at, masked, action: actions[category] });
  };
  /** Reports a key's cached matches of the active categories. */
  const reportSpans = (spans: readonly Span[], at: string): void => {
    for (const s of spans) {
      if (actions[s.category] === 'allow') continue;
      report(s.detector, s.category, at, s.category === 'priv_esc' ? maskSecrets(s.masked) : s.masked);
    }
  };
  /** Reports the matches in `text`; returns the ids of the detectors that matched (null: none). */
  const scan = (text: string, at: string, detectors: readonly Detector[]): Set<string> | null => {
    const spans = spansOf(text, detectors);
    if (spans.length === 0) return null;
    const ids = new Set<string>();
    for (const s of spans) {
      ids.add(s.detector);
      report(s.detector, s.category, at, s.category === 'priv_esc' ? maskSecrets(s.masked) : s.masked);
    }
    return ids;
  };
  const walk = (v: unknown, at: string, depth: number): void => {
    if (depth > MAX_DEPTH) throw new RangeError('tool inputs nested too deeply to inspect');
    if (typeof v === 'string') {
      scan(v, at, active);
    } else if (typeof v === 'number' || typeof v === 'bigint') {
      scan(String(v), at, active);
    } else if (Array.isArray(v)) {
      const elementHits = new Set<string>();
      let scalars = v.length > 1;
      for (let i = 0; i < v.length; i++) {
        const el: unknown = v[i];
        if (typeof el === 'string') {
          const ids = scan(el, `${at}[${i}]`, active);
          if (ids) for (const id of ids) elementHits.add(id);
        } else walk(el, `${at}[${i}]`, depth + 1);
        if (typeof el !== 'string' && typeof el !== 'number') scalars = false;
      }
      if (scalars && privEsc.length > 0) {
        const joined = v.join(' ');
        for (const s of spansOf(joined, privEsc)) {
          if (!elementHits.has(s.detector)) report(s.detector, s.category, at, maskSecrets(s.masked));
        }
      }
    } else if (v !== null && typeof v === 'object') {
      for (const [k, child] of Object.entries(v)) {
        const info = keyInfo(k);
        const path = childPath(at, info);
        reportSpans(info.spans, path);
        const scalar = typeof child === 'string' || typeof child === 'number' || typeof child === 'bigint';
        if (info.sensitive && scalar && actions.secrets !== 'allow') {
          const value = String(child).trim();
          if (value.length >= 4 && !PLACEHOLDER.test(value))
            report('credential_field', 'secrets', path, maskValue(value));
        }
        walk(child, path, depth + 1);
      }
    }
  };
  walk(inputs, '', 0);
  return findings;
}

/** Order in which a blocking category names the verdict's reason when several block. */
export const CATEGORY_PRIORITY: readonly InspectCategory[] = ['secrets', 'priv_esc', 'pii'];

// ---------------------------------------------------------------- output redaction

/** The secret detectors alone: what the tools gate masks in what a server answers. */
const SECRET_MASKING = DETECTORS.filter((d) => d.category === 'secrets');

/** Masks every secret match in a string (the secrets category of the one detector set). */
export function maskSecretsOnly(text: string): string {
  return applyMasks(text, spansOf(text, SECRET_MASKING));
}

/**
 * A deep copy of a value with every secret masked in every string and key, and the whole string
 * value of a sensitively named key (`password`, `token`, `api_key`, `authorization`, ...) masked
 * unless it is a placeholder. `skip(key, parent)` leaves a string as it is (binary payloads).
 */
export function redactSecrets(
  value: unknown,
  skip?: (key: string, parent: Record<string, unknown>) => boolean,
  depth = 0,
): unknown {
  if (depth > MAX_DEPTH) return '****';
  if (typeof value === 'string') return maskSecretsOnly(value);
  if (Array.isArray(value)) return value.map((v) => redactSecrets(v, skip, depth + 1));
  if (value !== null && typeof value === 'object') {
    // Only plain objects are walked: a class instance (a big number kept exactly) is a scalar.
    const proto: unknown = Object.getPrototypeOf(value);
    if (proto !== Object.prototype && proto !== null) return value;
    const src = value as Record<string, unknown>;
    const out: Record<string, unknown> = {};
    for (const [k, v] of Object.entries(src)) {
      let r: unknown;
      if (typeof v === 'string' && skip?.(k, src)) r = v;
      else if (typeof v === 'string' && SENSITIVE_KEY.test(k) && v.trim().length >= 4 && !PLACEHOLDER.test(v.trim()))
        r = maskValue(v);
      else r = redactSecrets(v, skip, depth + 1);
      Object.defineProperty(out, maskSecretsOnly(k), {
        value: r,
        enumerable: true,
        writable: true,
        configurable: true,
      });
    }
    return out;
  }
  return value;
}

/**
 * Literals one of which every secret match (and every sensitively named key) contains, lower case.
 * A text whose lower-case form holds none of them holds no secret: the gate forwards such an
 * answer as it came. Sound for the gate's canonical lines, whose escapes never touch an ASCII
 * letter, digit or these punctuation marks (tests/unit/tools/redact.test.ts holds it to
 * the detectors; the literals are those of ./secrets.ts, recall forms included).
 */
export const SECRET_LITERALS: readonly string[] = [
  '-----begin',
  'akia',
  'asia',
  'abia',
  'acca',
  'agpa',
  'aida',
  'aroa',
  'anpa',
  'k_test_',
  'gh',
  'glpat-',
  'xox',
  'hooks.slack.com',
  'k_live_',
  'sk-',
  'aiza',
  'npm_',
  'hf_',
  'sg.',
  'eyj',
  'bearer',
  'basic',
  '://',
  'pass',
  'pwd',
  'secret',
  'token',
  'key',
  'credential',
  'authorization',
  'cookie',
];

/** False only when no secret can be in the text (see SECRET_LITERALS). */
export function mayHoldSecret(text: string): boolean {
  const t = text.toLowerCase();
  for (let i = 0; i < SECRET_LITERALS.length; i++) if (t.includes(SECRET_LITERALS[i]!)) return true;
  return false;
}
