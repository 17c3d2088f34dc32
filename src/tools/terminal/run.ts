import type { DecisionWriter } from '../../log/decisions.js';
import { randomUUID } from 'node:crypto';
import type { AuditTrail, TerminalAuditRecord } from '../audit.js';
import { execute } from './executor.js';
import { resolveCwd } from './jail.js';
import { parseCommandLine } from './parse.js';
import { judge } from './verdict.js';
import { pathDirs, resolveBinary } from './resolve.js';
import { result, type CommandResult, type DeciderFactory, type PolicySource, type Redactor } from './types.js';

export interface RunDeps {
  policy: PolicySource;
  decider: DeciderFactory;
  /** Real path of the jail root. */
  jail: string;
  /** PATH used both to resolve argv[0] and as the child's PATH. */
  searchPath: string;
  /** The child's LANG. */
  lang: string;
  timeoutMs: number;
  maxOutputBytes: number;
  redact: Redactor;
  /** The durable trail: a command runs only once its attempt record is on disk. */
  audit: AuditTrail<TerminalAuditRecord>;
  /** Run even when the attempt record cannot be written (the operator chose fail-open). */
  auditFailOpen: boolean;
  decisions: DecisionWriter | null;
  uid: number;
  /** Process groups of commands still running (see ExecRequest.live). */
  live?: Set<number>;
  /** Reports operational trouble (stderr); never reaches the client. */
  warn: (msg: string) => void;
}

/**
 * run_command: parse, resolve, judge, check the cwd, write the attempt record, run, write the
 * outcome. Each step that refuses returns its own code; nothing runs unless every step said yes.
 */
export async function runCommand(command: string, cwd: string | undefined, deps: RunDeps): Promise<CommandResult> {
  const id = randomUUID();
  const redactedCommand = deps.redact(command);
  const base = { id, uid: deps.uid, tool: 'run_command' as const, command: redactedCommand, cwd: cwd ?? null };

  const audited = async (res: CommandResult, extra: Record<string, unknown>): Promise<CommandResult> => {
    // A refusal stands whether or not it could be recorded; the failure is reported to the operator.
    try {
      await deps.audit.write({ ts: now(), ...base, event: 'attempt', decision: 'block', ...extra });
      await deps.audit.write({ ts: now(), ...base, event: 'outcome', code: res.code, exit_code: null, duration_ms: 0 });
    } catch (e) {
      deps.warn(`audit: could not record refused call ${id}: ${(e as Error).message}`);
    }
    return res;
  };

  const parsed = parseCommandLine(command);
  if (!parsed.ok) {
    const ref = logDecision(deps, 'block', 'parse_error', { command: redactedCommand }, null);
    return audited(result('PARSE_ERROR', parsed.reason), { reason: 'parse_error', ref });
  }
  const argv = parsed.argv;
  const redactedArgv = argv.map(deps.redact);

  const where = resolveCwd(deps.jail, cwd);
  const resolved = resolveBinary(argv[0]!, { searchPath: deps.searchPath, cwd: where.ok ? where.dir : deps.jail });
  const policy = await deps.policy();
  const j = judge(argv, resolved, policy, deps.decider(policy), pathDirs(deps.searchPath));
  const subject = { binary: j.binary, argv: redactedArgv };
  const ref = logDecision(
    deps,
    j.wouldBlock ? 'would_block' : j.allowed ? 'allow' : 'block',
    j.reason,
    subject,
    j.rule,
  );
  const verdictFields = { argv: redactedArgv, binary: j.binary, reason: j.reason, rule: j.rule, ref };

  if (!j.allowed) return audited(result('POLICY_DENIED', j.policyReason), verdictFields);
  if (!where.ok) return audited(result('CWD_ESCAPE', where.reason), { ...verdictFields, reason: 'cwd_escape' });

  try {
    await deps.audit.write({
      ts: now(),
      ...base,
      ...verdictFields,
      cwd: where.dir,
      event: 'attempt',
      decision: 'allow',
    });
  } catch (e) {
    if (!deps.auditFailOpen) {
      deps.warn(`audit: attempt record not written, command not run (fail closed): ${(e as Error).message}`);
      return result('AUDIT_UNAVAILABLE', `${j.policyReason}; not run: the audit record could not be written`);
    }
    deps.warn(`audit: attempt record not written, running anyway (--audit-fail-open): ${(e as Error).message}`);
  }

  let res: CommandResult;
  let outcome: Awaited<ReturnType<typeof execute>> | null = null;
  if (resolved.error !== null || resolved.real === null) {
    res = result('EXEC_ERROR', `${j.policyReason}; could not run: ${resolved.error ?? 'not found'}`);
  } else {
    outcome = await execute({
      file: resolved.real,
      argv,
      cwd: where.dir,
      env: { PATH: deps.searchPath, HOME: deps.jail, LANG: deps.lang },
      timeoutMs: deps.timeoutMs,
      maxOutputBytes: deps.maxOutputBytes,
      redact: deps.redact,
      live: deps.live,
    });
    res = classify(outcome, j.policyReason, deps.timeoutMs);
  }

  try {
    await deps.audit.write({
      ts: now(),
      ...base,
      event: 'outcome',
      code: res.code,
      exit_code: res.exit_code,
      duration_ms: res.duration_ms,
      stdout_bytes: outcome?.stdoutBytes ?? 0,
      stderr_bytes: outcome?.stderrBytes ?? 0,
    });
  } catch (e) {
    deps.warn(`audit: outcome record of ${id} not written: ${(e as Error).message}`);
  }
  return res;
}

const now = (): string => new Date().toISOString();

function classify(o: Awaited<ReturnType<typeof execute>>, reason: string, timeoutMs: number): CommandResult {
  const extra = { stdout: o.stdout, stderr: o.stderr, exit_code: o.exit_code, duration_ms: o.duration_ms };
  if (o.spawnError) {
    // EPERM here is typically the kernel's commands surface (the watcher) refusing the exec.
    return result('EXEC_ERROR', `${reason}; could not run: ${o.spawnError.code}`, { duration_ms: o.duration_ms });
  }
  if (o.timedOut) return result('TIMEOUT', `${reason}; killed after ${timeoutMs} ms`, extra);
  if (o.truncated) return result('OUTPUT_TRUNCATED', reason, extra);
  return result('OK', reason, extra);
}

function logDecision(
  deps: RunDeps,
  action: 'allow' | 'block' | 'would_block',
  reason: string,
  subject: unknown,
  rule: string | null,
): string | null {
  if (!deps.decisions) return null;
  try {
    return deps.decisions.write({ uid: deps.uid, surface: 'commands', action, reason, subject, rule });
  } catch (e) {
    deps.warn(`decision log: ${(e as Error).message}`);
    return null;
  }
}
