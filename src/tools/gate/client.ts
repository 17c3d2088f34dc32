/**
 * The client → server relay: every client line is parsed strictly (or, when already canonical,
 * checked natively and forwarded as it came), batches are split, the envelope is checked, and a
 * request or notification with a valid envelope is judged, then forwarded to the server (and, for
 * a request, waited for) or answered with the denial; a response answers a server request.
 */
import { performance } from 'node:perf_hooks';
import { idKey, isObject, JsonError, parseStrict, type JsonObject, type JsonValue } from '../../formats/json.js';
import type { GateJudgment } from '../judge/judge.js';
import { normalizeToolName } from '../judge/names.js';
import { armDeadline } from './deadlines.js';
import { maybeShutdown } from './lifecycle.js';
import { parseScanned, plainRequest } from './scan.js';
import { INVALID_REQUEST, PARSE_ERROR, rpcError } from '../../formats/jsonrpc.js';
import { envelopeProblem, has, printable, validId } from './messages.js';
import { toClient, toServer } from './output.js';
import { CHUNK_LINES } from '../judge/native.js';
import type { GateState, Pending } from './gate.js';

export function clientLineTooLong(g: GateState): void {
  g.judge.event({ reason: 'protocol_client', rejected: 'client', code: 'line_too_long' });
  toClient(g, rpcError(null, PARSE_ERROR, 'parse error: line_too_long'));
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
  toClient(g, rpcError(id, code, code === PARSE_ERROR ? `parse error: ${what}` : `invalid request: ${what}`));
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
      const nj = g.native;
      if (nj !== null && fast.key !== undefined && fast.params !== null && fast.method === 'tools/call') {
        // A call the native judge certainly allows is relayed without its params being read here.
        const k = nj.judge(line, fast.params[0], fast.params[1]);
        if (k >= 0 && !g.pending.has(fast.key) && !g.held.has(fast.key))
          return relayAllowed(g, fast.id!, fast.key, k, raw);
      }
      // The envelope was checked natively; only params are built (the judge reads them).
      let params: JsonValue | undefined;
      try {
        params = fast.params === null ? undefined : parseScanned(line, fast.params[0], fast.params[1]);
      } catch {
        params = null; // cannot happen for a scanned line; the full path below decides
      }
      if (params !== null) {
        const v: JsonObject = { jsonrpc: '2.0', method: fast.method };
        if (params !== undefined) v.params = params;
        if (fast.id === undefined) return judgeNotification(g, v, fast.method, line, raw);
        v.id = fast.id;
        if (g.pending.has(fast.key!) || g.held.has(fast.key!))
          return refuseClient(g, v.id, INVALID_REQUEST, 'id_in_use', line, fast.method);
        return judgeRequest(g, v, fast.method, fast.key!, raw);
      }
    }
  }
  let v: JsonValue;
  try {
    v = parseStrict(line);
  } catch (e) {
    if (e instanceof JsonError) return refuseClient(g, null, PARSE_ERROR, e.code, line);
    throw e;
  }
  if (Array.isArray(v)) {
    if (v.length === 0) return refuseClient(g, null, INVALID_REQUEST, 'empty_batch', line);
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
  if (!isObject(v)) return refuseClient(g, null, INVALID_REQUEST, 'not_an_object', line);
  const idTrusted = has(v, 'id') && validId(v.id) ? (v.id as JsonValue) : null;
  const problem = envelopeProblem(v);
  if (problem)
    return refuseClient(
      g,
      idTrusted,
      INVALID_REQUEST,
      problem.startsWith('member') ? 'other_spelling' : 'bad_jsonrpc',
      line,
    );
  if (has(v, 'method')) {
    if (typeof v.method !== 'string') return refuseClient(g, idTrusted, INVALID_REQUEST, 'method_not_string', line);
    if (has(v, 'result') || has(v, 'error'))
      return refuseClient(g, idTrusted, INVALID_REQUEST, 'request_and_response', line);
    if (has(v, 'params') && !isObject(v.params) && !Array.isArray(v.params))
      return refuseClient(g, idTrusted, INVALID_REQUEST, 'bad_params', line);
    const method = v.method;
    if (!has(v, 'id')) return judgeNotification(g, v, method, line, raw);
    if (v.id === null) return refuseClient(g, null, INVALID_REQUEST, 'null_id', line, method);
    const key = idKey(v.id!);
    if (key === null) return refuseClient(g, null, INVALID_REQUEST, 'bad_id', line, method);
    if (g.pending.has(key) || g.held.has(key))
      return refuseClient(g, v.id!, INVALID_REQUEST, 'id_in_use', line, method);
    return judgeRequest(g, v, method, key, raw);
  }
  // A response to a server-to-client request.
  if (!has(v, 'id') || !validId(v.id)) return refuseClient(g, null, INVALID_REQUEST, 'response_without_id', line);
  if (has(v, 'result') === has(v, 'error'))
    return refuseClient(g, idTrusted, INVALID_REQUEST, 'not_exactly_one_of_result_error', line);
  if (has(v, 'error') && !isObject(v.error)) return refuseClient(g, idTrusted, INVALID_REQUEST, 'bad_error', line);
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

/** A request whose id is not in use: judged, then forwarded or answered with the denial. */
export function judgeRequest(
  g: GateState,
  v: JsonObject,
  method: string,
  key: string,
  raw: Buffer | null,
): void | Promise<void> {
  const j = g.judge.judge(method, v.params, false);
  if (j instanceof Promise)
    return j.then(
      (jj) => answerRequest(g, v, key, jj, raw),
      () => answerRequest(g, v, key, null, raw),
    );
  return answerRequest(g, v, key, j, raw);
}

function answerRequest(g: GateState, v: JsonObject, key: string, j: GateJudgment | null, raw: Buffer | null): void {
  const method = v.method as string;
  if (j === null) {
    // The judge failed (the service went away): fail closed.
    toClient(g, rpcError(v.id!, -32001, 'denied by leash: engine_error', { reason: 'engine_error' }));
    return;
  }
  if (j.action === 'ask') return holdRequest(g, v, key, j, raw);
  if (j.action === 'deny') {
    const data: JsonObject = { reason: j.reason };
    if (j.ref) data.ref = j.ref;
    toClient(g, rpcError(v.id!, j.code, j.message, data));
    return;
  }
  const timeoutMs = g.timeoutMs;
  const fm = normalizeToolName(method);
  const p: Pending = { id: v.id!, method: fm, deadline: deadlineFrom(g) };
  if (j.audit !== undefined) p.audit = j.audit;
  if (j.filter !== undefined) p.filter = j.filter;
  if (fm === 'tools/call' && isObject(v.params) && v.params.name === 'list_allowed_directories')
    p.dirsEpoch = g.model.epoch;
  if (g.observer && fm === 'tools/call' && isObject(v.params)) {
    p.name = typeof v.params.name === 'string' ? v.params.name : undefined;
    p.args = v.params.arguments;
  }
  g.pending.set(key, p);
  if (timeoutMs > 0 && g.deadlineTimer === null) armDeadline(g, timeoutMs);
  g.retired.delete(key);
  toServer(g, v, raw);
}

/** A tools/call the native judge allowed: its decision line, then relayed and waited for as answerRequest does. */
function relayAllowed(g: GateState, id: JsonValue, key: string, idx: number, raw: Buffer): void {
  g.native!.allowed(idx, raw);
  waitFor(g, id, key);
  toServer(g, null, raw);
}

/** An allowed tools/call about to be relayed: its id in use until the answer, and its deadline. */
function waitFor(g: GateState, id: JsonValue, key: string, deadline = deadlineFrom(g)): void {
  g.pending.set(key, { id, method: 'tools/call', deadline });
  if (g.timeoutMs > 0 && g.deadlineTimer === null) armDeadline(g, g.timeoutMs);
  g.retired.delete(key);
}

/** When the gate stops waiting for a request read now (performance.now() ms; Infinity with no timeout). */
function deadlineFrom(g: GateState): number {
  return g.timeoutMs > 0 ? performance.now() + g.timeoutMs : Infinity;
}

/**
 * A chunk from the client. The plain tools/calls in it that the native judge certainly allows are read in one native
 * call per run of them (NativeCallJudge.requests) and relayed as they came, each run in one piece, each call with its
 * decision line and its id waited for: what handleClientLine does with each, without two calls into the addon per
 * line. A run ends at any other line or an id in use: that line goes to the line reader, and the next run starts
 * after it while no line waits for its judgment. A line carried over from the last chunk is finished first.
 */
export function clientChunk(g: GateState, c: Buffer): void {
  const nj = g.native;
  if (nj === null || g.scanner === null) return g.clientLines.push(c);
  c = g.clientLines.finishLine(c);
  const lines = nj.lines;
  // The chunk's calls arrived together: one deadline for them all.
  const deadline = deadlineFrom(g);
  let at = 0;
  while (at < c.length && g.clientSeq.idle) {
    const n = nj.requests(c, at);
    let k = 0;
    for (; k < n; k++) {
      const id = lines[5 * k + 1]!;
      const key = `n${id}`;
      if (g.pending.has(key) || g.held.has(key)) break;
      g.clientSent++;
      nj.allowedAt(lines[5 * k + 2]!, c, lines[5 * k + 3]!, lines[5 * k + 4]!);
      waitFor(g, id, key, deadline);
    }
    if (k > 0) {
      const end = lines[5 * (k - 1)]!;
      toServer(g, null, c.subarray(at, end - 1));
      at = end;
    }
    if (k === CHUNK_LINES) continue;
    // Not one (or the chunk's last, partial line): read as any line.
    at = g.clientLines.pushOne(c, at);
  }
  if (at < c.length) g.clientLines.push(c.subarray(at));
}

/**
 * An asked call: held (its id in use, nothing sent to the server) while the gate goes on with the next
 * line; its outcome is answered like any judgment: an allow is relayed, a deny refused with its reason.
 */
function holdRequest(g: GateState, v: JsonObject, key: string, j: GateJudgment, raw: Buffer | null): void {
  const held = j.held;
  if (held === undefined) {
    // A judge that cannot ask (no approver) refuses: never relayed.
    toClient(g, rpcError(v.id!, -32001, 'denied by leash: approval_unavailable', { reason: 'approval_unavailable' }));
    return;
  }
  g.held.set(key, { id: v.id!, cancel: () => held.cancel() });
  const settle = (f: GateJudgment | null) => {
    // Cancelled by the client, or answered at the gate's end: nothing more to say.
    if (!g.held.delete(key) || g.finished) return;
    answerRequest(g, v, key, f !== null && f.action !== 'ask' ? f : null, raw);
    maybeShutdown(g);
  };
  held.outcome.then(settle, () => settle(null));
}

/** A notification: judged, then forwarded or (denied) logged and dropped; never answered. */
export function judgeNotification(
  g: GateState,
  v: JsonObject,
  method: string,
  line: Buffer,
  raw: Buffer | null,
): void | Promise<void> {
  const fm = normalizeToolName(method);
  if (fm === 'notifications/cancelled' && isObject(v.params) && has(v.params, 'requestId')) {
    const k = idKey(v.params.requestId!);
    const p = k ? g.pending.get(k) : undefined;
    const h = k ? g.held.get(k) : undefined;
    if (k && h) {
      // A held call the client gave up: the server never saw it, so it is not told; the hold ends.
      g.held.delete(k);
      h.cancel();
      return;
    }
    if (p && p.method === 'initialize') {
      // MCP does not let a client cancel initialize: not passed on, logged, and (a notification)
      // never answered.
      g.judge.event({
        reason: 'protocol_client',
        rejected: 'client',
        code: 'cancel_initialize',
        method,
        line: line.toString('utf8'),
      });
      return;
    }
  }
  const go = (j: GateJudgment | null) => {
    if (j === null || j.action === 'deny') return; // a denied notification is logged and dropped
    if (fm === 'notifications/cancelled' && isObject(v.params) && has(v.params, 'requestId')) {
      const k = idKey(v.params.requestId!);
      const p = k ? g.pending.get(k) : undefined;
      if (k && p) {
        g.pending.delete(k);
        g.retire(k);
      }
    }
    toServer(g, v, raw);
    maybeShutdown(g);
  };
  const j = g.judge.judge(method, v.params, true);
  if (j instanceof Promise) return j.then(go, () => go(null));
  go(j);
}
