/**
 * Host settings the service applies at start and restores at stop (config `host`, docs/policy.md "Host settings").
 * `host.max_user_namespaces` sets `user.max_user_namespaces = 0`: no process of the host can make a user
 * namespace, so no agent can mount a filesystem of its own (the race between such a mount and the watcher's mark
 * of it is then closed; docs/filesystem.md). It is per user namespace: the service changes the one it runs in, and
 * writing it needs CAP_SYS_RESOURCE there (not in the unit's default bounding set: a drop-in adds it).
 * `host.memfd_noexec` sets `vm.memfd_noexec = 2` (kernel 6.3+), which makes every memfd of the service's
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
import { LeashError } from '../../errors.js';
import { atomicWriteFileSync } from '../../store/files.js';
import type { MetricFamily } from '../../metrics/metrics.js';

/** The sysctl, as the service's PID namespace sees it (the kernel answers for the writer's namespace). */
export const MEMFD_NOEXEC = '/proc/sys/vm/memfd_noexec';
/** The sysctl, as the service's user namespace sees it. */
export const MAX_USER_NAMESPACES = '/proc/sys/user/max_user_namespaces';
/** Where the values found at start are kept until they are restored. */
export const HOST_STATE = '/run/leash/host-settings.json';
/** 2: memfd_create without MFD_NOEXEC_SEAL gets it anyway, MFD_EXEC is refused: no memfd is ever executable. */
export const MEMFD_NOEXEC_ENFORCED = 2;

export interface HostPaths {
  /** The sysctl files (tests: files of their own, or the real ones inside a namespace they made). */
  memfdNoexec?: string;
  maxUserNamespaces?: string;
  stateFile?: string;
}

type Key = 'memfd_noexec' | 'max_user_namespaces';

interface Setting {
  key: Key;
  sysctl: string;
  file: (p: HostPaths) => string;
  target: number;
  enforced: (v: number) => boolean;
  absent: string;
  denied: string;
}

const SETTINGS: Setting[] = [
  {
    key: 'memfd_noexec',
    sysctl: 'vm.memfd_noexec',
    file: (p) => p.memfdNoexec ?? MEMFD_NOEXEC,
    target: MEMFD_NOEXEC_ENFORCED,
    enforced: (v) => v >= MEMFD_NOEXEC_ENFORCED,
    absent: 'kernel 6.3 or later',
    denied: '',
  },
  {
    key: 'max_user_namespaces',
    sysctl: 'user.max_user_namespaces',
    file: (p) => p.maxUserNamespaces ?? MAX_USER_NAMESPACES,
    target: 0,
    enforced: (v) => v === 0,
    absent: 'a kernel with user namespaces',
    // The kernel makes the file read-only to a writer without CAP_SYS_RESOURCE in its user namespace.
    denied:
      ' (writing it needs CAP_SYS_RESOURCE: add it to the unit\'s CapabilityBoundingSet with a drop-in, docs/policy.md "Host settings")',
  },
];

/** A sysctl's current value, or null when the kernel has none. */
export function readSysctl(file: string): number | null {
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

/** The current vm.memfd_noexec, or null when the kernel has none (before 6.3). */
export function readMemfdNoexec(file = MEMFD_NOEXEC): number | null {
  return readSysctl(file);
}

type HostState = Partial<Record<Key, { previous: number }>>;

function readState(file: string): HostState {
  try {
    return JSON.parse(fs.readFileSync(file, 'utf8')) as HostState;
  } catch {
    return {};
  }
}

function writeState(file: string, st: HostState): void {
  if (!SETTINGS.some((x) => st[x.key])) {
    fs.rmSync(file, { force: true });
    return;
  }
  fs.mkdirSync(path.dirname(file), { recursive: true, mode: 0o755 });
  atomicWriteFileSync(file, `${JSON.stringify(st)}\n`);
}

function writeSysctl(x: Setting, file: string, value: number): void {
  try {
    fs.writeFileSync(file, `${value}\n`);
  } catch (e) {
    const code = (e as NodeJS.ErrnoException).code;
    throw new LeashError(
      'host_setting_failed',
      `cannot set ${x.sysctl} = ${value} (${file}): ${(e as Error).message}${code === 'EACCES' || code === 'EPERM' || code === 'EROFS' ? x.denied : ''}`,
      { setting: x.key, value },
    );
  }
  const now = readSysctl(file);
  if (now !== value)
    throw new LeashError('host_setting_failed', `${x.sysctl} reads ${now} after writing ${value} (${file})`, {
      setting: x.key,
      value,
    });
}

export interface HostSettings {
  /** Applies `config.host` (a reload: switched on now = applied, switched off = restored). */
  update(config: Pick<Config, 'host'>): void;
  /** Restores every value changed; never throws (returns what could not be restored). */
  restore(): string[];
}

function applyOne(x: Setting, paths: HostPaths, stateFile: string): void {
  const file = x.file(paths);
  const current = readSysctl(file);
  if (current === null)
    throw new LeashError(
      'host_setting_failed',
      `host.${x.key} is set but this kernel has no ${x.sysctl} (${file}; ${x.absent})`,
      { setting: x.key },
    );
  const st = readState(stateFile);
  // A value recorded by a run that did not restore (a crash) is the host's own: keep it, not ours.
  if (!st[x.key]) {
    if (x.enforced(current)) return; // already enforced by someone else: nothing to restore
    writeState(stateFile, { ...st, [x.key]: { previous: current } });
  }
  if (current !== x.target) writeSysctl(x, file, x.target);
}

/** Restores one recorded value (or all, `only` absent); returns the problems and keeps the record of what failed. */
function restoreSome(paths: HostPaths, only?: Key): string[] {
  const stateFile = paths.stateFile ?? HOST_STATE;
  const st = readState(stateFile);
  const problems: string[] = [];
  for (const x of SETTINGS) {
    const rec = st[x.key];
    if (!rec || (only && x.key !== only)) continue;
    try {
      writeSysctl(x, x.file(paths), rec.previous);
      delete st[x.key];
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

/**
 * Applies `config.host` now. A setting switched on whose kernel support is missing, or that cannot be written,
 * throws `host_setting_failed` (the service does not start without a protection it was asked for).
 */
export function applyHostSettings(config: Pick<Config, 'host'>, paths: HostPaths = {}): HostSettings {
  const stateFile = paths.stateFile ?? HOST_STATE;
  const all = { ...paths, stateFile };
  for (const x of SETTINGS) if (config.host[x.key]) applyOne(x, all, stateFile);
  return {
    update(next) {
      for (const x of SETTINGS) {
        if (next.host[x.key]) applyOne(x, all, stateFile);
        else {
          const left = restoreSome(all, x.key);
          if (left.length) throw new LeashError('host_setting_failed', left.join('; '), { setting: x.key });
        }
      }
    },
    restore: () => restoreSome(all),
  };
}

/**
 * Restores the values recorded in the state file (the service's stop, `leash teardown`); a no-op when nothing was
 * recorded. Returns the problems (empty when all was restored) and keeps the record of what failed.
 */
export function restoreHostSettings(paths: HostPaths = {}): string[] {
  return restoreSome(paths);
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
  return settingStatus(SETTINGS[0]!, config, file);
}

/** `leash status` for host.max_user_namespaces: configured, the value now, whether no user namespace can be made. */
export function maxUserNamespacesStatus(
  config: Pick<Config, 'host'>,
  file = MAX_USER_NAMESPACES,
): { configured: boolean; current: number | null; enforced: boolean } {
  return settingStatus(SETTINGS[1]!, config, file);
}

function settingStatus(
  x: Setting,
  config: Pick<Config, 'host'>,
  file: string,
): { configured: boolean; current: number | null; enforced: boolean } {
  let current: number | null = null;
  try {
    current = readSysctl(file);
  } catch {
    current = null;
  }
  return { configured: config.host[x.key], current, enforced: current !== null && x.enforced(current) };
}

/** The host settings as a metric family, each 1 when in force now, gathered at scrape time from the config now. */
export function hostSettingFamilies(config: Pick<Config, 'host'>, paths: HostPaths = {}): MetricFamily[] {
  return [
    {
      name: 'leash_host_setting',
      help: 'host hardening settings (config host): 1 in force now, 0 not',
      type: 'gauge',
      values: [
        {
          value: memfdNoexecStatus(config, paths.memfdNoexec).enforced ? 1 : 0,
          labels: { setting: 'memfd_noexec' },
        },
        {
          value: maxUserNamespacesStatus(config, paths.maxUserNamespaces).enforced ? 1 : 0,
          labels: { setting: 'max_user_namespaces' },
        },
      ],
    },
  ];
}
