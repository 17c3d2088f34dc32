/**
 * The hand-off to the judge: a client request or notification with a valid envelope is judged,
 * then forwarded to the server (and, for a request, waited for) or answered with the denial.
 */
import { performance } from 'node:perf_hooks';
import type { GateJudgment } from '../judge/judge.js';
import { idKey, isObject, type JsonObject } from '../../formats/json.js';
import { normalizeToolName } from '../judge/names.js';
import { armDeadline } from './deadlines.js';
import { maybeShutdown } from './lifecycle.js';
import { has, rpcError } from './messages.js';
import { toClient, toServer } from './output.js';
import type { GateState, Pending } from './state.js';

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
  const p: Pending = { id: v.id!, method: fm, deadline: timeoutMs > 0 ? performance.now() + timeoutMs : Infinity };
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
