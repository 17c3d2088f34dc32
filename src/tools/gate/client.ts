/**
 * The client → server relay: every client line is parsed strictly (or, when already canonical,
 * checked natively and forwarded as it came), batches are split, the envelope is checked, and a
 * request or notification goes to the judging hand-off; a response answers a server request.
 */
import { idKey, isObject, JsonError, parseStrict, type JsonObject, type JsonValue } from '../../formats/json.js';
import { plainRequest } from './scan.js';
import { judgeNotification, judgeRequest } from './judging.js';
import { envelopeProblem, has, printable, rpcError, validId } from './messages.js';
import { toClient, toServer } from './output.js';
import type { GateState } from './state.js';

export function clientLineTooLong(g: GateState): void {
  g.judge.event({ reason: 'protocol_client', rejected: 'client', code: 'line_too_long' });
  toClient(g, rpcError(null, -32700, 'parse error: line_too_long'));
}

function refuseClient(
  g: GateState,
  id: JsonValue,
  code: number,
  what: string,
  line: Buffer | string,
  method?: string,
): void {
  g.judge.event({
    reason: 'protocol_client',
    rejected: 'client',
    code: what,
    method,
    line: typeof line === 'string' ? line : line.toString('utf8'),
  });
  toClient(g, rpcError(id, code, code === -32700 ? `parse error: ${what}` : `invalid request: ${what}`));
}

export function handleClientLine(g: GateState, line: Buffer): void | Promise<void> {
  if (line.length === 0) return;
  g.clientSent++;
  const scanner = g.scanner;
  // A line already in the gate's own form is forwarded as it came (after the same checks).
  const raw = scanner !== null && scanner.scan(line) ? line : null;
  if (raw !== null) {
    const fast = plainRequest(line, scanner!.facts);
    if (fast !== null) {
      // The envelope was checked natively; only params are built (the judge reads them).
      let params: JsonValue | undefined;
      try {
        params = fast.params === null ? undefined : parseStrict(line.subarray(fast.params[0], fast.params[1]));
      } catch {
        params = null; // cannot happen for a scanned line; the full path below decides
      }
      if (params !== null) {
        const v: JsonObject = { jsonrpc: '2.0', method: fast.method };
        if (params !== undefined) v.params = params;
        if (fast.id === undefined) return judgeNotification(g, v, fast.method, line, raw);
        v.id = fast.id;
        if (g.pending.has(fast.key!) || g.held.has(fast.key!))
          return refuseClient(g, v.id, -32600, 'id_in_use', line, fast.method);
        return judgeRequest(g, v, fast.method, fast.key!, raw);
      }
    }
  }
  let v: JsonValue;
  try {
    v = parseStrict(line);
  } catch (e) {
    if (e instanceof JsonError) return refuseClient(g, null, -32700, e.code, line);
    throw e;
  }
  if (Array.isArray(v)) {
    if (v.length === 0) return refuseClient(g, null, -32600, 'empty_batch', line);
    // A batch is split: each element is judged and forwarded on its own.
    let chain: Promise<void> | null = null;
    for (const el of v) {
      if (chain) chain = chain.then(() => handleClientMessage(g, el, line, null));
      else {
        const r = handleClientMessage(g, el, line, null);
        if (r) chain = r;
      }
    }
    return chain ?? undefined;
  }
  return handleClientMessage(g, v, line, raw);
}

function handleClientMessage(g: GateState, v: JsonValue, line: Buffer, raw: Buffer | null): void | Promise<void> {
  if (!isObject(v)) return refuseClient(g, null, -32600, 'not_an_object', line);
  const idTrusted = has(v, 'id') && validId(v.id) ? (v.id as JsonValue) : null;
  const problem = envelopeProblem(v);
  if (problem)
    return refuseClient(g, idTrusted, -32600, problem.startsWith('member') ? 'other_spelling' : 'bad_jsonrpc', line);
  if (has(v, 'method')) {
    if (typeof v.method !== 'string') return refuseClient(g, idTrusted, -32600, 'method_not_string', line);
    if (has(v, 'result') || has(v, 'error')) return refuseClient(g, idTrusted, -32600, 'request_and_response', line);
    if (has(v, 'params') && !isObject(v.params) && !Array.isArray(v.params))
      return refuseClient(g, idTrusted, -32600, 'bad_params', line);
    const method = v.method;
    if (!has(v, 'id')) return judgeNotification(g, v, method, line, raw);
    if (v.id === null) return refuseClient(g, null, -32600, 'null_id', line, method);
    const key = idKey(v.id!);
    if (key === null) return refuseClient(g, null, -32600, 'bad_id', line, method);
    if (g.pending.has(key) || g.held.has(key)) return refuseClient(g, v.id!, -32600, 'id_in_use', line, method);
    return judgeRequest(g, v, method, key, raw);
  }
  // A response to a server-to-client request.
  if (!has(v, 'id') || !validId(v.id)) return refuseClient(g, null, -32600, 'response_without_id', line);
  if (has(v, 'result') === has(v, 'error'))
    return refuseClient(g, idTrusted, -32600, 'not_exactly_one_of_result_error', line);
  if (has(v, 'error') && !isObject(v.error)) return refuseClient(g, idTrusted, -32600, 'bad_error', line);
  const key = idKey(v.id!)!;
  if (!g.serverPending.has(key)) {
    g.judge.event({
      reason: 'protocol_client',
      rejected: 'client',
      code: 'unknown_response_id',
      line: line.toString('utf8'),
    });
    g.say(`dropped a client response to an id the server never asked: ${printable(line)}`);
    return;
  }
  g.serverPending.delete(key);
  // The client's roots move the server: the model takes them before the server can.
  if (g.rootsAsked.delete(key) && isObject(v.result)) g.model.clientRoots(v.result.roots);
  toServer(g, v, raw);
}
