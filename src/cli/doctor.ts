/**
 * `leash doctor [--json] [--policy FILE] [--socket PATH] [--timeout MS] [-- SERVER [ARGS...]]`:
 * whether `leash mcp` can run here. Checks Node's version, the policy (a tools policy file with
 * --policy, else the service config as `leash validate` loads it), the service's tools socket
 * (answering a connection), and, given a server command, a short MCP probe: the server started,
 * `initialize` and `tools/list` answered within the timeout, then stopped. Exit 0 when every check
 * passed, 1 when one failed, 2 on bad usage (docs/cli.md).
 */
import { spawn } from 'node:child_process';
import fs from 'node:fs';
import net from 'node:net';
import path from 'node:path';
import type { Command } from 'commander';
import { EXIT, isLeashError, LeashError } from '../errors.js';
import { DEFAULT_TOOLS_SOCKET } from '../paths.js';
import { loadConfig } from '../control/config/load.js';
import { mappingForServer } from '../tools/judge/operations/mappings.js';
import { workspaceWarnings } from '../tools/judge/operations/model.js';
import { configPath, print, printJson } from './context.js';
import { loadGatePolicy } from '../tools/judge/policy-file.js';
import { askSources, noApprover, parseApprovalMode } from '../tools/gate/approver.js';
import { INITIAL_PID_NS, pidNsOf, pidNsWarnings } from '../dataplane/watcher/pidns.js';
import { parseMetricsText, summarize } from '../metrics/metrics.js';
import { fetchMetrics } from '../metrics/server.js';

export interface Check {
  check: 'node' | 'policy' | 'approval' | 'socket' | 'server' | 'workspace' | 'pid_namespace';
  ok: boolean;
  detail: string;
  /** The error code when a check failed on one (docs/errors.md). */
  code?: string;
  /** What passed but makes the rules mean something else (a workspace of /, outside the server's directories). */
  warnings?: string[];
}

const MIN_NODE = 20;

export function nodeCheck(version = process.versions.node): Check {
  const major = Number(version.split('.')[0]);
  return {
    check: 'node',
    ok: major >= MIN_NODE,
    detail: major >= MIN_NODE ? `node ${version}` : `node ${version}: Leash needs Node ${MIN_NODE} or newer`,
  };
}

function policyCheck(policy: string | undefined, config: string): Check {
  try {
    if (policy !== undefined) {
      const { policy: p } = loadGatePolicy(policy);
      const n = p.ops?.rules.rules.length ?? 0;
      return { check: 'policy', ok: true, detail: `${policy}: valid tools policy (${n} rules over operations)` };
    }
    const loaded = loadConfig(config);
    const critical = loaded.findings.filter((f) => f.severity === 'critical');
    if (critical.length)
      return {
        check: 'policy',
        ok: false,
        detail: `${config}: ${critical.length} critical finding(s) (leash validate lists them)`,
        code: critical[0]!.code,
      };
    return { check: 'policy', ok: true, detail: `${config}: valid` };
  } catch (e) {
    if (isLeashError(e)) return { check: 'policy', ok: false, detail: e.message, code: e.code };
    throw e;
  }
}

/** With --policy: who answers what the policy asks (leash mcp refuses to start a policy that asks nobody). */
function approvalCheck(policy: string, mode: string | undefined): Check {
  let asks: string[];
  try {
    asks = askSources(policy);
  } catch {
    return { check: 'approval', ok: true, detail: 'not checked (the policy does not load)' };
  }
  const m = parseApprovalMode(mode);
  if (asks.length === 0) return { check: 'approval', ok: true, detail: 'the policy never asks' };
  if (m === 'none')
    return { check: 'approval', ok: true, detail: `asks refused (--approval none): ${asks.join('; ')}` };
  if (m === 'tty') {
    try {
      fs.closeSync(fs.openSync('/dev/tty', 'r+'));
      return { check: 'approval', ok: true, detail: `asked on /dev/tty: ${asks.join('; ')}` };
    } catch (e) {
      const code = (e as NodeJS.ErrnoException).code ?? 'cannot open';
      return { check: 'approval', ok: false, detail: `--approval tty: /dev/tty: ${code}`, code: 'mcp_no_approver' };
    }
  }
  return { check: 'approval', ok: false, detail: noApprover(policy, asks).message, code: 'mcp_no_approver' };
}

function socketCheck(socket: string, needed: boolean, timeoutMs: number): Promise<Check> {
  const fail = (detail: string): Check =>
    needed
      ? { check: 'socket', ok: false, detail, code: 'mcp_service_unreachable' }
      : { check: 'socket', ok: true, detail: `${detail} (not needed with --policy)` };
  let st: fs.Stats;
  try {
    st = fs.statSync(socket);
  } catch (e) {
    return Promise.resolve(fail(`${socket}: ${(e as NodeJS.ErrnoException).code ?? 'cannot stat'}`));
  }
  if (!st.isSocket()) return Promise.resolve(fail(`${socket}: not a socket`));
  return new Promise((resolve) => {
    const c = net.connect(socket);
    const t = setTimeout(() => {
      c.destroy();
      resolve(fail(`${socket}: no answer to a connection within ${timeoutMs} ms`));
    }, timeoutMs);
    c.on('connect', () => {
      clearTimeout(t);
      c.destroy();
      resolve({ check: 'socket', ok: true, detail: `${socket}: the service answers` });
    });
    c.on('error', (e: NodeJS.ErrnoException) => {
      clearTimeout(t);
      resolve(fail(`${socket}: ${e.code ?? e.message}`));
    });
  });
}

/** The service's metrics socket as `leash status` finds it (LEASH_METRICS_SOCKET, else the config's), or null. */
function metricsSocket(config: string): string | null {
  const env = process.env.LEASH_METRICS_SOCKET;
  if (env !== undefined) return env || null;
  try {
    return loadConfig(config).config.logging.metrics_socket;
  } catch {
    return null; // the policy check says why
  }
}

/**
 * Which PID namespace the service and its watcher run in (from the service's metrics), or, with no service
 * answering, this process's: outside the host's initial one, the host's processes are not told apart (warnings).
 */
export async function pidNamespaceCheck(socket: string | null): Promise<Check> {
  const text = socket === null ? null : await fetchMetrics(socket);
  const live = text === null ? null : summarize(parseMetricsText(text));
  const own = pidNsOf();
  const ns =
    live !== null && Object.keys(live.pidNamespaces).length > 0
      ? live.pidNamespaces
      : own === null
        ? {}
        : { 'service (if started here)': own };
  const warnings = pidNsWarnings(ns, live?.foreignPidEvents ?? null);
  const where = Object.entries(ns)
    .map(
      ([p, ino]) =>
        `${p}: ${ino === INITIAL_PID_NS ? 'the initial PID namespace' : `PID namespace ${ino}, not the initial one`}`,
    )
    .join('; ');
  return { check: 'pid_namespace', ok: true, detail: where || 'unknown', ...(warnings.length ? { warnings } : {}) };
}

/**
 * Starts the server, asks initialize and tools/list (and, for a server whose relative paths land in
 * its allowed directories, list_allowed_directories, to hold the workspace against), stops it (by its
 * PID) whatever happened.
 */
export function probeServer(command: string[], timeoutMs: number, workspace: string | null = null): Promise<Check> {
  return new Promise((resolve) => {
    const [cmd, ...args] = command;
    const child = spawn(cmd!, args, { stdio: ['pipe', 'pipe', 'ignore'] });
    let done = false;
    let serverName: string | null = null;
    let tools = 0;
    let table: ReturnType<typeof mappingForServer> = null;
    const done3 = (lists: string[][] | null) => {
      const warnings = workspaceWarnings(workspace, table, lists);
      finish({
        check: 'server',
        ok: true,
        detail: `${serverName ?? '(no serverInfo.name)'}: ${tools} tools; mapping table ${table ? table.id : 'none (tools.mapping names one, or calls are unknown)'}`,
        ...(warnings.length ? { warnings } : {}),
      });
    };
    const finish = (c: Check) => {
      if (done) return;
      done = true;
      clearTimeout(timer);
      child.stdin.destroy();
      if (child.exitCode === null && child.signalCode === null) child.kill('SIGTERM');
      const hard = setTimeout(() => child.kill('SIGKILL'), 1000);
      hard.unref();
      child.once('exit', () => clearTimeout(hard));
      resolve(c);
    };
    const fail = (detail: string) => finish({ check: 'server', ok: false, detail, code: 'mcp_server_unrunnable' });
    const timer = setTimeout(() => fail(`${cmd}: no answer within ${timeoutMs} ms`), timeoutMs);
    child.on('error', (e: NodeJS.ErrnoException) => fail(`${cmd}: cannot start: ${e.code ?? e.message}`));
    child.on('exit', (code, sig) => fail(`${cmd}: exited (${sig ?? `code ${code}`}) before answering`));
    child.stdin.on('error', () => undefined);
    const send = (v: unknown) => child.stdin.write(`${JSON.stringify(v)}\n`);
    let rest = '';
    child.stdout.on('data', (b: Buffer) => {
      const s = rest + b.toString('utf8');
      const lines = s.split('\n');
      rest = lines.pop() ?? '';
      for (const line of lines) {
        if (line.trim() === '') continue;
        let m: { id?: unknown; result?: Record<string, unknown>; error?: { message?: unknown } };
        try {
          m = JSON.parse(line) as typeof m;
        } catch {
          return fail(`${cmd}: wrote a line that is not JSON on stdout`);
        }
        if (m.id === 1) {
          if (m.error) return fail(`${cmd}: refused initialize: ${String(m.error.message ?? '')}`);
          const info = m.result?.serverInfo as { name?: unknown } | undefined;
          serverName = typeof info?.name === 'string' ? info.name : null;
          send({ jsonrpc: '2.0', method: 'notifications/initialized' });
          send({ jsonrpc: '2.0', id: 2, method: 'tools/list', params: {} });
        } else if (m.id === 2) {
          if (m.error) return fail(`${cmd}: refused tools/list: ${String(m.error.message ?? '')}`);
          tools = Array.isArray(m.result?.tools) ? (m.result.tools as unknown[]).length : 0;
          table = serverName === null ? null : mappingForServer(serverName);
          const lister = table?.relative?.from === 'allowed_dirs' ? table.relative.tool : undefined;
          if (lister === undefined) return done3(null);
          send({ jsonrpc: '2.0', id: 3, method: 'tools/call', params: { name: lister, arguments: {} } });
        } else if (m.id === 3) {
          const c = (m.result?.content as { text?: unknown }[] | undefined)?.[0];
          const lines = typeof c?.text === 'string' ? c.text.split('\n') : [];
          const dirs = lines[0] === 'Allowed directories:' ? lines.slice(1).filter((l) => l.startsWith('/')) : [];
          return done3(dirs.length > 0 ? [dirs] : null);
        }
      }
    });
    send({
      jsonrpc: '2.0',
      id: 1,
      method: 'initialize',
      params: {
        protocolVersion: '2025-06-18',
        capabilities: {},
        clientInfo: { name: 'leash-doctor', version: '0.1.0' },
      },
    });
  });
}

export function register(program: Command): void {
  program
    .command('doctor')
    .description('check that leash mcp can run here: Node, the policy, the service socket, optionally a server probe')
    .usage('[--json] [--policy FILE] [--socket PATH] [--timeout MS] [-- SERVER [ARGS...]]')
    .option('--policy <file>', 'check this tools policy file (default: the service config)')
    .option('--socket <path>', 'the service tools socket', DEFAULT_TOOLS_SOCKET)
    .option('--timeout <ms>', 'for the socket and for each probe answer', '5000')
    .option('--approval <who>', 'with --policy: as leash mcp will run, tty or none')
    .option('--json', 'JSON output')
    .argument('[server...]', 'a server command to probe, after --')
    .action(
      async (
        server: string[] | undefined,
        o: { policy?: string; socket: string; timeout: string; json?: boolean; approval?: string },
        cmd: Command,
      ) => {
        const timeoutMs = Number(o.timeout);
        if (!Number.isFinite(timeoutMs) || timeoutMs <= 0)
          throw new LeashError('usage', `--timeout must be a positive number of milliseconds: ${o.timeout}`, {
            option: '--timeout',
          });
        const checks: Check[] = [nodeCheck(), policyCheck(o.policy, configPath(cmd.parent ?? cmd))];
        if (o.policy !== undefined) checks.push(approvalCheck(o.policy, o.approval));
        checks.push(await socketCheck(path.resolve(o.socket), o.policy === undefined, timeoutMs));
        let workspace: string | null = null;
        try {
          if (o.policy !== undefined) workspace = loadGatePolicy(o.policy).policy.ops?.workspace ?? null;
        } catch {
          /* the policy check says why */
        }
        if (server !== undefined && server.length > 0) checks.push(await probeServer(server, timeoutMs, workspace));
        else if (workspace !== null) {
          const warnings = workspaceWarnings(workspace, null, null);
          if (warnings.length) checks.push({ check: 'workspace', ok: true, detail: workspace, warnings });
        }
        checks.push(await pidNamespaceCheck(metricsSocket(configPath(cmd.parent ?? cmd))));
        const ok = checks.every((c) => c.ok);
        if (o.json) printJson({ ok, checks });
        else {
          for (const c of checks) {
            print(`${c.ok ? 'ok  ' : 'FAIL'} ${c.check.padEnd(9)} ${c.detail}${c.code ? ` [${c.code}]` : ''}`);
            for (const w of c.warnings ?? []) print(`warn ${c.check.padEnd(9)} ${w}`);
          }
        }
        if (!ok) process.exitCode = EXIT.verdict;
      },
    );
}
