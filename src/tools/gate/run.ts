/**
 * One `leash mcp` run, assembled: the server command checked the way the OS would run it, the
 * judge (the policy file's, with its decision log, audit and approver, or the service's over its
 * socket), the gate (./gate.ts) on this process's stdio, and the signals that wind it down. The
 * CLI (src/cli/mcp.ts) parses flags and calls runGate; `leash mcp learn` runs its session here too.
 */
import fs from 'node:fs';
import path from 'node:path';
import { LeashError } from '../../errors.js';
import { createDecisionLog, formatDecision, newRef, type DecisionWriter } from '../../log/decisions.js';
import { createJournal, findJournalSocket, teeDecisionsToJournal } from '../../log/journal.js';
import { loadNative } from '../../native.js';
import { openAuditTrail, type AuditRecord } from '../audit.js';
import { createLocalJudge, type GateJudge } from '../judge/judge.js';
import { loadGatePolicy } from '../judge/policy-file.js';
import { maskString } from '../judge/redact.js';
import { connectToolsJudge } from '../remote/socket.js';
import { askSources, noApprover, parseApprovalMode, ttyApprover, type Approve } from './approver.js';
import { createMcpGate, type GateObserver } from './gate.js';

/** Finds the server command the way the OS would, so a missing one is a clean exit 2, not a crash. */
export function resolveCommand(cmd: string, envPath = process.env.PATH ?? ''): string {
  const candidates = cmd.includes('/')
    ? [cmd]
    : envPath
        .split(':')
        .filter(Boolean)
        .map((d) => path.join(d, cmd));
  let why = 'not found on PATH';
  for (const c of candidates) {
    let st: fs.Stats;
    try {
      st = fs.statSync(c);
    } catch {
      if (cmd.includes('/')) why = 'not found';
      continue;
    }
    if (st.isDirectory()) {
      why = 'is a directory';
      continue;
    }
    try {
      fs.accessSync(c, fs.constants.X_OK);
    } catch {
      why = 'is not executable';
      continue;
    }
    // execvp would hand a file without #! to /bin/sh: refuse it instead of guessing.
    const head = Buffer.alloc(4);
    const fd = fs.openSync(c, 'r');
    try {
      fs.readSync(fd, head, 0, 4, 0);
    } finally {
      fs.closeSync(fd);
    }
    if (!(head[0] === 0x23 && head[1] === 0x21) && !head.equals(Buffer.from([0x7f, 0x45, 0x4c, 0x46]))) {
      why = 'is not a program the system will start (no #! line)';
      continue;
    }
    return c;
  }
  throw new LeashError('mcp_server_unrunnable', `cannot run the server ${JSON.stringify(cmd)}: ${why}`, {
    command: cmd,
  });
}

/**
 * A closed standard input or output means there is no client. Node reopens a closed stdio
 * descriptor on /dev/null at start-up, so /dev/null counts as closed too.
 */
export function requireStdio(): void {
  let devNull: bigint | null = null;
  try {
    devNull = fs.statSync('/dev/null', { bigint: true }).rdev;
  } catch {
    /* no /dev/null: nothing to compare */
  }
  for (const fd of [0, 1]) {
    let closed = false;
    try {
      const st = fs.fstatSync(fd, { bigint: true });
      closed = st.isCharacterDevice() && devNull !== null && st.rdev === devNull;
    } catch {
      closed = true;
    }
    if (closed)
      throw new LeashError(
        'mcp_no_client',
        `standard ${fd === 0 ? 'input' : 'output'} is closed: there is no client to talk to`,
        { fd },
      );
  }
}

/** The decision log of a gate run with --policy: a file, or stderr (stdout carries the protocol). */
function openDecisionLog(sink: string | null): DecisionWriter & { close(): Promise<void> } {
  if (sink === null || sink === 'stderr') {
    return {
      write(rec) {
        const ref = newRef();
        try {
          process.stderr.write(formatDecision(rec, ref));
        } catch {
          /* stderr closed */
        }
        return ref;
      },
      flush() {},
      close: async () => {},
    };
  }
  if (sink === 'stdout')
    throw new LeashError('log_sink_stdout', 'the decision log cannot go to stdout: it carries the MCP protocol');
  // Allowed calls' lines are written once per event-loop turn; blocks at once (docs/tools.md).
  return createDecisionLog({ sink, coalesceAllows: true });
}

/** The gate's decisions also go to the journal when there is one (blocks; allows are left out and counted). */
function withJournal<L extends DecisionWriter>(log: L): L {
  const socket = findJournalSocket('auto');
  if (socket === null) return log;
  const journal = createJournal({
    socket,
    send: (p, e) => loadNative().journalSend(p, e),
    identifier: 'leash-mcp',
  });
  return teeDecisionsToJournal(log, journal, 'mcp');
}

/** Who answers an ask in a run with --policy (./approver.ts): refuses to start a policy that asks nobody. */
function approverFor(file: string, mode: string | undefined, timeoutMs: () => number): Approve | undefined {
  const timeout = timeoutMs();
  const m = parseApprovalMode(mode);
  if (m === 'none') return undefined;
  if (m === 'tty') return ttyApprover({ timeoutMs: timeout, mask: maskString }).approve;
  const asks = askSources(file);
  if (asks.length) throw noApprover(file, asks);
  return undefined;
}

/** A gate run with --policy: the judgment is made here, against the file. */
export interface LocalPolicyOptions {
  file: string;
  /** --workspace (resolved by the caller), else tools.workspace. */
  workspace?: string;
  /** --log, else logging.decisions of the file, else stderr. */
  log?: string;
  /** --audit, else tools.audit. */
  audit?: string;
}

function localJudge(o: LocalPolicyOptions, approval: string | undefined, approvalTimeoutMs: () => number): GateJudge {
  const { policy, decisions } = loadGatePolicy(o.file, o.workspace === undefined ? {} : { workspace: o.workspace });
  const log = withJournal(openDecisionLog(o.log ?? decisions));
  const auditFile = o.audit ?? policy.audit;
  const audit = auditFile == null ? null : openAuditTrail<AuditRecord>(path.resolve(auditFile), 'held');
  const approve = approverFor(o.file, approval, approvalTimeoutMs);
  return createLocalJudge({ policy, log, uid: process.getuid?.() ?? -1, mask: maskString, audit, approve });
}

async function serviceJudge(socket: string): Promise<GateJudge> {
  try {
    return await connectToolsJudge(socket);
  } catch (e) {
    throw new LeashError(
      'mcp_service_unreachable',
      `cannot reach the leash service at ${socket} (${(e as NodeJS.ErrnoException).code ?? (e as Error).message}); use --policy FILE to run without it`,
      { socket },
    );
  }
}

/** One gate session on this process's stdio: the gate, and the signals that end it. */
export async function runGateSession(o: {
  judge: GateJudge;
  /** The server command, its program already resolved (resolveCommand). */
  command: string[];
  timeoutMs: number;
  graceMs: number;
  observer?: GateObserver;
}): Promise<number> {
  const gate = createMcpGate({
    judge: o.judge,
    command: o.command,
    timeoutMs: o.timeoutMs,
    graceMs: o.graceMs,
    input: process.stdin,
    output: process.stdout,
    errout: process.stderr,
    observer: o.observer,
  });
  const handlers: [NodeJS.Signals, () => void][] = [
    ['SIGTERM', () => gate.terminate(143)],
    ['SIGHUP', () => gate.terminate(129)],
    ['SIGINT', () => gate.interrupt()],
  ];
  // Node resets inherited signal dispositions at start-up, so a signal nohup ignored is caught
  // here too (docs/tools.md says so).
  for (const [sig, h] of handlers) process.on(sig, h);
  try {
    return await gate.done;
  } finally {
    for (const [sig, h] of handlers) process.off(sig, h);
  }
}

export interface GateRunOptions {
  /** The server command as given (its program is looked up on PATH). */
  server: string[];
  timeoutMs: number;
  graceMs: number;
  /** With --policy: judge here. Without: ask the service at `socket`. */
  policy?: LocalPolicyOptions;
  socket: string;
  /** --approval (with --policy only): tty, none or unset. */
  approval?: string;
  /** --approval-timeout, read only once the policy is loaded (so the policy's problems are said first). */
  approvalTimeoutMs: () => number;
}

/** `leash mcp`: checks, the judge, then the session; resolves with the exit status. */
export async function runGate(o: GateRunOptions): Promise<number> {
  requireStdio();
  if (o.policy === undefined && o.approval !== undefined)
    throw new LeashError('usage', '--approval goes with --policy (the service has its own approvers)', {
      option: '--approval',
    });
  const judge =
    o.policy !== undefined ? localJudge(o.policy, o.approval, o.approvalTimeoutMs) : await serviceJudge(o.socket);
  const program = resolveCommand(o.server[0]!);
  return runGateSession({
    judge,
    command: [program, ...o.server.slice(1)],
    timeoutMs: o.timeoutMs,
    graceMs: o.graceMs,
  });
}
