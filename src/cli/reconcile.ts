import { spawnSync } from 'node:child_process';
import { writeRestartMarker } from '../control/daemon/restart.js';
import type { Command } from 'commander';
import { LeashError } from '../errors.js';
import { reloadService, UNIT } from './reload.js';

export { UNIT };

export interface SignalResult {
  /** True when the running service was sent SIGHUP. */
  signalled: boolean;
  /** Why not, when it was not (the change takes effect when the service next starts). */
  reason?: string;
}

/**
 * Tells a running service to re-read the policy after a successful write, and waits until it is in force
 * (src/cli/reload.ts: SIGHUP to the main PID only, then the reload's generation read back). A service that is not
 * running needs no signal. A signal that fails, a reload that is not confirmed or that could not apply everything is
 * an error naming why: the policy is on disk and not in force, which must not exit 0.
 */
export function signalService(systemctl = process.env.LEASH_SYSTEMCTL ?? 'systemctl'): SignalResult {
  const r = reloadService({ systemctl });
  return r.sent ? { signalled: true } : { signalled: false, reason: r.why };
}

/**
 * `leash restart`: a full restart through systemd. The marker makes the stop keep the data plane (the chains, the
 * watcher the new start adopts: src/control/daemon/restart.ts), so no agent is released meanwhile.
 */
export function restartService(systemctl = process.env.LEASH_SYSTEMCTL ?? 'systemctl'): void {
  writeRestartMarker();
  const args = ['restart', UNIT];
  const r = spawnSync(systemctl, args, { encoding: 'utf8', stdio: ['ignore', 'ignore', 'pipe'] });
  if (r.error || r.status !== 0) {
    throw new LeashError(
      'service_failed',
      `systemctl ${args.join(' ')} failed: ${(r.stderr ?? '').trim() || r.error?.message || `exit ${r.status}`}`,
      { command: `systemctl ${args.join(' ')}` },
    );
  }
}

export function register(program: Command): void {
  program
    .command('restart')
    .description('restart leash.service (edits reload it in place with SIGHUP; a restart keeps every agent confined)')
    .action(() => {
      restartService();
      process.stdout.write(`${UNIT} restarted\n`);
    });
}
