/**
 * Small JSON-RPC helpers both of the gate's relays use: the envelope check, id validity, and the
 * printable excerpt of a line quoted in a human-readable message (the error answer and the codes
 * are src/formats/jsonrpc.ts, shared with the terminal).
 */
import { idKey, type JsonObject, type JsonValue } from '../../formats/json.js';
import { ENVELOPE } from '../judge/decide.js';
import { otherSpellingOf } from '../judge/names.js';

export const has = (o: JsonObject, k: string) => Object.prototype.hasOwnProperty.call(o, k);

export function printable(b: Buffer | string): string {
  const s = typeof b === 'string' ? b : b.toString('utf8');
  const t = s.length > 200 ? `${s.slice(0, 200)}…` : s;
  return JSON.stringify(t)
    .slice(1, -1)
    .replace(/[\u007f-\uffff]/g, (c) => `\\u${c.charCodeAt(0).toString(16).padStart(4, '0')}`);
}

export function envelopeProblem(o: JsonObject): string | null {
  for (const k in o) {
    const c = otherSpellingOf(k, ENVELOPE);
    if (c) return `member ${JSON.stringify(k)} is another spelling of ${c}`;
  }
  if (o.jsonrpc !== '2.0') return 'jsonrpc must be "2.0"';
  return null;
}

export const validId = (id: JsonValue | undefined): boolean => idKey(id ?? null) !== null;
