/**
 * Signals the running service (its main PID alone) and waits until the reload that covers the signal has finished,
 * reading the service's generation back from its status file (src/control/reconcile/generation.ts). `leash reload`
 * (ExecReload) and every policy-writing command return through here: the change is in force when they exit 0, and
 * they exit non-zero naming what is not.
 */
import fs from 'node:fs';
import { spawnSync } from 'node:child_process';
import type { Command } from 'commander';
import { LeashError } from '../errors.js';
import {
  readReloadStatus,
  statusFilePath,
  type ReloadProblem,
  type ReloadStatus,
} from '../control/reconcile/generation.js';
import { processAlive } from '../store/files.js';
import { report, type PolicyOpts } from './policy-common.js';

export const UNIT = 'leash.service';
const DEFAULT_PID_FILE = '/run/leash/leash.pid';

export type ReloadOutcome =
  { sent: true; via: 'systemd' | 'pidfile' | 'pid'; pid: number; generation: number } | { sent: false; why: string };

export interface ReloadOptions {
  /** The main PID to signal (ExecReload passes $MAINPID); default: systemd's MainPID, else the pid file. */
  pid?: number;
  timeoutMs?: number;
  systemctl?: string;
}

function sleepSync(ms: number): void {
  Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, ms);
}

function defaultTimeoutMs(): number {
  const s = Number(process.env.LEASH_RELOAD_TIMEOUT_S);
  return Number.isFinite(s) && s > 0 ? s * 1000 : 120_000;
}

type Target = { pid: number | null; via: 'systemd' | 'pidfile' | 'pid'; send: () => void; byHand: string };

/** The systemd way: main PID from systemd, the signal through `systemctl kill --kill-whom=main`. */
function systemdTarget(systemctl: string): Target | { why: string } | null {
  const active = spawnSync(systemctl, ['is-active', '--quiet', UNIT], { stdio: 'ignore' });
  if (active.error) return null;
  if (active.status !== 0) return { why: `${UNIT} is not running; the change takes effect when it starts` };
  const show = spawnSync(systemctl, ['show', '-p', 'MainPID', '--value', UNIT], { encoding: 'utf8' });
  const pid = Number.parseInt((show.stdout ?? '').trim(), 10);
  const args = ['kill', '--kill-whom=main', '--signal=HUP', UNIT];
  return {
    pid: Number.isInteger(pid) && pid > 1 ? pid : null,
    via: 'systemd',
    byHand: `systemctl ${args.join(' ')}`,
    send: () => {
      const kill = spawnSync(systemctl, args, { encoding: 'utf8', stdio: ['ignore', 'ignore', 'pipe'] });
      if (kill.error || kill.status !== 0)
        throw new LeashError(
          'service_signal_failed',
          `the policy was written but the service was not told to reload it (${(kill.stderr ?? '').trim() || kill.error?.message || `exit ${kill.status}`}); run: systemctl ${args.join(' ')}`,
          { command: `systemctl ${args.join(' ')}` },
        );
    },
  };
}

/** A pid that must be a leash process: a stale pid file must not HUP, and so kill, whatever reused the pid. */
function pidTarget(pid: number, via: 'pidfile' | 'pid', where: string): Target {
  const byHand = `kill -HUP ${pid}`;
  return {
    pid,
    via,
    byHand,
    send: () => {
      try {
        const cmdline = fs.readFileSync(`/proc/${pid}/cmdline`, 'utf8');
        if (!cmdline.includes('leash')) throw new Error(`pid ${pid} is not a leash process (stale ${where})`);
        process.kill(pid, 'SIGHUP');
      } catch (e) {
        throw new LeashError(
          'service_signal_failed',
          `the policy is written but not in force: SIGHUP to pid ${pid} failed (${(e as Error).message}); run by hand: ${byHand}`,
          { command: byHand, pid },
        );
      }
    },
  };
}

function pidFileTarget(): Target | { why: string } {
  const file = process.env.LEASH_PID_FILE ?? DEFAULT_PID_FILE;
  let text: string;
  try {
    text = fs.readFileSync(file, 'utf8');
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code === 'ENOENT')
      return { why: `the service is not running (no ${file}); the change takes effect when it starts` };
    throw new LeashError(
      'service_signal_failed',
      `the policy is written but not in force: cannot read ${file}; run by hand: kill -HUP "$(cat ${file})"`,
      { command: `kill -HUP "$(cat ${file})"` },
    );
  }
  const pid = Number.parseInt(text.trim(), 10);
  if (!Number.isInteger(pid) || pid <= 1)
    throw new LeashError('service_signal_failed', `the policy is written but not in force: ${file} holds no pid`, {
      command: `kill -HUP "$(cat ${file})"`,
    });
  return pidTarget(pid, 'pidfile', file);
}

function describeProblems(problems: ReloadProblem[]): string {
  return problems.map((p) => `${p.account ? `${p.account}: ` : ''}${p.message} [${p.code}]`).join('; ');
}

/**
 * Sends SIGHUP to the service's main PID and waits for the reload covering it. Returns `sent: false` when no service
 * runs (nothing to pick up); throws `service_signal_failed` when the signal could not be sent, `reload_unconfirmed`
 * when no reload covering it finished in time (or the service went away), `reload_incomplete` when it finished with
 * something not in force (each named in the message and in `details.problems`).
 */
export function reloadService(opts: ReloadOptions = {}): ReloadOutcome {
  const systemctl = opts.systemctl ?? process.env.LEASH_SYSTEMCTL ?? 'systemctl';
  let target: Target | { why: string } | null = null;
  if (opts.pid !== undefined) target = pidTarget(opts.pid, 'pid', '--pid');
  else if (!process.env.LEASH_PID_FILE && (fs.existsSync('/run/systemd/system') || process.env.LEASH_SYSTEMCTL))
    target = systemdTarget(systemctl);
  target ??= pidFileTarget();
  if ('why' in target) return { sent: false, why: target.why };

  const file = statusFilePath();
  const before = readReloadStatus(file);
  // Counts read before the signal: a reload covering a higher count started after the signal, so after the write.
  const after = before !== null && before.pid === target.pid ? before.hup : 0;
  target.send();
  const unconfirmed = (why: string): never => {
    throw new LeashError(
      'reload_unconfirmed',
      `the service was signalled but did not confirm the reload (${why}): the change may not be in force; see the journal, then run: leash reload`,
      { pid: target.pid, statusFile: file, command: target.byHand },
    );
  };
  if (target.pid === null) unconfirmed('systemd names no main PID');
  const pid = target.pid!;
  const deadline = Date.now() + (opts.timeoutMs ?? defaultTimeoutMs());
  let st: ReloadStatus | null = null;
  for (let wait = 2; ; wait = Math.min(wait * 2, 50)) {
    st = readReloadStatus(file);
    if (st !== null && st.pid === pid && st.done > after) break;
    if (!processAlive(pid)) unconfirmed(`pid ${pid} exited`);
    if (Date.now() > deadline)
      unconfirmed(
        `no reload covering the signal within ${Math.round((opts.timeoutMs ?? defaultTimeoutMs()) / 1000)} s, status in ${file}`,
      );
    sleepSync(wait);
  }
  if (st.problems.length)
    throw new LeashError(
      'reload_incomplete',
      `the reload finished, but not everything is in force: ${describeProblems(st.problems)}`,
      { problems: st.problems, generation: st.done },
    );
  return { sent: true, via: target.via, pid, generation: st.done };
}

/**
 * After a successful policy write: signal the service and wait until the change is in force (reloadService), unless
 * --no-reconcile; text and JSON say what happened. Written but not in force exits non-zero.
 */
export function afterWrite(o: PolicyOpts, result: Record<string, unknown>, lines: string[]): void {
  let reconcile: ReloadOutcome | { sent: false; why: 'skipped (--no-reconcile)' };
  try {
    reconcile = o.reconcile === false ? { sent: false, why: 'skipped (--no-reconcile)' } : reloadService();
  } catch (e) {
    // Written but not in force: the one state that must not exit 0.
    const err = e as LeashError;
    if (o.json) {
      process.stdout.write(
        `${JSON.stringify({ ok: true, ...result, reconcile: { sent: false, error: { code: err.code, message: err.message, details: err.details } } })}\n`,
      );
      process.exitCode = err.exitCode ?? 3;
    } else {
      process.stdout.write(`${lines.join('\n')}\n`);
      report(e, o);
    }
    return;
  }
  if (o.json) {
    process.stdout.write(`${JSON.stringify({ ok: true, ...result, reconcile })}\n`);
    return;
  }
  lines.push(reconcile.sent ? `reconcile: signalled the service (${reconcile.via})` : `reconcile: ${reconcile.why}`);
  process.stdout.write(`${lines.join('\n')}\n`);
}

export function register(program: Command): void {
  program
    .command('reload')
    .description('reconcile the running service now; exit 0 only once the policy on disk is in force everywhere')
    .option('--pid <pid>', 'the main PID to signal (ExecReload passes $MAINPID)')
    .option('--timeout <seconds>', 'how long to wait for the reload (default 120, or LEASH_RELOAD_TIMEOUT_S)')
    .option('--json', 'print the outcome as JSON')
    .action((o: { pid?: string; timeout?: string; json?: boolean }) => {
      const pid = o.pid === undefined ? undefined : Number(o.pid);
      if (pid !== undefined && (!Number.isInteger(pid) || pid <= 1))
        throw new LeashError('usage', `--pid ${o.pid} is not a process id`);
      const t = o.timeout === undefined ? undefined : Number(o.timeout);
      if (t !== undefined && !(t > 0))
        throw new LeashError('usage', `--timeout ${o.timeout} is not a number of seconds`);
      const r = reloadService({
        ...(pid !== undefined ? { pid } : {}),
        ...(t !== undefined ? { timeoutMs: t * 1000 } : {}),
      });
      if (o.json) process.stdout.write(`${JSON.stringify(r)}\n`);
      else if (r.sent) process.stdout.write(`reloaded: generation ${r.generation} in force (pid ${r.pid})\n`);
      else {
        process.stdout.write(`${r.why}\n`);
        // ExecReload with nothing to reload: the caller asked for a policy in force and there is no service.
        if (pid !== undefined) process.exitCode = 3;
      }
    });
}
