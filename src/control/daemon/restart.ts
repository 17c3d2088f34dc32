/**
 * A stop that is a restart (`leash restart`, the package's upgrade, `systemctl restart`) keeps the data plane: the
 * service ends without releasing, so the nft chains stay (closed: redirects meet no listener) and the watcher waits
 * for the next start to adopt it (src/dataplane/watcher/adopt.ts). Only a deliberate stop releases everything. The
 * stopping service and ExecStopPost (`leash teardown`) tell them apart the same way: a marker in the runtime
 * directory written just before the restart, or systemd's job for the unit being a restart.
 */
import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { DEFAULT_TOOLS_SOCKET } from '../../paths.js';
import { ADOPT_SOCKET_NAME } from '../../dataplane/watcher/adopt.js';

const MARKER = 'restart';
/** A marker older than this is stale (a restart that never happened): the stop releases. */
const MARKER_MAX_MS = 120_000;
/** The unit when this process's own cannot be read (not under systemd's cgroups). */
const DEFAULT_UNIT = 'leash.service';
const RESTART_JOBS = new Set(['restart', 'try-restart', 'reload-or-restart', 'try-reload-or-restart']);

/** The service's runtime directory (/run/leash; a test's own through LEASH_TOOLS_SOCKET). */
export function runtimeDir(env: NodeJS.ProcessEnv = process.env): string {
  return path.dirname(env.LEASH_TOOLS_SOCKET ?? DEFAULT_TOOLS_SOCKET);
}

export function watcherSocketPath(env: NodeJS.ProcessEnv = process.env): string {
  return path.join(runtimeDir(env), ADOPT_SOCKET_NAME);
}

/** Written by `leash restart` and the postinst just before they restart the service. */
export function writeRestartMarker(env: NodeJS.ProcessEnv = process.env): void {
  const dir = runtimeDir(env);
  try {
    fs.writeFileSync(path.join(dir, MARKER), `${Date.now()}\n`, { mode: 0o600 });
  } catch {
    // No runtime directory (the service is not running) or not root: systemd's restart job still tells the stop.
  }
}

/** The next start consumes the marker: a later stop is deliberate unless marked again. */
export function clearRestartMarker(env: NodeJS.ProcessEnv = process.env): void {
  fs.rmSync(path.join(runtimeDir(env), MARKER), { force: true });
}

function markerFresh(env: NodeJS.ProcessEnv): boolean {
  const st = fs.statSync(path.join(runtimeDir(env), MARKER), { throwIfNoEntry: false });
  return !!st && Date.now() - st.mtimeMs < MARKER_MAX_MS;
}

/**
 * The systemd unit this process runs in, from its cgroup (`0::/system.slice/leash.service`; a unit copied or renamed
 * by the operator keeps its own name here): the service and its ExecStopPost both run in the unit's cgroup.
 */
export function ownUnit(cgroup: () => string = () => fs.readFileSync('/proc/self/cgroup', 'utf8')): string {
  let text = '';
  try {
    text = cgroup();
  } catch {
    return DEFAULT_UNIT;
  }
  for (const line of text.split('\n')) {
    const parts = line.slice(line.indexOf('::') + 2).split('/');
    // The innermost .service component: a service's own sub-cgroups (Delegate=) lie below it.
    for (let i = parts.length - 1; i >= 0; i--) if (parts[i]!.endsWith('.service')) return parts[i]!;
  }
  return DEFAULT_UNIT;
}

/** Whether systemd is running a restart job for the unit (`systemctl list-jobs`: JOB UNIT TYPE STATE). */
function systemdRestartJob(env: NodeJS.ProcessEnv, unit: string): boolean {
  if (!env.INVOCATION_ID) return false;
  const r = spawnSync(env.LEASH_SYSTEMCTL ?? 'systemctl', ['list-jobs', '--no-legend', '--plain', '--no-pager'], {
    encoding: 'utf8',
    timeout: 3000,
  });
  if (r.status !== 0 || typeof r.stdout !== 'string') return false;
  return r.stdout.split('\n').some((l) => {
    const f = l.trim().split(/\s+/);
    return f[1] === unit && RESTART_JOBS.has(f[2] ?? '');
  });
}

/** Why this stop is a restart ('marker' or 'systemd-job'), or null for a deliberate stop. */
export function restartPending(
  env: NodeJS.ProcessEnv = process.env,
  unit: string = ownUnit(),
): 'marker' | 'systemd-job' | null {
  if (markerFresh(env)) return 'marker';
  return systemdRestartJob(env, unit) ? 'systemd-job' : null;
}
