import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { Command, InvalidArgumentError } from 'commander';
import { maskSecrets } from '../engine/index.js';
import { LeashError } from '../errors.js';
import { createDecisionLog, type DecisionWriter } from '../log/decisions.js';
import { openAuditTrail, type TerminalAuditRecord } from '../tools/audit.js';
import { engineDeciderFactory } from '../tools/terminal/decider.js';
import { explainCommand } from '../tools/terminal/explain.js';
import { isInside, openJail, realLocation } from '../tools/terminal/jail.js';
import { parseStrictYaml, readPolicyFile } from '../formats/yaml.js';
import { loadTerminalPolicy, TerminalPolicyError } from '../tools/terminal/policy-file.js';
import { redactSecrets } from '../tools/terminal/redact.js';
import { DEFAULT_PATH } from '../tools/terminal/resolve.js';
import { runCommand } from '../tools/terminal/run.js';
import { createTerminalServer } from '../tools/terminal/server.js';
import { DEFAULT_SERVICE_SOCKET, fetchServicePolicy, servicePolicySource } from '../tools/terminal/service-client.js';
import type { PolicySource, TerminalPolicy } from '../tools/terminal/types.js';

interface TerminalOptions {
  policy?: string;
  jail: string;
  socket: string;
  audit?: string;
  auditFailOpen?: boolean;
  decisionLog?: string;
  timeout: number;
  maxOutputBytes: number;
  path: string;
}

function positiveInt(v: string): number {
  const n = Number(v);
  if (!Number.isSafeInteger(n) || n <= 0) throw new InvalidArgumentError('must be a positive integer');
  return n;
}

function defaultAuditPath(): string {
  return process.getuid?.() === 0
    ? '/var/log/leash/terminal-audit.jsonl'
    : path.join(os.homedir(), '.local', 'state', 'leash', 'terminal-audit.jsonl');
}

function refuseInsideJail(jail: string, file: string, what: string): void {
  if (isInside(jail, realLocation(file))) {
    throw new LeashError(
      'terminal_log_in_jail',
      `${what} ${file} lies inside the jail root: jailed commands could rewrite it`,
      {
        file,
      },
    );
  }
}

function policyFrom(file: string): TerminalPolicy {
  try {
    return loadTerminalPolicy(file);
  } catch (e) {
    if (!(e instanceof TerminalPolicyError)) throw e;
    const issues = e.problems.map((p) => {
      const at = p.indexOf(': ');
      return at < 0 ? { path: '(root)', message: p } : { path: p.slice(0, at), message: p.slice(at + 2) };
    });
    throw new LeashError(
      e.kind === 'missing' ? 'config_missing' : 'config_invalid',
      `terminal policy ${file} ${e.kind === 'missing' ? 'cannot be read' : 'is invalid'}`,
      { issues },
    );
  }
}

async function startTerminal(o: TerminalOptions): Promise<void> {
  const warn = (msg: string): void => void process.stderr.write(`leash terminal: ${msg}\n`);
  let jail: string;
  try {
    jail = openJail(o.jail);
  } catch (e) {
    throw new LeashError('terminal_jail_invalid', (e as Error).message, { jail: o.jail });
  }

  let policySource: PolicySource;
  let fileDecisions: string | undefined;
  if (o.policy) {
    // Read once at start: a policy the jailed commands could rewrite would be theirs at the next start.
    refuseInsideJail(jail, o.policy, 'policy file');
    const policy = policyFrom(o.policy);
    const raw = parseStrictYaml(readPolicyFile(o.policy), o.policy).js as { logging?: { decisions?: unknown } } | null;
    if (typeof raw?.logging?.decisions === 'string' && raw.logging.decisions.startsWith('/')) {
      fileDecisions = raw.logging.decisions;
    }
    policySource = async () => policy;
  } else {
    // Fail loudly at start when the service cannot be asked; later failures deny (no_policy).
    try {
      await fetchServicePolicy(o.socket);
    } catch (e) {
      throw new LeashError('terminal_service_unavailable', (e as Error).message, { socket: o.socket });
    }
    policySource = servicePolicySource(o.socket, warn);
  }

  const auditFile = o.audit ?? defaultAuditPath();
  refuseInsideJail(jail, auditFile, 'audit log');
  if (!o.audit) fs.mkdirSync(path.dirname(auditFile), { recursive: true, mode: 0o700 });
  try {
    fs.closeSync(fs.openSync(auditFile, 'a', 0o600));
  } catch (e) {
    const errno = (e as NodeJS.ErrnoException).code;
    if (!o.auditFailOpen) {
      throw new LeashError('terminal_audit_unavailable', `audit log ${auditFile} cannot be opened: ${errno}`, {
        errno,
      });
    }
    warn(`audit log ${auditFile} cannot be opened; running anyway (--audit-fail-open)`);
  }

  const decisionFile = o.decisionLog ?? fileDecisions;
  let decisions: DecisionWriter | null = null;
  if (decisionFile === 'stdout' || (decisionFile && !path.isAbsolute(decisionFile))) {
    throw new LeashError(
      'terminal_log_in_jail',
      'the decision log must be an absolute file path (stdout carries the MCP protocol)',
    );
  }
  if (decisionFile) {
    refuseInsideJail(jail, decisionFile, 'decision log');
    decisions = createDecisionLog({ sink: decisionFile });
  } else {
    warn('no decision log configured (--decision-log FILE or logging.decisions in the policy)');
  }

  // If the terminal itself is stopped mid-call, the command's process group must not outlive it.
  const live = new Set<number>();
  const stop = (code: number) => (): void => {
    for (const pgid of live) {
      try {
        process.kill(-pgid, 'SIGKILL');
      } catch {
        // already gone
      }
    }
    process.exit(code);
  };
  process.once('SIGTERM', stop(143));
  process.once('SIGINT', stop(130));
  process.once('SIGHUP', stop(129));
  // The client went away (EPIPE on stdout): nobody is left to answer.
  process.stdout.on('error', stop(0));

  const deps = {
    live,
    policy: policySource,
    decider: engineDeciderFactory(),
    jail,
    searchPath: o.path,
    lang: process.env.LANG && /^[A-Za-z0-9_.@-]+$/.test(process.env.LANG) ? process.env.LANG : 'C.UTF-8',
    timeoutMs: o.timeout,
    maxOutputBytes: o.maxOutputBytes,
    // The terminal's own patterns replace a secret whole ([REDACTED:<kind>]); the engine's masking
    // (the one the decision log and the tools gate use) then catches what they do not know, PII too.
    redact: (text: string) => maskSecrets(redactSecrets(text)),
    audit: openAuditTrail<TerminalAuditRecord>(auditFile, 'durable'),
    auditFailOpen: !!o.auditFailOpen,
    decisions,
    uid: process.getuid?.() ?? -1,
    warn,
  };
  // Test seam for the INTERNAL_ERROR path: proves an unexpected throw reaches the client as a
  // generic envelope with no stack. Not a policy switch: it can only make calls fail.
  const fault = process.env.LEASH_TERMINAL_TEST_FAULT === 'run';
  const server = createTerminalServer({
    input: process.stdin,
    output: process.stdout,
    warn,
    handlers: {
      run: (command, cwd) => {
        if (fault) throw new Error(`injected fault at ${new Error().stack ?? ''}`);
        return runCommand(command, cwd, deps);
      },
      explain: (command) => explainCommand(command, deps),
    },
  });
  warn(`serving on stdio; jail ${jail}; policy ${o.policy ?? `from ${o.socket}`}; audit ${auditFile}`);
  await server.done;
}

/** `leash terminal`: an MCP server on stdio that runs allowlisted commands (docs/terminal.md). */
export function registerTerminal(program: Command): void {
  program
    .command('terminal')
    .description('MCP server (stdio) that runs allowlisted commands, judged by the commands surface')
    .requiredOption('--jail <dir>', 'jail root: every cwd must resolve inside it (required)')
    .option('--policy <file>', 'policy file (Leash config/profile format); default: ask the running service')
    .option('--socket <path>', 'service socket asked for the policy when --policy is absent', DEFAULT_SERVICE_SOCKET)
    .option('--audit <file>', 'append-only audit trail (must be outside the jail)')
    .option('--audit-fail-open', 'run commands even when the attempt record cannot be written')
    .option('--decision-log <file>', 'Leash decision log file (default: logging.decisions of the policy file)')
    .option('--timeout <ms>', 'wall-clock limit per command', positiveInt, 10_000)
    .option('--max-output-bytes <n>', 'cap on each of stdout and stderr', positiveInt, 64 * 1024)
    .option('--path <PATH>', 'PATH for resolving and running commands', DEFAULT_PATH)
    .action(async (o: TerminalOptions) => {
      // Refusals throw LeashError: main.ts prints `leash: …` lines and exits with the catalogue's code.
      await startTerminal(o);
      // Input ended and every answer is written: leave now rather than wait on stray handles.
      process.exit(0);
    });
}
