/**
 * Output redaction: what a server answers to a tools/call, resources/read or prompts/get (its
 * result, structured content included, or its error) is masked with the engine's secret detectors
 * — the same set input inspection runs — before the client sees it. Binary payloads (`data` of an
 * image or audio item, `blob` of a resource) are not text and are left alone.
 */
import { mayHoldSecret, redactSecrets } from '../../engine/index.js';
import type { JsonObject, JsonValue } from '../../jsonl/json.js';

/** The methods whose answers are redacted. */
export const REDACTED_METHODS: ReadonlySet<string> = new Set(['tools/call', 'resources/read', 'prompts/get']);

const binary = (key: string, parent: Record<string, unknown>): boolean =>
  key === 'blob' || (key === 'data' && (parent.type === 'image' || parent.type === 'audio'));

/** True when the raw line (canonical JSON) may hold a secret and must be read and masked. */
export function lineMayHoldSecret(line: Buffer): boolean {
  return mayHoldSecret(line.toString('latin1'));
}

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
