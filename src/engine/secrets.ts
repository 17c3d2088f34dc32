/**
 * The one secret detector set of Leash: every credential shape the engine judges in tool inputs
 * and masks in logs, and the same shapes for rewriting output (the terminal's `[REDACTED:<kind>]`,
 * the tools gate's output redaction).
 *
 * API (small on purpose):
 *   findSecrets(text): SecretSpan[]   every secret in `text` as {start, end, kind}: sorted by
 *                                     start, never overlapping (overlaps are merged, the first
 *                                     kind named wins), `text.slice(start, end)` is the sensitive
 *                                     part only (the value of `password=...`, the token after
 *                                     `Bearer `), so a formatter replaces exactly that.
 *   SECRET_KINDS                      the kinds findSecrets can name (docs/policy.md lists them).
 * The engine itself (inspect.ts) uses SECRET_DETECTORS for findings and maskSecrets.
 *
 * Each kind has one entry and two ways of being applied, because judging and rewriting want
 * different errors. Judging (SECRET_DETECTORS: a finding can block a tool call) wants precision:
 * word-boundary guards and validators (mixed case, placeholders, calls) keep ordinary text from
 * being called a secret. Rewriting (findSecrets) wants recall, since over-redacting output is the
 * safe direction: no validators, and where output often glues a secret to neighbouring text (a
 * cap cut, a log prefix) no boundary guard either; an entry's `recall` pattern, when it has one,
 * is that wider shape (a superset of what the precise pattern matches, never a different kind).
 *
 * Leash's own detectors, not a library: the maintained JS scanners either need Node >= 22
 * (secretlint 10+), are asynchronous file/CLI scanners (secretlint 9, gitleaks wrappers) while
 * decide() is synchronous and pure, or call a cloud API (redact-pii). Patterns are syntactic:
 * they catch the common shapes and miss novel or encoded ones (docs/policy.md, docs/terminal.md).
 */
import { anyOf, globalCopy, maskValue, regexDetector } from './detect.js';
import type { Detector, PreFilter, RegexDetectorOptions } from './detect.js';

/** One secret found by findSecrets: `text.slice(start, end)` is the sensitive part. */
export interface SecretSpan {
  start: number;
  end: number;
  kind: string;
}

interface SecretEntry extends RegexDetectorOptions {
  kind: string;
  /** The precise pattern (judging). */
  re: RegExp;
  pre: PreFilter;
  /** Where the sensitive part lies in a match, as [start, end] offsets into m[0]; default all of it. */
  part?: (m: RegExpExecArray) => [number, number];
  /** The wider pattern for rewriting (same capture layout for `part`); default `re`. */
  recall?: { re: RegExp; pre: PreFilter; part?: (m: RegExpExecArray) => [number, number] };
}

/** The last capture group `g`, which ends the match. */
const tailGroup =
  (g: number) =>
  (m: RegExpExecArray): [number, number] => [m[0].length - m[g]!.length, m[0].length];

/** `scheme://user:password@`: "://" and "@" (case-free literals, so fine under the i flag). */
const CONTAINS_URL_CREDENTIALS: PreFilter = (t) => t.includes('@') && t.includes('://');

/** Values of a credential assignment that are not credentials (`${VAR}`, `<token>`, `null`, ...). */
export const PLACEHOLDER =
  /^(?:[$%<{*]|x{4,}$|\.{3})|^(?:null|none|nil|true|false|undefined|empty|changeme|redacted|secret|password|\*+)$/i;

/** The name side of a credential assignment: `password`, `db_password`, `AWS_SECRET_ACCESS_KEY`, ... */
const CREDENTIAL_NAME =
  '(?<![A-Za-z0-9_])((?:[A-Za-z0-9]{1,24}[_.-]){0,3}(?:password|passwd|passphrase|pwd|secret|token|api[_-]?key|apikey|access[_-]?key|private[_-]?key|credentials?)[A-Za-z0-9]{0,24}(?:[_.-][A-Za-z0-9]{1,24}){0,2})["\']?[ \\t]{0,4}(?::=|=|:)[ \\t]{0,4}';

/** A credential assignment: `password=...`, `api_key: ...`, `"client_secret": "..."`, `AWS_SECRET_ACCESS_KEY=...`. */
const CREDENTIAL_ASSIGNMENT = new RegExp(CREDENTIAL_NAME + '(["\'`]?)([^\\s"\'`,;()[\\]{}<>]{4,256})', 'gi');
/** For rewriting: a quoted value whole (spaces and brackets included), or a run after an open quote or
 * none, also on the next line (`aws_secret_access_key =` then the value, YAML's `key:` then an
 * indented value); longer values too (bounded all the same: a match starts only at a name). */
const CREDENTIAL_ASSIGNMENT_RECALL = new RegExp(
  CREDENTIAL_NAME +
    '(?:\\r?\\n[ \\t]{0,16})?("[^"\\n]{4,4096}"|\'[^\'\\n]{4,4096}\'|`[^`\\n]{4,4096}`|["\'`]?[^\\s"\'`,;]{4,4096})',
  'gi',
);

const ENTRIES: SecretEntry[] = [
  {
    kind: 'private_key',
    re: /-----BEGIN[ A-Z0-9]{0,40}PRIVATE KEY(?: BLOCK)?-----[\s\S]*?(?:-----END[ A-Z0-9]{0,40}PRIVATE KEY(?: BLOCK)?-----|$)/,
    pre: anyOf('-----BEGIN'),
    mask: () => '-----BEGIN PRIVATE KEY-----****',
  },
  {
    kind: 'aws_access_key',
    re: /(?<![A-Za-z0-9])(?:AKIA|ASIA|ABIA|ACCA)[A-Z0-9]{16}(?![A-Za-z0-9])/,
    pre: anyOf('AKIA', 'ASIA', 'ABIA', 'ACCA'),
    // The IAM unique-id prefixes too (user, role, group, policy): output names them beside keys.
    recall: {
      re: /(?:AKIA|ASIA|ABIA|ACCA|AGPA|AIDA|AROA|ANPA)[A-Z0-9]{16}/,
      pre: anyOf('AKIA', 'ASIA', 'ABIA', 'ACCA', 'AGPA', 'AIDA', 'AROA', 'ANPA'),
    },
  },
  {
    kind: 'github_token',
    re: /(?<![A-Za-z0-9_])(?:gh[pousr]_[A-Za-z0-9]{36,251}|github_pat_[A-Za-z0-9_]{22,255})(?![A-Za-z0-9_])/,
    pre: anyOf('gh', 'github_pat_'),
    recall: {
      re: /(?:gh[pousr]_[A-Za-z0-9]{36,251}|github_pat_[A-Za-z0-9_]{22,255})/,
      pre: anyOf('gh', 'github_pat_'),
    },
  },
  {
    kind: 'gitlab_token',
    re: /(?<![A-Za-z0-9_-])glpat-[A-Za-z0-9_-]{20,255}/,
    pre: anyOf('glpat-'),
    recall: { re: /glpat-[A-Za-z0-9_-]{20,255}/, pre: anyOf('glpat-') },
  },
  {
    kind: 'slack_token',
    re: /(?<![A-Za-z0-9])xox[abposre]-[A-Za-z0-9-]{10,250}/,
    pre: anyOf('xox'),
  },
  {
    kind: 'slack_webhook',
    re: /https:\/\/hooks\.slack\.com\/services\/[A-Za-z0-9_/]{20,200}/,
    pre: anyOf('https://hooks.slack.com/services/'),
    mask: () => 'https://hooks.slack.com/services/****',
  },
  {
    kind: 'stripe_key',
    re: /(?<![A-Za-z0-9_])[sr]k_live_[A-Za-z0-9]{16,247}(?![A-Za-z0-9])/,
    pre: anyOf('k_live_'),
    // Test-mode keys are keys too.
    recall: { re: /[sr]k_(?:live|test)_[A-Za-z0-9]{16,247}/, pre: anyOf('k_live_', 'k_test_') },
  },
  {
    kind: 'anthropic_key',
    re: /(?<![A-Za-z0-9_-])sk-ant-[A-Za-z0-9_-]{20,250}/,
    pre: anyOf('sk-ant-'),
    recall: { re: /\bsk-ant-[A-Za-z0-9_-]{20,250}/, pre: anyOf('sk-ant-') },
  },
  {
    kind: 'openai_key',
    re: /(?<![A-Za-z0-9_-])sk-(?!ant-)(?:proj-|svcacct-|admin-)?([A-Za-z0-9_-]{20,250})/,
    pre: anyOf('sk-'),
    // Real keys mix digits and both cases; "sk-this-is-a-long-word" does not.
    validate: (m) => /[0-9]/.test(m[1]!) && /[A-Z]/.test(m[1]!) && /[a-z]/.test(m[1]!),
    // A word boundary still: "risk-assessment-..." is not a key. Also any other `sk-ant-...`.
    recall: { re: /\bsk-(?:proj-|svcacct-|admin-|ant-)?([A-Za-z0-9_-]{20,250})/, pre: anyOf('sk-') },
  },
  {
    kind: 'google_api_key',
    re: /(?<![A-Za-z0-9_-])AIza[0-9A-Za-z_-]{35}(?![0-9A-Za-z_-])/,
    pre: anyOf('AIza'),
    recall: { re: /AIza[0-9A-Za-z_-]{35}/, pre: anyOf('AIza') },
  },
  { kind: 'npm_token', re: /(?<![A-Za-z0-9_])npm_[A-Za-z0-9]{36}(?![A-Za-z0-9])/, pre: anyOf('npm_') },
  { kind: 'huggingface_token', re: /(?<![A-Za-z0-9_])hf_[A-Za-z0-9]{34,40}(?![A-Za-z0-9])/, pre: anyOf('hf_') },
  {
    kind: 'sendgrid_key',
    re: /(?<![A-Za-z0-9_])SG\.[A-Za-z0-9_-]{22}\.[A-Za-z0-9_-]{43}(?![A-Za-z0-9_-])/,
    pre: anyOf('SG.'),
  },
  {
    kind: 'jwt',
    re: /(?<![A-Za-z0-9_-])eyJ[A-Za-z0-9_-]{8,}\.eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]*/,
    pre: anyOf('eyJ'),
  },
  {
    kind: 'bearer_token',
    re: /\bBearer[ \t]+([A-Za-z0-9._~+/-]{16,1024}=*)/,
    pre: anyOf('Bearer'),
    mask: (m) => 'Bearer ' + maskValue(m[1]!),
    part: tailGroup(1),
    recall: { re: /\b[Bb]earer[ \t]+([A-Za-z0-9._~+/-]{16,1024}=*)/, pre: anyOf('earer'), part: tailGroup(1) },
  },
  {
    kind: 'basic_auth',
    re: /\bBasic[ \t]+([A-Za-z0-9+/]{12,1024}={0,2})(?![A-Za-z0-9+/=])/,
    pre: anyOf('Basic'),
    mask: () => 'Basic ****',
    part: tailGroup(1),
  },
  {
    kind: 'url_credentials',
    re: /\b([a-z][a-z0-9+.-]{1,20}:\/\/[^\s:@/]{1,64}):[^\s@/]{1,128}@/i,
    pre: CONTAINS_URL_CREDENTIALS,
    mask: (m) => `${m[1]!}:****@`,
    // The password: after "scheme://user:", before "@".
    part: (m) => [m[1]!.length + 1, m[0].length - 1],
    recall: {
      re: /\b([a-z][a-z0-9+.-]{0,255}:\/\/[^\s:@/]{1,255}):[^\s@/]{1,255}@/i,
      pre: CONTAINS_URL_CREDENTIALS,
      part: (m) => [m[1]!.length + 1, m[0].length - 1],
    },
  },
  {
    kind: 'credential_assignment',
    re: CREDENTIAL_ASSIGNMENT,
    pre: anyOf('=', ':'),
    validate: (m) => {
      const value = m[3]!;
      if (PLACEHOLDER.test(value)) return false;
      // `password = get_password(...)`: a call, not a value (the class stops the value at "(").
      const next = m.input.charCodeAt(m.index + m[0].length);
      return next !== 40 /* ( */ && next !== 46; /* . */
    },
    // The name, separator and opening quote as written: `api_key = "****"` keeps its shape (and its closing quote
    // still pairs), never `api_key=****"`.
    mask: (m) => `${m[0].slice(0, m[0].length - m[3]!.length)}****`,
    part: tailGroup(3),
    recall: { re: CREDENTIAL_ASSIGNMENT_RECALL, pre: anyOf('=', ':'), part: tailGroup(2) },
  },
];

/** The precise detectors, in this order, for the engine's findings and maskSecrets (inspect.ts). */
export const SECRET_DETECTORS: readonly Detector[] = ENTRIES.map((e) =>
  regexDetector(e.kind, 'secrets', e.re, e.pre, { validate: e.validate, mask: e.mask }),
);

/** Every kind findSecrets can name. */
export const SECRET_KINDS: readonly string[] = ENTRIES.map((e) => e.kind);

/** Longer than any name CREDENTIAL_NAME matches, with its separator and a line break. */
const NAME_REACH = 256;

interface RecallFinder {
  kind: string;
  g: RegExp;
  pre: PreFilter;
  part: ((m: RegExpExecArray) => [number, number]) | undefined;
}

const RECALL: readonly RecallFinder[] = ENTRIES.map((e) => ({
  kind: e.kind,
  g: globalCopy(e.recall?.re ?? e.re),
  pre: e.recall?.pre ?? e.pre,
  part: e.recall ? e.recall.part : e.part,
}));

/**
 * Every secret in `text`, for rewriting it: sorted by start, overlaps merged into one span (the
 * kind of the earliest-starting match, then of the entry listed first). See the header for what a
 * span covers and why this finds more than the engine's judging does.
 */
export function findSecrets(text: string): SecretSpan[] {
  const found: SecretSpan[] = [];
  for (const r of RECALL) {
    if (!r.pre(text)) continue;
    const g = r.g;
    g.lastIndex = 0;
    let m: RegExpExecArray | null;
    while ((m = g.exec(text)) !== null) {
      const [s, e] = r.part ? r.part(m) : [0, m[0].length];
      if (e > s) found.push({ start: m.index + s, end: m.index + e, kind: r.kind });
      // A value can end inside the next name (`a=b-password = secret`): go on from where that
      // name could start (at most NAME_REACH before the match's end), not past it. Each match then
      // rescans a bounded stretch, so the scan stays linear.
      g.lastIndex = r.part
        ? Math.max(m.index + Math.max(s, 1), m.index + m[0].length - NAME_REACH)
        : m.index + Math.max(m[0].length, 1);
    }
  }
  if (found.length < 2) return found;
  // Stable sort: at the same start the longer span, then the entry listed first.
  found.sort((a, b) => a.start - b.start || b.end - a.end);
  const out: SecretSpan[] = [found[0]!];
  for (let i = 1; i < found.length; i++) {
    const s = found[i]!;
    const last = out[out.length - 1]!;
    if (s.start < last.end) last.end = Math.max(last.end, s.end);
    else out.push(s);
  }
  return out;
}
