/**
 * Host settings the service applies at start and restores at stop (config `host`, docs/policy.md "Host settings").
 * Today one: `host.memfd_noexec` sets `vm.memfd_noexec = 2` (kernel 6.3+), which makes every memfd of the service's
 * PID namespace and the namespaces below it non-executable: `memfd_create` + `fexecve` — an exec no fanotify mark
 * can see, since a memfd lies on no marked filesystem — fails with EACCES (and a memfd_create asking for MFD_EXEC is refused, EACCES on 6.18).
 *
 * The value is per PID namespace: the service changes the one it runs in (the host's, under systemd). The value it
 * found is recorded in a state file before it writes, so a stop, `leash teardown` (ExecStopPost) or the next start
 * after a crash restores what the host had, not the service's own 2.
 */
import fs from 'node:fs';
import path from 'node:path';
import type { Config } from '../config/types.js';
import { LeashError } from '../errors.js';
import { atomicWriteFileSync } from '../store/files.js';

/** The sysctl, as the service's PID namespace sees it (the kernel answers for the writer's namespace). */
export const MEMFD_NOEXEC = '/proc/sys/vm/memfd_noexec';
/** Where the value found at start is kept until it is restored. */
export const HOST_STATE = '/run/leash/host-settings.json';
/** 2: memfd_create without MFD_NOEXEC_SEAL gets it anyway, MFD_EXEC is refused: no memfd is ever executable. */
export const MEMFD_NOEXEC_ENFORCED = 2;

export interface HostPaths {
  /** The sysctl file (tests: a file of their own, or the real one inside a PID namespace they made). */
  memfdNoexec?: string;
  stateFile?: string;
}

/** The current vm.memfd_noexec, or null when the kernel has none (before 6.3). */
export function readMemfdNoexec(file = MEMFD_NOEXEC): number | null {
  let text: string;
  try {
    text = fs.readFileSync(file, 'utf8');
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code === 'ENOENT') return null;
    throw e;
  }
  const n = Number(text.trim());
  return Number.isInteger(n) ? n : null;
}

interface HostState {
  memfd_noexec?: { previous: number };
}

function readState(file: string): HostState {
  try {
    return JSON.parse(fs.readFileSync(file, 'utf8')) as HostState;
  } catch {
    return {};
  }
}

function writeState(file: string, st: HostState): void {
  if (!st.memfd_noexec) {
    fs.rmSync(file, { force: true });
    return;
  }
  fs.mkdirSync(path.dirname(file), { recursive: true, mode: 0o755 });
  atomicWriteFileSync(file, `${JSON.stringify(st)}\n`);
}

function writeSysctl(file: string, value: number): void {
  try {
    fs.writeFileSync(file, `${value}\n`);
  } catch (e) {
    throw new LeashError(
      'host_setting_failed',
      `cannot set vm.memfd_noexec = ${value} (${file}): ${(e as Error).message}`,
      { setting: 'memfd_noexec', value },
    );
  }
  const now = readMemfdNoexec(file);
  if (now !== value)
    throw new LeashError('host_setting_failed', `vm.memfd_noexec reads ${now} after writing ${value} (${file})`, {
      setting: 'memfd_noexec',
      value,
    });
}

export interface HostSettings {
  /** Applies `config.host` (a reload: switched on now = applied, switched off = restored). */
  update(config: Pick<Config, 'host'>): void;
  /** Restores every value changed; never throws (returns what could not be restored). */
  restore(): string[];
}

/**
 * Applies `config.host` now. A setting switched on whose kernel support is missing, or that cannot be written,
 * throws `host_setting_failed` (the service does not start without a protection it was asked for).
 */
export function applyHostSettings(config: Pick<Config, 'host'>, paths: HostPaths = {}): HostSettings {
  const file = paths.memfdNoexec ?? MEMFD_NOEXEC;
  const stateFile = paths.stateFile ?? HOST_STATE;
  const on = (): void => {
    const current = readMemfdNoexec(file);
    if (current === null)
      throw new LeashError(
        'host_setting_failed',
        `host.memfd_noexec is set but this kernel has no vm.memfd_noexec (${file}; kernel 6.3 or later)`,
        { setting: 'memfd_noexec' },
      );
    const st = readState(stateFile);
    // A value recorded by a run that did not restore (a crash) is the host's own: keep it, not our 2.
    if (!st.memfd_noexec) {
      if (current >= MEMFD_NOEXEC_ENFORCED) return; // already enforced by someone else: nothing to restore
      writeState(stateFile, { ...st, memfd_noexec: { previous: current } });
    }
    if (current !== MEMFD_NOEXEC_ENFORCED) writeSysctl(file, MEMFD_NOEXEC_ENFORCED);
  };
  const restore = (): string[] => restoreHostSettings({ memfdNoexec: file, stateFile });
  if (config.host.memfd_noexec) on();
  return {
    update(next) {
      if (next.host.memfd_noexec) on();
      else {
        const left = restore();
        if (left.length) throw new LeashError('host_setting_failed', left.join('; '), { setting: 'memfd_noexec' });
      }
    },
    restore,
  };
}

/**
 * Restores the values recorded in the state file (the service's stop, `leash teardown`); a no-op when nothing was
 * recorded. Returns the problems (empty when all was restored) and keeps the record of what failed.
 */
export function restoreHostSettings(paths: HostPaths = {}): string[] {
  const file = paths.memfdNoexec ?? MEMFD_NOEXEC;
  const stateFile = paths.stateFile ?? HOST_STATE;
  const st = readState(stateFile);
  const problems: string[] = [];
  if (st.memfd_noexec) {
    try {
      writeSysctl(file, st.memfd_noexec.previous);
      delete st.memfd_noexec;
    } catch (e) {
      problems.push((e as Error).message);
    }
  }
  try {
    writeState(stateFile, st);
  } catch (e) {
    problems.push(`cannot update ${stateFile}: ${(e as Error).message}`);
  }
  return problems;
}

/** What `leash status` says: whether it is configured, and what the kernel reports now. */
export function memfdNoexecStatus(
  config: Pick<Config, 'host'>,
  file = MEMFD_NOEXEC,
): {
  configured: boolean;
  current: number | null;
  enforced: boolean;
} {
  let current: number | null = null;
  try {
    current = readMemfdNoexec(file);
  } catch {
    current = null;
  }
  return {
    configured: config.host.memfd_noexec,
    current,
    enforced: current !== null && current >= MEMFD_NOEXEC_ENFORCED,
  };
}
