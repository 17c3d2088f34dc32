/**
 * Per-request time-outs: one timer for every pending request, and the answer the client gets when
 * the server took a request and left it unanswered past --timeout.
 */
import { performance } from 'node:perf_hooks';
import { INTERNAL_ERROR, rpcError } from '../../formats/jsonrpc.js';
import { maybeShutdown, stalled } from './lifecycle.js';
import { toClient } from './output.js';
import type { GateState, Pending } from './gate.js';

// One timer for every pending request: all share the same timeout, so the oldest entry of
// `pending` (a Map keeps insertion order) always has the earliest deadline.
export function armDeadline(g: GateState, ms: number): void {
  g.deadlineTimer = setTimeout(expire, Math.max(1, Math.ceil(ms)), g);
}

function expire(g: GateState): void {
  g.deadlineTimer = null;
  if (g.finished) return;
  const now = performance.now();
  // A request is "unanswered" only if the server took it. When output to the server has been
  // stuck for most of the timeout, the server stopped reading: that is the stall, not a time-out.
  if (g.unflushed.length > 0 && now - g.unflushed[0]! >= g.timeoutMs / 2) return stalled(g);
  for (const [key, p] of g.pending) {
    if (p.deadline > now) {
      armDeadline(g, p.deadline - now);
      break;
    }
    timedOut(g, key, p);
  }
}

function timedOut(g: GateState, key: string, p: Pending): void {
  g.pending.delete(key);
  g.retire(key);
  g.timeouts++;
  g.failed = true;
  g.judge.event({ reason: 'server_timeout', method: p.method });
  if (p.audit) g.judge.answered?.(p.audit, { outcome: 'timeout', sha256: null, redacted: false });
  toClient(g, rpcError(p.id, INTERNAL_ERROR, 'server timed out'));
  maybeShutdown(g);
}
