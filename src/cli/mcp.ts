/**
 * `leash mcp`: the tools surface as a gate on the wire.
 *   leash mcp [--policy FILE] [--timeout MS] [--grace MS] -- SERVER...
 *   leash mcp learn [--script calls.json] --out FILE -- SERVER...
 *   leash mcp check NAME [--inputs JSON] --policy FILE
 * Exit codes: 0 clean session, 2 unusable input (nothing started), 3 the server failed,
 * 143/129 stopped by SIGTERM/SIGHUP after winding down.
 */
import path from 'node:path';
import type { Command } from 'commander';
import { isLeashError, LeashError } from '../errors.js';
import { JsonError, parseStrict } from '../formats/json.js';
import { readAudit, summarise, type AuditRecord } from '../tools/audit.js';
import { runGate } from '../tools/gate/run.js';
import type { CompiledGatePolicy } from '../tools/judge/compile.js';
import { checkTool } from '../tools/judge/decide.js';
import { loadGatePolicy } from '../tools/judge/policy-file.js';
import { runLearn } from '../tools/learn/run.js';
import { DEFAULT_TOOLS_SOCKET } from '../tools/remote/socket.js';

/** Milliseconds: a finite number, 0 or more (0 = wait for ever / stop at once). */
function parseMs(name: string, v: string): number {
  if (!/^\d+(\.\d+)?$/.test(v))
    throw new LeashError('usage', `${name} must be a finite number of milliseconds, 0 or more: ${v}`, { option: name });
  return Number(v);
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
      await guarded(async () =>
        runGate({
          server: serverArgs(server),
          timeoutMs: parseMs('--timeout', opts.timeout),
          graceMs: parseMs('--grace', opts.grace),
          policy:
            opts.policy === undefined
              ? undefined
              : {
                  file: opts.policy,
                  workspace: opts.workspace === undefined ? undefined : path.resolve(opts.workspace),
                  log: opts.log,
                  audit: opts.audit,
                },
          socket: opts.socket,
          approval: opts.approval,
          approvalTimeoutMs: () => parseMs('--approval-timeout', opts.approvalTimeout),
        }),
      );
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
      await guarded(() =>
        runLearn({
          server: serverArgs(server),
          timeoutMs: parseMs('--timeout', opts.timeout),
          graceMs: parseMs('--grace', opts.grace),
          script: opts.script,
          out: opts.out,
        }),
      );
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
        const { policy } = loadGatePolicy(opts.policy);
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
      const f = loadGatePolicy(o.policy).policy.audit;
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
