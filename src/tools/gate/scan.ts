/**
 * The gate's fast path: the native pre-check (native/tools/jsonscan.cc) of one line.
 *
 * When it answers 1 the line is valid and already in the exact form the gate writes (compact ASCII,
 * canonical escapes and integers, no duplicate keys), so the gate may forward the bytes it was
 * given instead of parsing and re-writing them. Anything else goes through parseStrict, which
 * stays the definition of what is accepted. A differential test holds the two together.
 */
import { nativeTools } from '../../native.js';
import type { JsonValue } from '../../formats/json.js';
import { CHUNK_LINES } from '../judge/native.js';
import { ANSWER_LITERALS } from '../judge/redact.js';

/** Bits of `facts[0]` (the top-level members of an object line). */
export const SCAN = {
  TOP_OBJECT: 1 << 0,
  JSONRPC_OK: 1 << 1,
  HAS_ID: 1 << 2,
  HAS_METHOD: 1 << 3,
  HAS_PARAMS: 1 << 4,
  HAS_RESULT: 1 << 5,
  HAS_ERROR: 1 << 6,
  ERROR_OBJECT: 1 << 7,
  OTHER_KEY: 1 << 8,
  ID_INT: 1 << 9,
  ID_STRING: 1 << 10,
  METHOD_STRING: 1 << 11,
  PARAMS_OBJECT: 1 << 12,
} as const;

export interface LineScanner {
  /** True when the line is certainly valid and canonical; `facts` then describes it. */
  scan(line: Buffer): boolean;
  /** [flags, integer id, id start, id end, method start, method end, params start, params end] of the last line scanned. */
  readonly facts: Float64Array;
}

/** The native scanner, or null when the addon cannot be loaded (the gate then parses every line). */
export function nativeLineScanner(): LineScanner | null {
  const facts = new Float64Array(8);
  let fn: (line: Buffer) => number;
  try {
    const addon = nativeTools();
    if (typeof addon.createJsonScanner !== 'function') return null;
    fn = addon.createJsonScanner(facts);
  } catch {
    return null;
  }
  return { facts, scan: (line) => fn(line) === 1 };
}

const RESPONSE_NEED = SCAN.TOP_OBJECT | SCAN.JSONRPC_OK | SCAN.HAS_ID;
const RESPONSE_NOT = SCAN.HAS_METHOD | SCAN.HAS_PARAMS | SCAN.OTHER_KEY;

/**
 * The id key (json.ts idKey) of a scanned line that is a plain response: exactly jsonrpc "2.0",
 * an integer or escape-free string id, and one of result or error (an object); else null.
 */
export function plainResponseKey(line: Buffer, facts: Float64Array): string | null {
  const f = facts[0]!;
  if ((f & RESPONSE_NEED) !== RESPONSE_NEED || (f & RESPONSE_NOT) !== 0) return null;
  const result = (f & SCAN.HAS_RESULT) !== 0;
  const error = (f & SCAN.HAS_ERROR) !== 0;
  if (result === error || (error && (f & SCAN.ERROR_OBJECT) === 0)) return null;
  if (f & SCAN.ID_INT) return `n${facts[1]!}`;
  if (f & SCAN.ID_STRING) return `s${line.toString('latin1', facts[2]!, facts[3]!)}`;
  return null;
}

// The last method read: most lines repeat it, and the same string object then hashes once.
let lastMethod = '';

/** The latin1 text of line[start, end) (an escape-free method), the last one's string when equal. */
function methodAt(line: Buffer, start: number, end: number): string {
  const n = end - start;
  if (n === lastMethod.length) {
    let k = 0;
    while (k < n && line[start + k] === lastMethod.charCodeAt(k)) k++;
    if (k === n) return lastMethod;
  }
  lastMethod = line.toString('latin1', start, end);
  return lastMethod;
}

const REQUEST_NEED = SCAN.TOP_OBJECT | SCAN.JSONRPC_OK | SCAN.METHOD_STRING;
const REQUEST_NOT = SCAN.HAS_RESULT | SCAN.HAS_ERROR | SCAN.OTHER_KEY;

export interface PlainRequest {
  method: string;
  /** The id (undefined for a notification) and its idKey. */
  id?: number | string;
  key?: string;
  /** The byte span of params (an object), or null when there are none. */
  params: [number, number] | null;
}

/**
 * A scanned line that is a plain request or notification: exactly the envelope members, jsonrpc
 * "2.0", an escape-free method, an integer or escape-free string id (or none), params an object
 * (or none); else null (the gate then reads the line in full).
 */
export function plainRequest(line: Buffer, facts: Float64Array): PlainRequest | null {
  const f = facts[0]!;
  if ((f & REQUEST_NEED) !== REQUEST_NEED || (f & REQUEST_NOT) !== 0) return null;
  if (f & SCAN.HAS_PARAMS && !(f & SCAN.PARAMS_OBJECT)) return null;
  const out: PlainRequest = {
    method: methodAt(line, facts[4]!, facts[5]!),
    params: f & SCAN.HAS_PARAMS ? [facts[6]!, facts[7]!] : null,
  };
  if (f & SCAN.HAS_ID) {
    if (f & SCAN.ID_INT) {
      out.id = facts[1]!;
      out.key = `n${out.id}`;
    } else if (f & SCAN.ID_STRING) {
      out.id = line.toString('latin1', facts[2]!, facts[3]!);
      out.key = `s${out.id}`;
    } else return null;
  }
  return out;
}

/**
 * A span of a line the scanner accepted, read by JSON.parse: the span is valid canonical JSON
 * (ASCII, no duplicate key, integers of at most 15 digits), where JSON.parse builds what
 * parseStrict builds (a `__proto__` member an own property in both) at a third of its cost. The
 * differential test (tests/native/jsonscan-diff.test.ts) compares the two on every line it accepts.
 */
export function parseScanned(line: Buffer, start: number, end: number): JsonValue {
  return JSON.parse(line.toString('latin1', start, end)) as JsonValue;
}

/**
 * The plain answers at the start of a chunk from the server, read natively in one call
 * (native/tools/jsonscan.cc createAnswerReader): `read(chunk, at)` is how many whole lines from byte `at` are
 * canonical plain responses with an integer id, with out[3k] the k-th's end (after its LF), out[3k+1] its id and
 * out[3k+2] 1 when it may hold a secret (as lineMayHoldSecret). The line by line path answers the same of each.
 */
export interface AnswerReader {
  readonly out: Float64Array;
  read(chunk: Buffer, at: number): number;
}

export function nativeAnswerReader(): AnswerReader | null {
  const out = new Float64Array(new ArrayBuffer(8 * 3 * CHUNK_LINES));
  try {
    const addon = nativeTools();
    if (typeof addon.createAnswerReader !== 'function') return null;
    return { out, read: addon.createAnswerReader(out, ANSWER_LITERALS) };
  } catch {
    return null;
  }
}
