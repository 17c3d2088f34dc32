/**
 * How a gate session ends: the server's and the client's stream events, the wind-down when the
 * client leaves (flush, EOF to the server, --grace, SIGTERM, SIGKILL), a failing server (stall,
 * exit mid-session), signals to the gate, and the exit status `done` resolves with.
 */
import { INTERNAL_ERROR, rpcError } from '../../formats/jsonrpc.js';
import { flushClient, flushServer, toClient } from './output.js';
import type { GateState } from './gate.js';

export function failPending(g: GateState, message: string, reason: 'server_closed' | 'server_stalled'): void {
  for (const [k, p] of g.pending) {
    g.pending.delete(k);
    g.judge.event({ reason, method: p.method });
    if (p.audit) g.judge.answered?.(p.audit, { outcome: 'closed', sha256: null, redacted: false });
    toClient(g, rpcError(p.id, INTERNAL_ERROR, message));
  }
}

export function stalled(g: GateState): void {
  if (g.finished) return;
  g.failed = true;
  g.failReason = `the server stopped reading its input for ${g.timeoutMs} ms`;
  failPending(g, 'server stopped reading its input', 'server_stalled');
  killServer(g, 'SIGKILL');
  finish(g, 3);
}

export function killServer(g: GateState, sig: NodeJS.Signals): void {
  if (!g.serverExited && g.child.pid !== undefined) {
    try {
      g.child.kill(sig);
    } catch {
      /* already gone */
    }
  }
}

export function maybeShutdownSoon(g: GateState): void {
  queueMicrotask(() => maybeShutdown(g));
}

export function maybeShutdown(g: GateState): void {
  if (g.clientEnded && !g.shuttingDown && g.pending.size === 0 && g.held.size === 0 && g.clientSeq.idle) shutdown(g);
}

function shutdown(g: GateState): void {
  if (g.shuttingDown) return;
  g.shuttingDown = true;
  // What is queued is written first; then the server sees EOF, as the stdio transport asks.
  flushServer(g);
  if (!g.sin.destroyed) g.sin.end();
  if (g.serverExited) return checkFinished(g);
  const { graceMs } = g.o;
  const stop = () => {
    g.termTimer = null;
    if (g.serverExited) return;
    if (graceMs > 0) g.say(`the server did not exit within ${graceMs} ms of its input closing; stopping it`);
    killServer(g, 'SIGTERM');
    g.killTimer = setTimeout(() => {
      if (!g.serverExited) {
        g.say('the server ignored SIGTERM; killing it');
        killServer(g, 'SIGKILL');
      }
    }, g.o.killAfterMs ?? 5000);
  };
  if (graceMs > 0) g.termTimer = setTimeout(stop, graceMs);
  else stop();
}

function checkFinished(g: GateState): void {
  if (!g.serverExited || !g.serverOutEnded) return;
  if (g.shuttingDown) {
    failPending(g, 'server closed', 'server_closed');
    finish(g, g.signalCode ?? (g.failed ? 3 : 0));
    return;
  }
  // The server went away while the session was live.
  const hadPending = g.pending.size > 0;
  failPending(g, 'server closed', 'server_closed');
  if (g.clientSent > 0 || hadPending) {
    g.failed = true;
    g.failReason = 'the server exited while the client was still talking to it';
    finish(g, 3);
  } else finish(g, g.signalCode ?? 0);
}

function finish(g: GateState, code: number): void {
  if (g.finished) return;
  g.finished = true;
  if (g.deadlineTimer) clearTimeout(g.deadlineTimer);
  if (g.stallTimer) clearTimeout(g.stallTimer);
  if (g.termTimer) clearTimeout(g.termTimer);
  if (g.killTimer) clearTimeout(g.killTimer);
  g.o.input.removeListener('data', g.onInput);
  g.o.input.pause();
  // Calls still held for a human: the service is told they are gone, the client that they are refused.
  for (const [k, h] of g.held) {
    g.held.delete(k);
    h.cancel();
    toClient(g, rpcError(h.id, -32001, 'denied by leash: approval_cancelled', { reason: 'approval_cancelled' }));
  }
  if (g.timeouts > 0)
    g.say(`server did not answer ${g.timeouts} request${g.timeouts === 1 ? '' : 's'} within ${g.timeoutMs} ms`);
  if (code === 3 && g.failReason) g.say(g.failReason);
  if (code === 3 || code === 2) killServer(g, 'SIGKILL');
  flushClient(g);
  g.judge.close?.();
  g.resolveDone(code);
}

/** Once the server's lines are all handled, see whether the session is over. */
function whenServerIdle(g: GateState): void {
  if (g.serverSeq.idle) checkFinished(g);
  else g.serverSeq.onIdle = () => checkFinished(g);
}

// ---- stream events (attached by createMcpGate) ----
export function onSpawnError(g: GateState, e: NodeJS.ErrnoException): void {
  if (g.child.pid === undefined) {
    g.spawnFailed = true;
    g.say(`cannot start the server ${JSON.stringify(g.o.command[0])}: ${e.code ?? e.message}`);
    finish(g, 2);
  }
}

export function onOutputError(g: GateState): void {
  // Our reader went away (| head): nobody to answer; end quietly.
  g.outClosed = true;
  killServer(g, 'SIGKILL');
  finish(g, 0);
}

export function onServerExit(g: GateState): void {
  g.serverExited = true;
  if (g.stallTimer) clearTimeout(g.stallTimer);
  // Give stdout a moment to deliver what the server wrote before it exited (a grandchild holding
  // the pipe open would otherwise keep us waiting for ever).
  setTimeout(() => {
    if (!g.serverOutEnded) {
      g.serverOutEnded = true;
      g.serverLines.end();
    }
    whenServerIdle(g);
  }, 200).unref();
  if (g.serverOutEnded) whenServerIdle(g);
}

export function onServerOutEnd(g: GateState): void {
  g.serverLines.end();
  g.serverOutEnded = true;
  if (g.serverExited) whenServerIdle(g);
}

export function onClientEnd(g: GateState): void {
  g.clientLines.end();
  g.clientEnded = true;
  if (g.clientSeq.idle) maybeShutdown(g);
  else g.clientSeq.onIdle = () => maybeShutdown(g);
}

export function onClientError(g: GateState): void {
  g.clientEnded = true;
  maybeShutdown(g);
}

// ---- signals ----
/** SIGTERM/SIGHUP: wind down like a leaving client, then exit 128+n; a second call kills at once. */
export function terminate(g: GateState, code: number): void {
  if (g.finished || g.spawnFailed) return;
  if (g.signalCode !== null) {
    // A second signal does not wait.
    killServer(g, 'SIGKILL');
    finish(g, g.signalCode);
    return;
  }
  g.signalCode = code;
  g.clientEnded = true;
  g.o.input.removeListener('data', g.onInput);
  g.o.input.pause();
  if (g.shuttingDown) {
    // Already waiting out --grace: the signal ends the wait.
    if (g.termTimer) {
      clearTimeout(g.termTimer);
      g.termTimer = null;
    }
    killServer(g, 'SIGTERM');
    return;
  }
  shutdown(g);
}

/** SIGINT: stop the server at once; exit 0. */
export function interrupt(g: GateState): void {
  if (g.finished) return;
  killServer(g, 'SIGKILL');
  g.signalCode = 0;
  g.shuttingDown = true;
  finish(g, 0);
}
