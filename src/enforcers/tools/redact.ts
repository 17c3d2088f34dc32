/**
 * Output redaction: what a server answers to a tools/call, resources/read or prompts/get (its
 * result, structured content included, or its error) is masked with the engine's secret detectors
 * — the same set input inspection runs — before the client sees it. Binary payloads (`data` of an
 * image or audio item, `blob` of a resource) are not text and are left alone.
 */
import { mayHoldSecret, redactSecrets, SECRET_LITERALS } from '../../engine/index.js';
import type { JsonObject, JsonValue } from '../../jsonl/json.js';
import { loadNative } from '../../native.js';

/** The methods whose answers are redacted. */
export const REDACTED_METHODS: ReadonlySet<string> = new Set(['tools/call', 'resources/read', 'prompts/get']);

const binary = (key: string, parent: Record<string, unknown>): boolean =>
  key === 'blob' || (key === 'data' && (parent.type === 'image' || parent.type === 'audio'));

/** mayHoldSecret on a line's bytes, in JavaScript: a latin1 copy, lower-cased, searched per literal. */
export function lineMayHoldSecretJs(line: Buffer): boolean {
  return mayHoldSecret(line.toString('latin1'));
}

// The same question in one native pass over the bytes (native/literals.cc), built from the same
// literal list; it was a tenth of the gate's CPU per answer in JavaScript. Without the addon, the
// JavaScript form.
function nativeFinder(): ((line: Buffer) => boolean) | null {
  try {
    const addon = loadNative();
    if (typeof addon.createLiteralFinder !== 'function') return null;
    const has = addon.createLiteralFinder([...SECRET_LITERALS]);
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
    const after = redactSecrets(before, binary) as JsonValue;
    if (JSON.stringify(after) !== JSON.stringify(before)) {
      v[k] = after;
      changed = true;
    }
  }
  return changed;
}
