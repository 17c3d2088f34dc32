/**
 * `leash mcp`: the tools surface as a gate on the wire.
 *   leash mcp [--policy FILE] [--timeout MS] [--grace MS] -- SERVER...
 *   leash mcp learn [--script calls.json] --out FILE -- SERVER...
 *   leash mcp check NAME [--inputs JSON] --policy FILE
 * Exit codes: 0 clean session, 2 unusable input (nothing started), 3 the server failed,
 * 143/129 stopped by SIGTERM/SIGHUP after winding down.
 */
import fs from 'node:fs';
import path from 'node:path';
import type { Command } from 'commander';
import { compilePolicy, decide, maskSecrets } from '../engine/index.js';
import { isLeashError, LeashError } from '../errors.js';
import { createMcpGate, type GateObserver } from '../tools/gate/gate.js';
import { createLocalJudge, type GateJudge } from '../tools/judge/judge.js';
import { JsonError, parseStrict, toPlain } from '../formats/json.js';
import { Learner, LearnError, learnScripted, loadScript, renderProfile, writeAtomic } from '../tools/learn/learn.js';
import {
  checkTool,
  compileGatePolicy,
  GatePolicyError,
  type CompiledGatePolicy,
  type CompileOptions,
  type ToolsEngine,
} from '../tools/judge/policy.js';
import { openAudit, readAudit, summarise, type AuditRecord } from '../tools/audit.js';
import { loadGatePolicyFile } from '../tools/judge/policy-file.js';
import { askSources, noApprover, parseApprovalMode, ttyApprover, type Approve } from './mcp-approval.js';
import { connectToolsJudge, DEFAULT_TOOLS_SOCKET } from '../tools/remote/socket.js';
import { createDecisionLog, formatDecision, newRef, type DecisionWriter } from '../log/decisions.js';
import { createJournal, findJournalSocket, teeDecisionsToJournal } from '../log/journal.js';
import { loadNative } from '../native.js';

/** The engine as the gate uses it. */
export const toolsEngine: ToolsEngine = { compilePolicy, decide: decide as ToolsEngine['decide'] };

/** Secret masking for strings the gate logs outside `inputs` (names, refused lines). */
export const maskString = (s: string): string => maskSecrets(s);

const say = (line: string) => {
  try {
    process.stderr.write(`leash mcp: ${line}\n`);
  } catch {
    /* stderr closed */
  }
};

/** Milliseconds: a finite number, 0 or more (0 = wait for ever / stop at once). */
function parseMs(name: string, v: string): number {
  if (!/^\d+(\.\d+)?$/.test(v))
    throw new LeashError('usage', `${name} must be a finite number of milliseconds, 0 or more: ${v}`, { option: name });
  return Number(v);
}

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
function requireStdio(): void {
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
function openLog(sink: string | null): DecisionWriter & { close(): Promise<void> } {
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

export function loadPolicy(
  file: string,
  opts: CompileOptions = {},
): { policy: CompiledGatePolicy; decisions: string | null } {
  try {
    const p = loadGatePolicyFile(file);
    return { policy: compileGatePolicy(p.tools, p.failMode, toolsEngine, opts), decisions: p.decisions };
  } catch (e) {
    if (e instanceof GatePolicyError)
      throw new LeashError('config_invalid', `policy refused (${file})`, {
        file,
        issues: e.problems.map((m) => {
          // A problem reads `where: what`; the lines print `  where: what` (docs/cli.md).
          const at = /^([^:\s][^:]*): ([\s\S]*)$/.exec(m);
          return at ? { path: at[1]!, message: at[2]! } : { path: file, message: m };
        }),
      });
    throw e;
  }
}

/** The approver of a gate run with --policy (src/cli/mcp-approval.ts): refuses to start a policy that asks nobody. */
function approverFor(file: string, mode: string | undefined, timeoutMs: number): Approve | undefined {
  const m = parseApprovalMode(mode);
  if (m === 'none') return undefined;
  if (m === 'tty') return ttyApprover({ timeoutMs, mask: maskString }).approve;
  const asks = askSources(file);
  if (asks.length) throw noApprover(file, asks);
  return undefined;
}

async function flushAndExit(code: number): Promise<never> {
  await new Promise<void>((r) => {
    if (process.stdout.writableLength === 0) return r();
    process.stdout.once('drain', () => r());
    process.stdout.once('error', () => r());
    setTimeout(r, 2000).unref();
  });
  process.exit(code);
}

interface RunOptions {
  judge: GateJudge;
  server: string[];
  timeoutMs: number;
  graceMs: number;
  observer?: GateObserver;
}

async function runSession(o: RunOptions): Promise<number> {
  const resolved = resolveCommand(o.server[0]!);
  const gate = createMcpGate({
    judge: o.judge,
    command: [resolved, ...o.server.slice(1)],
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

function serverArgs(server: string[] | undefined): string[] {
  if (!server || server.length === 0)
    throw new LeashError('usage', 'no server command: leash mcp [options] -- SERVER [ARGS...]');
  return server;
}

async function guarded(fn: () => Promise<number>): Promise<never> {
  let code: number;
  try {
    code = await fn();
  } catch (e) {
    if (isLeashError(e)) {
      for (const l of e.lines()) process.stderr.write(`${l}\n`);
      code = e.exitCode;
    } else throw e;
  }
  return flushAndExit(code);
}

interface GateCliOptions {
  policy?: string;
  socket: string;
  timeout: string;
  grace: string;
  log?: string;
  audit?: string;
  workspace?: string;
  approval?: string;
  approvalTimeout: string;
}

/** Registers `leash mcp` (and `learn`, `check`) on the program. */
export function register(program: Command): void {
  const mcp = program
    .command('mcp')
    .description('run an MCP stdio server behind the tools gate: every message parsed strictly, tool calls judged')
    .usage('[--policy FILE] [--timeout MS] [--grace MS] -- SERVER [ARGS...]')
    .option(
      '--policy <file>',
      'enforce this policy file (YAML/JSON with a tools section) instead of asking the service',
    )
    .option('--socket <path>', 'the service tools socket (without --policy)', DEFAULT_TOOLS_SOCKET)
    .option('--timeout <ms>', 'per request, and for a server that stops reading its input (0 = wait for ever)', '30000')
    .option('--grace <ms>', 'time the server gets to exit once its input is closed (0 = stop it at once)', '5000')
    .option(
      '--log <sink>',
      'decision log with --policy: an absolute file path or stderr (default: logging.decisions of the policy file, else stderr)',
    )
    .option('--audit <file>', 'with --policy: append one audit line per tool call here (default: tools.audit)')
    .option(
      '--workspace <dir>',
      'with --policy: the workspace of the operation rules (default: tools.workspace, else .)',
    )
    .option('--approval <who>', 'with --policy: who answers an ask, tty (this terminal) or none (refused)')
    .option('--approval-timeout <ms>', 'with --approval tty: how long a question waits for its answer', '60000')
    .argument('[server...]', 'the server command, after --')
    .action(async (server: string[] | undefined, opts: GateCliOptions) => {
      await guarded(async () => {
        const cmd = serverArgs(server);
        const timeoutMs = parseMs('--timeout', opts.timeout);
        const graceMs = parseMs('--grace', opts.grace);
        requireStdio();
        let judge: GateJudge;
        if (opts.policy === undefined && opts.approval !== undefined)
          throw new LeashError('usage', '--approval goes with --policy (the service has its own approvers)', {
            option: '--approval',
          });
        if (opts.policy !== undefined) {
          const { policy, decisions } = loadPolicy(
            opts.policy,
            opts.workspace === undefined ? {} : { workspace: path.resolve(opts.workspace) },
          );
          const log = withJournal(openLog(opts.log ?? decisions));
          const auditFile = opts.audit ?? policy.audit;
          const audit = auditFile == null ? null : openAudit(path.resolve(auditFile));
          const approval = approverFor(opts.policy, opts.approval, parseMs('--approval-timeout', opts.approvalTimeout));
          judge = createLocalJudge({
            policy,
            log,
            uid: process.getuid?.() ?? -1,
            mask: maskString,
            audit,
            approve: approval,
          });
        } else {
          try {
            judge = await connectToolsJudge(opts.socket);
          } catch (e) {
            throw new LeashError(
              'mcp_service_unreachable',
              `cannot reach the leash service at ${opts.socket} (${(e as NodeJS.ErrnoException).code ?? (e as Error).message}); use --policy FILE to run without it`,
              { socket: opts.socket },
            );
          }
        }
        resolveCommand(cmd[0]!);
        return runSession({ judge, server: cmd, timeoutMs, graceMs });
      });
    });

  // --timeout and --grace belong to `mcp` itself (commander hands them to the parent wherever they
  // are written), so the subcommands read them with optsWithGlobals().
  mcp
    .command('learn')
    .description('write the tightest-fit tools profile from calls the server answered successfully')
    .usage('[--script calls.json] --out FILE [--timeout MS] [--grace MS] -- SERVER [ARGS...]')
    .option('--script <file>', 'drive these calls ([{"tool","arguments"}]) instead of relaying a live client')
    .requiredOption(
      '--out <file>',
      'where the profile is written (atomically; nothing is written if the session fails)',
    )
    .argument('[server...]', 'the server command, after --')
    .action(async (server: string[] | undefined, _o: unknown, cmd: Command) => {
      const opts = cmd.optsWithGlobals<{ script?: string; out: string; timeout: string; grace: string }>();
      await guarded(() => runLearn(server, opts));
    });

  mcp
    .command('check')
    .description('judge one tool call against a policy file (name, argument rules, inspection); exit 1 when blocked')
    .usage('NAME [--inputs JSON] --policy FILE')
    .argument('<name>', 'the tool name')
    .option('--inputs <json>', 'the call arguments as JSON', '{}')
    .action(async (name: string, _o: unknown, cmd: Command) => {
      const opts = cmd.optsWithGlobals<{ inputs: string; policy?: string }>();
      await guarded(async () => {
        if (opts.policy === undefined) throw new LeashError('usage', 'leash mcp check needs --policy FILE');
        const { policy } = loadPolicy(opts.policy);
        const r = runCheckTool(name, opts.inputs, policy);
        process.stdout.write(`${JSON.stringify(r.verdict)}\n`);
        return r.code;
      });
    });

  registerAudit(mcp);
}

/** `leash mcp audit summary|tail`: reads an audit file (tools.audit / --audit) without adding to it. */
function registerAudit(mcp: Command): void {
  const audit = mcp
    .command('audit')
    .description('read a tools audit file (one line per tool call, no raw arguments or results)');
  const fileOf = (cmd: Command): string => {
    const o = cmd.optsWithGlobals<{ audit?: string; policy?: string }>();
    if (o.audit !== undefined) return path.resolve(o.audit);
    if (o.policy !== undefined) {
      const f = loadPolicy(o.policy).policy.audit;
      if (f !== null) return f;
    }
    throw new LeashError('usage', 'which audit file? --audit FILE (or --policy FILE with tools.audit)');
  };
  audit
    .command('summary')
    .description('decisions, operations, outcomes, reasons and tools, counted')
    .option('--json', 'one JSON object')
    .action(async (_o: unknown, cmd: Command) => {
      await guarded(async () => {
        const { records, bad } = readAudit(fileOf(cmd));
        const s = summarise(records, bad);
        if (cmd.opts<{ json?: boolean }>().json) process.stdout.write(`${JSON.stringify(s)}\n`);
        else {
          const line = (k: string, o: Record<string, number>) =>
            `${k.padEnd(11)}${Object.entries(o)
              .sort((a, b) => b[1] - a[1])
              .map(([n, c]) => `${n} ${c}`)
              .join(', ')}\n`;
          process.stdout.write(
            `records    ${s.records} (${s.runs} runs, ${s.sessions} sessions, ${s.redacted} redacted, ${s.bad_lines} unreadable lines)\n` +
              line('decisions', s.decisions) +
              line('operations', s.operations) +
              line('outcomes', s.outcomes) +
              line('reasons', s.reasons) +
              line('tools', s.tools),
          );
        }
        return 0;
      });
    });
  audit
    .command('tail')
    .description('the newest records')
    .option('--lines <n>', 'how many', '20')
    .option('--json', 'JSON lines')
    .action(async (_o: unknown, cmd: Command) => {
      await guarded(async () => {
        const o = cmd.opts<{ lines: string; json?: boolean }>();
        if (!/^\d+$/.test(o.lines)) throw new LeashError('usage', `--lines must be a whole number: ${o.lines}`);
        const { records } = readAudit(fileOf(cmd));
        const last = records.slice(-Number(o.lines));
        const fmt = (r: AuditRecord) =>
          `${r.ts} ${r.decision.padEnd(5)} ${(r.operation ?? '-').padEnd(11)} ${r.server ? `${r.server}/` : ''}${r.tool} ${r.reason}${r.rule ? ` (${r.rule})` : ''}${r.resources.length ? ` ${r.resources.join(' ')}` : ''}${r.hosts.length ? ` ${r.hosts.join(' ')}` : ''} ${r.outcome ?? r.dispatch}${r.result_sha256 ? ` sha256:${r.result_sha256.slice(0, 12)}` : ''}`;
        for (const r of last) process.stdout.write(`${o.json ? JSON.stringify(r) : fmt(r)}\n`);
        return 0;
      });
    });
}

/**
 * `check tool NAME --inputs JSON` as a function the `check` command can call: the verdict and the
 * exit code (0 allow, 1 block). Inputs that are not strict JSON throw LeashError subject_invalid.
 */
export function runCheckTool(
  name: string,
  inputsJson: string,
  policy: CompiledGatePolicy,
): { verdict: Record<string, unknown>; code: number } {
  let inputs;
  try {
    inputs = parseStrict(Buffer.from(inputsJson, 'utf8'), { fileWhitespace: true });
  } catch (e) {
    if (e instanceof JsonError)
      throw new LeashError('subject_invalid', `--inputs is not strict JSON: ${e.code}`, { code: e.code });
    throw e;
  }
  const v = checkTool(name, inputs, policy);
  const verdict: Record<string, unknown> = { action: v.action, reason: v.reason, rule: v.rule };
  if (v.at) verdict.at = v.at;
  if (v.findings?.length) verdict.findings = v.findings;
  return { verdict, code: v.action === 'allow' ? 0 : 1 };
}

async function runLearn(
  server: string[] | undefined,
  opts: { script?: string; out: string; timeout: string; grace: string },
): Promise<number> {
  const cmd = serverArgs(server);
  const timeoutMs = parseMs('--timeout', opts.timeout);
  const graceMs = parseMs('--grace', opts.grace);
  const out = path.resolve(opts.out);
  try {
    fs.mkdirSync(path.dirname(out), { recursive: true });
  } catch (e) {
    throw new LeashError('usage', `cannot create the directory of --out: ${(e as NodeJS.ErrnoException).code}`, {
      option: '--out',
    });
  }
  if (fs.existsSync(out) && fs.statSync(out).isDirectory())
    throw new LeashError('usage', '--out is a directory', { option: '--out' });
  const resolved = resolveCommand(cmd[0]!);
  const command = [resolved, ...cmd.slice(1)];
  let learner: Learner;
  if (opts.script !== undefined) {
    let calls;
    try {
      calls = loadScript(opts.script);
    } catch (e) {
      throw new LeashError('usage', `bad --script: ${e instanceof JsonError ? e.code : (e as Error).message}`, {
        option: '--script',
      });
    }
    try {
      learner = await learnScripted({ command, calls, timeoutMs, graceMs, errout: process.stderr });
    } catch (e) {
      if (!(e instanceof LearnError)) throw e;
      const partial = (e as { partial?: Learner }).partial;
      say(`learn failed: ${e.message}; ${opts.out} was not written`);
      if (partial) process.stdout.write(renderProfile(partial.build().profile));
      return 2;
    }
  } else {
    requireStdio();
    learner = new Learner();
    const l = learner;
    const allowAll: GateJudge = {
      hideDenied: false,
      judge: (method) => ({ action: 'allow', policed: false, method }),
      hidden: (names) => names.map(() => false),
      event: () => undefined,
    };
    const code = await runSession({
      judge: allowAll,
      server: command,
      timeoutMs,
      graceMs,
      observer: {
        onCall: (name, args, ok) => l.call(name, args, ok),
        onToolsList: (names) => l.toolsListed(names),
        onInitialize: (r) => {
          const v = toPlain(r) as { protocolVersion?: unknown };
          if (typeof v?.protocolVersion === 'string') l.revision = v.protocolVersion;
        },
      },
    });
    if (code === 3 || code === 2) {
      say(`learn failed: the session ended with status ${code}; ${opts.out} was not written`);
      process.stderr.write(renderProfile(learner.build().profile));
      return 2;
    }
  }
  const built = learner.build();
  for (const l of built.leftOut) say(`left out ${l}`);
  const text = renderProfile(built.profile);
  try {
    writeAtomic(out, text);
  } catch (e) {
    say(`cannot write ${opts.out} (${(e as NodeJS.ErrnoException).code}); the profile follows on stdout`);
    process.stdout.write(text);
  }
  say(built.summary);
  return 0;
}
