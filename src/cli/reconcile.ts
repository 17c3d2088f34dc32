import { spawnSync } from 'node:child_process';
import type { Command } from 'commander';
import { LeashError } from '../errors.js';

export const UNIT = 'leash.service';

export interface SignalResult {
  /** True when the running service was sent SIGHUP. */
  signalled: boolean;
  /** Why not, when it was not (the change takes effect when the service next starts). */
  reason?: string;
}

/**
 * Tells a running service to re-read the policy after a successful write. The main PID only
 * (`--kill-whom=main`): a cgroup-wide HUP would also hit the short-lived nft children, which have
 * no handler and would die mid-apply. `systemctl reload` is not it either: the unit has no
 * ExecReload. A service that is not running needs no signal. A signal that fails is an error with
 * the command to run by hand: the policy is on disk and not in force, which must not exit 0.
 * `LEASH_SYSTEMCTL` overrides the systemctl binary (tests).
 */
export function signalService(systemctl = process.env.LEASH_SYSTEMCTL ?? 'systemctl'): SignalResult {
  const active = spawnSync(systemctl, ['is-active', '--quiet', UNIT], { stdio: 'ignore' });
  if (active.error) return { signalled: false, reason: 'systemctl is not available' };
  if (active.status !== 0) return { signalled: false, reason: `${UNIT} is not running` };
  const args = ['kill', '--kill-whom=main', '--signal=HUP', UNIT];
  const kill = spawnSync(systemctl, args, { encoding: 'utf8', stdio: ['ignore', 'ignore', 'pipe'] });
  if (kill.error || kill.status !== 0) {
    throw new LeashError(
      'service_signal_failed',
      `the policy was written but the service was not told to reload it (${(kill.stderr ?? '').trim() || kill.error?.message || `exit ${kill.status}`}); run: systemctl ${args.join(' ')}`,
      { command: `systemctl ${args.join(' ')}` },
    );
  }
  return { signalled: true };
}

/** `leash restart`: a full restart through systemd (drops and re-applies every enforcer). */
export function restartService(systemctl = process.env.LEASH_SYSTEMCTL ?? 'systemctl'): void {
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
    .description('restart leash.service (edits reload it in place with SIGHUP; a restart briefly unconfines)')
    .action(() => {
      restartService();
      process.stdout.write(`${UNIT} restarted\n`);
    });
}
