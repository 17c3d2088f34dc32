/**
 * Tool input inspection: secrets, PII and privilege escalation in the (nested) inputs of a tool
 * call, with masking so nothing sensitive leaves the engine. The secret detectors are the one set
 * in secrets.ts (shared with output redaction); PII in pii.ts, privilege escalation in priv-esc.ts.
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
import { maskValue } from './detect.js';
import type { Detector, Span } from './detect.js';
import { PII_DETECTORS } from './pii.js';
import { PRIV_ESC_DETECTORS } from './priv-esc.js';
import { PLACEHOLDER, SECRET_DETECTORS } from './secrets.js';
import type { InspectAction, InspectCategory, InspectFinding } from './types.js';
import { DETECTOR_NEEDS, type DetectorNeed } from './needs.js';

export { DETECTOR_NEEDS, meetsNeed, type DetectorNeed } from './needs.js';

export { maskValue } from './detect.js';

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
let runsAlways = false;
for (const d of DETECTORS) {
  const t = TRIGGERS[d.id];
  let bits = t === undefined ? ~0 : 0;
  if (t !== undefined) for (const ch of t) bits |= CHAR_BITS[ch.charCodeAt(0)]!;
  else runsAlways = true;
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

/** What spansOf returns for a text no detector runs on (most texts): never written to. */
const NO_SPANS: Span[] = Object.freeze([]) as unknown as Span[];

// The trigger bits of each list of detectors as one typed array (read per text; reading `need` off
// detectors of several shapes was most of the cost of a text no detector runs on).
const NEEDS = new WeakMap<readonly Detector[], Int32Array>();
function needsOf(detectors: readonly Detector[]): Int32Array {
  let needs = NEEDS.get(detectors);
  if (needs === undefined) {
    needs = Int32Array.from(detectors, (d) => d.need!);
    NEEDS.set(detectors, needs);
  }
  return needs;
}

function spansOf(text: string, detectors: readonly Detector[]): Span[] {
  let out = NO_SPANS;
  const bits = triggerBits(text);
  if (bits === 0 && !runsAlways) return out;
  const needs = needsOf(detectors);
  for (let i = 0; i < needs.length; i++) {
    if ((needs[i]! & bits) === 0) continue;
    if (out === NO_SPANS) out = [];
    detectors[i]!.find(text, out);
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

/** One inspection's state: the walk below is plain functions over it (no closures per call). */
interface Inspection {
  findings: InspectFinding[];
  actions: Readonly<Record<InspectCategory, InspectAction>>;
  active: readonly Detector[];
  privEsc: readonly Detector[];
  /** Allocated on the first finding: most calls have none. */
  seen: Set<string> | null;
}

function report(st: Inspection, detector: string, category: InspectCategory, at: string, masked: string): void {
  const key = `${detector}\u0000${at}\u0000${masked}`;
  st.seen ??= new Set();
  if (st.seen.has(key) || st.findings.length >= MAX_FINDINGS) return;
  st.seen.add(key);
  st.findings.push({ category, detector, at: at === '' ? '$' : at, masked, action: st.actions[category] });
}

/** Reports a key's cached matches of the active categories. */
function reportSpans(st: Inspection, spans: readonly Span[], at: string): void {
  for (const s of spans) {
    if (st.actions[s.category] === 'allow') continue;
    report(st, s.detector, s.category, at, s.category === 'priv_esc' ? maskSecrets(s.masked) : s.masked);
  }
}

/** Reports the matches in `text`; returns the ids of the detectors that matched (null: none). */
function scanText(st: Inspection, text: string, at: string, detectors: readonly Detector[]): Set<string> | null {
  const spans = spansOf(text, detectors);
  if (spans.length === 0) return null;
  const ids = new Set<string>();
  for (const s of spans) {
    ids.add(s.detector);
    report(st, s.detector, s.category, at, s.category === 'priv_esc' ? maskSecrets(s.masked) : s.masked);
  }
  return ids;
}

function walkArray(st: Inspection, v: unknown[], at: string, depth: number): void {
  const elementHits = new Set<string>();
  let scalars = v.length > 1;
  for (let i = 0; i < v.length; i++) {
    const el: unknown = v[i];
    if (typeof el === 'string') {
      const ids = scanText(st, el, `${at}[${i}]`, st.active);
      if (ids) for (const id of ids) elementHits.add(id);
    } else walkValue(st, el, `${at}[${i}]`, depth + 1);
    if (typeof el !== 'string' && typeof el !== 'number') scalars = false;
  }
  if (scalars && st.privEsc.length > 0) {
    const joined = v.join(' ');
    for (const s of spansOf(joined, st.privEsc)) {
      if (!elementHits.has(s.detector)) report(st, s.detector, s.category, at, maskSecrets(s.masked));
    }
  }
}

function walkValue(st: Inspection, v: unknown, at: string, depth: number): void {
  if (depth > MAX_DEPTH) throw new RangeError('tool inputs nested too deeply to inspect');
  if (typeof v === 'string') {
    scanText(st, v, at, st.active);
  } else if (typeof v === 'number' || typeof v === 'bigint') {
    scanText(st, String(v), at, st.active);
  } else if (Array.isArray(v)) {
    walkArray(st, v, at, depth);
  } else if (v !== null && typeof v === 'object') {
    // Object.keys as Object.entries read them (own, enumerable, string keys), without a pair per key.
    const o = v as Record<string, unknown>;
    const keys = Object.keys(o);
    for (let i = 0; i < keys.length; i++) {
      const k = keys[i]!;
      const child = o[k];
      const info = keyInfo(k);
      const path = childPath(at, info);
      if (info.spans.length > 0) reportSpans(st, info.spans, path);
      const scalar = typeof child === 'string' || typeof child === 'number' || typeof child === 'bigint';
      if (info.sensitive && scalar && st.actions.secrets !== 'allow') {
        const value = String(child).trim();
        if (value.length >= 4 && !PLACEHOLDER.test(value))
          report(st, 'credential_field', 'secrets', path, maskValue(value));
      }
      walkValue(st, child, path, depth + 1);
    }
  }
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
  walkValue({ findings, actions, active, privEsc, seen: null }, inputs, '', 0);
  return findings;
}

/** SENSITIVE_KEY, for the needs test. */
export const sensitiveKey = (key: string): boolean => SENSITIVE_KEY.test(key);

/**
 * The needs of every detector the actions leave active (and of a sensitively named key when secrets are
 * inspected); null when an active detector has no need listed (a caller must then run inspection itself).
 */
export function inspectionNeeds(actions: Readonly<Record<InspectCategory, InspectAction>>): DetectorNeed[] | null {
  const out: DetectorNeed[] = [];
  for (const d of activeDetectors(actions).active) {
    const need = DETECTOR_NEEDS[d.id];
    if (need === undefined) return null;
    out.push(need);
  }
  if (actions.secrets !== 'allow') out.push(DETECTOR_NEEDS.credential_field!);
  return out;
}

/**
 * The needs of maskSecrets' detectors (secrets and PII): a text that meets none of them is masked to itself.
 * Null when a detector has no need.
 */
export function maskingNeeds(): DetectorNeed[] | null {
  const out: DetectorNeed[] = [];
  for (const d of MASKING_DETECTORS) {
    const need = DETECTOR_NEEDS[d.id];
    if (need === undefined) return null;
    out.push(need);
  }
  return out;
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
