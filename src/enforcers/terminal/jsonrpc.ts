/**
 * Strict newline-delimited JSON-RPC 2.0 framing for the terminal's stdio. Kept in one file so it
 * can be swapped for the MCP gate's parser (branch mcp) without touching the server.
 */

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

/** Lines longer than this are refused (and skipped) rather than buffered without end. */
export const MAX_LINE_BYTES = 1024 * 1024;

function isId(v: unknown): v is JsonRpcId {
  return (typeof v === 'string' && v.length <= 256) || (typeof v === 'number' && Number.isSafeInteger(v));
}

/** Classifies one line. Batches, non-objects, a wrong `jsonrpc`, bad ids or params are invalid. */
export function parseMessage(line: string): Incoming {
  let msg: unknown;
  try {
    msg = JSON.parse(line);
  } catch {
    return { kind: 'invalid', id: null, code: PARSE_ERROR, message: 'Parse error' };
  }
  if (Array.isArray(msg))
    return { kind: 'invalid', id: null, code: INVALID_REQUEST, message: 'Batches are not supported' };
  if (msg === null || typeof msg !== 'object') {
    return { kind: 'invalid', id: null, code: INVALID_REQUEST, message: 'Invalid Request' };
  }
  const m = msg as Record<string, unknown>;
  const id = 'id' in m && isId(m.id) ? m.id : null;
  if (m.jsonrpc !== '2.0')
    return { kind: 'invalid', id, code: INVALID_REQUEST, message: 'Invalid Request: jsonrpc must be "2.0"' };
  if ('method' in m) {
    if (typeof m.method !== 'string' || m.method.length === 0) {
      return { kind: 'invalid', id, code: INVALID_REQUEST, message: 'Invalid Request: method' };
    }
    if ('id' in m && !isId(m.id))
      return { kind: 'invalid', id: null, code: INVALID_REQUEST, message: 'Invalid Request: id' };
    let params: Record<string, unknown> | undefined;
    if ('params' in m) {
      if (m.params === null || typeof m.params !== 'object' || Array.isArray(m.params)) {
        return { kind: 'invalid', id, code: INVALID_PARAMS, message: 'Invalid params: must be an object' };
      }
      params = m.params as Record<string, unknown>;
    }
    if ('id' in m) return { kind: 'request', id: m.id as JsonRpcId, method: m.method, params };
    return { kind: 'notification', method: m.method, params };
  }
  if ('result' in m || 'error' in m) return { kind: 'response', id };
  return { kind: 'invalid', id, code: INVALID_REQUEST, message: 'Invalid Request' };
}

/**
 * Splits a byte stream into lines. A line over `maxBytes` is reported once (as `null`) and its
 * remainder skipped up to the next newline.
 */
export function createLineSplitter(onLine: (line: string | null) => void, maxBytes = MAX_LINE_BYTES) {
  let buf = '';
  let skipping = false;
  return {
    push(chunk: string): void {
      let start = 0;
      for (;;) {
        const nl = chunk.indexOf('\n', start);
        if (nl < 0) break;
        const piece = chunk.slice(start, nl);
        start = nl + 1;
        if (skipping) {
          skipping = false;
          buf = '';
          continue;
        }
        const line = buf + piece;
        buf = '';
        if (Buffer.byteLength(line) > maxBytes) onLine(null);
        else if (line.trim().length > 0) onLine(line);
      }
      if (skipping) return;
      buf += chunk.slice(start);
      if (Buffer.byteLength(buf) > maxBytes) {
        skipping = true;
        buf = '';
        onLine(null);
      }
    },
    end(): void {
      if (!skipping && buf.trim().length > 0) onLine(buf);
      buf = '';
    },
  };
}
