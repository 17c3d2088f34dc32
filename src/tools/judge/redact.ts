/**
 * Output redaction: what a server answers to a tools/call, resources/read or prompts/get (its
 * result, structured content included, or its error) is masked with the engine's secret detectors
 * — the same set input inspection runs — before the client sees it. A base64 payload (`data` of an
 * image or audio item, `blob` of a resource) is decoded and masked when it is text, by its MIME
 * type or by its content, and encoded again; binary stays as it is. Key bodies are masked from any
 * part of them (./keybody.ts), not only from their BEGIN line: a tail, a diff's context lines.
 */
import { maskSecrets, mayHoldSecret, maskSecretsOnly, redactSecrets, SECRET_LITERALS } from '../../engine/index.js';
import { isObject, JsonNumber, type JsonObject, type JsonValue } from '../../formats/json.js';
import { nativeTools } from '../../native.js';
import { KEY_BODY_LITERALS, maskKeyBodies } from './keybody.js';

/** The methods whose answers are redacted. */
export const REDACTED_METHODS: ReadonlySet<string> = new Set(['tools/call', 'resources/read', 'prompts/get']);

const binary = (key: string, parent: Record<string, unknown>): boolean =>
  key === 'blob' || (key === 'data' && (parent.type === 'image' || parent.type === 'audio'));

/** mayHoldSecret on a line's bytes, in JavaScript: a latin1 copy, lower-cased, searched per literal. */
export function lineMayHoldSecretJs(line: Buffer): boolean {
  const t = line.toString('latin1');
  if (mayHoldSecret(t)) return true;
  const l = t.toLowerCase();
  return OUTPUT_LITERALS.some((x) => l.includes(x));
}

/**
 * Beside the detectors' literals: a key body's (an END line, an OpenSSH key's first bytes) and a
 * base64 payload's member names, whose decoded text the literals cannot be looked for in.
 */
const OUTPUT_LITERALS: readonly string[] = [...KEY_BODY_LITERALS, '"blob"', '"data"'];

/** What the native pre-check of an answer looks for (lineMayHoldSecret; the gate's answer reader, gate/scan.ts). */
export const ANSWER_LITERALS: string[] = [...SECRET_LITERALS, ...OUTPUT_LITERALS];

// The same question in one native pass over the bytes (native/tools/literals.cc), built from the same
// literal list; it was a tenth of the gate's CPU per answer in JavaScript. Without the addon, the
// JavaScript form.
function nativeFinder(): ((line: Buffer) => boolean) | null {
  try {
    const addon = nativeTools();
    if (typeof addon.createLiteralFinder !== 'function') return null;
    const has = addon.createLiteralFinder(ANSWER_LITERALS);
    return (line) => has(line) === 1;
  } catch {
    return null;
  }
}

/**
 * True when the raw line (canonical JSON) may hold a secret and must be read and masked. Canonical
 * lines are ASCII, so comparing bytes without case is the same as lower-casing the latin1 text.
 */
export const lineMayHoldSecret: (line: Buffer) => boolean = nativeFinder() ?? lineMayHoldSecretJs;

/** Masks secrets in a response's result or error, in place; true when anything changed. */
export function redactResponse(v: JsonObject): boolean {
  let changed = false;
  for (const k of ['result', 'error'] as const) {
    if (!Object.prototype.hasOwnProperty.call(v, k)) continue;
    const before = v[k]!;
    const after = afterDetectors(redactSecrets(before, binary) as JsonValue, 0);
    if (JSON.stringify(after) !== JSON.stringify(before)) {
      v[k] = after;
      changed = true;
    }
  }
  return changed;
}

/** Text MIME types (and the text-like application ones servers give key and config files). */
const TEXT_MIME =
  /^(text\/|application\/(json|xml|yaml|x-yaml|toml|x-sh|x-pem-file|pkcs8|x-x509|javascript|x-www-form-urlencoded))/i;

/** Decoded bytes that read as UTF-8 text: no NUL, valid, mostly printable. */
function looksText(b: Buffer): boolean {
  if (b.length === 0 || b.includes(0)) return false;
  const s = b.toString('utf8');
  if (s.includes('\ufffd')) return false;
  let ctl = 0;
  for (let i = 0; i < s.length && i < 4096; i++) {
    const c = s.charCodeAt(i);
    if (c < 32 && c !== 9 && c !== 10 && c !== 13) ctl++;
  }
  return ctl * 20 < Math.min(s.length, 4096);
}

/** A text mask over one string: the detectors (for decoded payloads) and key bodies. */
const maskText = (s: string) => maskKeyBodies(maskSecretsOnly(s));

/** A base64 payload decoded, masked when it is text, encoded again; as it came otherwise. */
function maskPayload(b64: string, mime: unknown): string {
  if (!/^[A-Za-z0-9+/=\s]*$/.test(b64)) return b64;
  const bytes = Buffer.from(b64, 'base64');
  // A text MIME type is believed (latin1 and all); anything else must read as UTF-8 text.
  if (!(typeof mime === 'string' && TEXT_MIME.test(mime)) && !looksText(bytes)) return b64;
  const text = bytes.toString('utf8');
  const masked = maskText(text);
  return masked === text ? b64 : Buffer.from(masked, 'utf8').toString('base64');
}

/** Key bodies in every string; base64 payloads decoded and masked (the detectors skipped them). */
function afterDetectors(v: JsonValue, depth: number): JsonValue {
  if (typeof v === 'string') return maskKeyBodies(v);
  if (depth > 64) return v;
  if (Array.isArray(v)) return v.map((x) => afterDetectors(x, depth + 1));
  if (!isObject(v)) return v;
  for (const k of Object.keys(v)) {
    const x = v[k]!;
    if (typeof x === 'string' && binary(k, v as Record<string, unknown>)) v[k] = maskPayload(x, v.mimeType);
    else v[k] = afterDetectors(x, depth + 1);
  }
  return v;
}

/** Cuts strings to 200 characters and masks secrets, for argument values written to the log. */
export function redactForLog(v: JsonValue | undefined, mask: (s: string) => string, depth = 0): unknown {
  if (v === undefined) return undefined;
  if (depth > 20) return '…';
  if (typeof v === 'string') {
    const m = mask(v);
    return m.length > 200 ? `${m.slice(0, 200)}…` : m;
  }
  if (v instanceof JsonNumber) return v.value;
  if (Array.isArray(v)) return v.slice(0, 100).map((x) => redactForLog(x, mask, depth + 1));
  if (isObject(v)) {
    const o: Record<string, unknown> = {};
    for (const k of Object.keys(v).slice(0, 100)) {
      Object.defineProperty(o, mask(k).slice(0, 200), {
        value: redactForLog(v[k], mask, depth + 1),
        enumerable: true,
        writable: true,
        configurable: true,
      });
    }
    return o;
  }
  return v;
}

/** Secret masking for strings the gate logs outside `inputs` (names, refused lines). */
export const maskString = (s: string): string => maskSecrets(s);
