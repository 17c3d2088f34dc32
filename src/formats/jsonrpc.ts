/**
 * Newline-delimited JSON-RPC 2.0 for Leash's stdio peers, over the one line reader (./lines.ts)
 * and the strict JSON reader (./json.ts): the error codes and the error answer both the MCP gate
 * and `leash terminal` send, and the terminal's classification of what it is sent. Duplicate keys,
 * invalid UTF-8, lone surrogates, control characters and lossy numbers are refused as parse errors
 * rather than read one way here and another way by whoever logged the line.
 */
import { isObject, JsonError, parseStrict, toPlain, type JsonObject, type JsonValue } from './json.js';
import { LineReader } from './lines.js';

export type JsonRpcId = string | number;

export type Incoming =
  | { kind: 'request'; id: JsonRpcId; method: string; params: Record<string, unknown> | undefined }
  | { kind: 'notification'; method: string; params: Record<string, unknown> | undefined }
  | { kind: 'response'; id: JsonRpcId | null }
  | { kind: 'invalid'; id: JsonRpcId | null; code: number; message: string };

export const PARSE_ERROR = -32700;
export const INVALID_REQUEST = -32600;
export const METHOD_NOT_FOUND = -32601;
export const INVALID_PARAMS = -32602;
export const INTERNAL_ERROR = -32603;

/** A JSON-RPC error answer (`data` only when given). */
export const rpcError = (id: JsonValue, code: number, message: string, data?: JsonValue): JsonObject => {
  const err: JsonObject = { code, message };
  if (data !== undefined) err.data = data;
  return { jsonrpc: '2.0', id, error: err };
};

/** Lines longer than this are refused (and skipped) rather than buffered without end. */
export const MAX_LINE_BYTES = 1024 * 1024;

function isId(v: JsonValue | undefined): v is JsonRpcId {
  return (typeof v === 'string' && v.length <= 256) || (typeof v === 'number' && Number.isSafeInteger(v));
}

/** Classifies one line. Batches, non-objects, a wrong `jsonrpc`, bad ids or params are invalid. */
export function parseMessage(line: Buffer | string): Incoming {
  let msg: JsonValue;
  try {
    msg = parseStrict(typeof line === 'string' ? Buffer.from(line, 'utf8') : line);
  } catch (e) {
    const what = e instanceof JsonError ? `: ${e.code}` : '';
    return { kind: 'invalid', id: null, code: PARSE_ERROR, message: `Parse error${what}` };
  }
  if (Array.isArray(msg))
    return { kind: 'invalid', id: null, code: INVALID_REQUEST, message: 'Batches are not supported' };
  if (!isObject(msg)) return { kind: 'invalid', id: null, code: INVALID_REQUEST, message: 'Invalid Request' };
  const m = msg;
  const id = isId(m.id) ? m.id : null;
  if (m.jsonrpc !== '2.0') {
    return { kind: 'invalid', id, code: INVALID_REQUEST, message: 'Invalid Request: jsonrpc must be "2.0"' };
  }
  if ('method' in m) {
    if (typeof m.method !== 'string' || m.method.length === 0) {
      return { kind: 'invalid', id, code: INVALID_REQUEST, message: 'Invalid Request: method' };
    }
    if ('id' in m && !isId(m.id))
      return { kind: 'invalid', id: null, code: INVALID_REQUEST, message: 'Invalid Request: id' };
    let params: Record<string, unknown> | undefined;
    if ('params' in m) {
      if (!isObject(m.params)) {
        return { kind: 'invalid', id, code: INVALID_PARAMS, message: 'Invalid params: must be an object' };
      }
      params = toPlain(m.params) as Record<string, unknown>;
    }
    if (id !== null) return { kind: 'request', id, method: m.method, params };
    return { kind: 'notification', method: m.method, params };
  }
  if ('result' in m || 'error' in m) return { kind: 'response', id };
  return { kind: 'invalid', id, code: INVALID_REQUEST, message: 'Invalid Request' };
}

/**
 * The terminal's framing over the one line reader (src/formats/lines.ts): lines over `maxBytes` are
 * reported once (as `null`) and skipped up to the next newline; blank lines are not messages.
 */
export function createLineSplitter(onLine: (line: Buffer | null) => void, maxBytes = MAX_LINE_BYTES): LineReader {
  const blank = (b: Buffer): boolean => b.every((x) => x === 0x20 || x === 0x09 || x === 0x0d);
  return new LineReader(
    (line) => {
      if (!blank(line)) onLine(line);
    },
    () => onLine(null),
    { maxBytes },
  );
}
