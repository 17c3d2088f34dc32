// What the watcher needs from a subject's policy, and what `leash validate` should
// say about it: which filesystems must be marked, and how much of a whitelist the
// marks actually cover. Pure functions.
import { isGlob, normalizePath } from '../../engine/path.js';
import type { PolicyInput, SurfacePolicy } from '../../engine/types.js';
import type { FsCmdPolicy } from './addon.js';
import { effectiveNamespaces } from './namespaces.js';
import { systemLoaders } from './loaders.js';

export { effectiveNamespaces };

/**
 * The filesystem + commands part of a resolved policy (PolicyInput or a resolved config), for the
 * watcher. An absent commands.interpreters is `defaultInterpreters` (the system's dynamic loaders).
 */
export function fsCmdPolicyOf(
  p: Pick<PolicyInput, 'fail_mode' | 'commands' | 'enforce'> & {
    filesystem: SurfacePolicy & { watch?: string[]; namespaces?: 'deny' | 'allow' };
  },
  defaultInterpreters: () => string[] = systemLoaders,
): FsCmdPolicy {
  const watch = p.filesystem.watch;
  const interpreters = p.commands.interpreters ?? defaultInterpreters();
  return {
    fail_mode: p.fail_mode === 'open' ? 'open' : 'closed',
    ...(p.enforce === 'shadow' ? { shadow: true } : {}),
    filesystem: {
      mode: p.filesystem.mode,
      allow: [...p.filesystem.allow],
      deny: [...p.filesystem.deny],
      ...(p.filesystem.ask?.length ? { ask: [...p.filesystem.ask] } : {}),
      ...(watch && watch.length ? { watch: [...watch] } : {}),
      namespaces: effectiveNamespaces(p),
    },
    commands: {
      mode: p.commands.mode,
      allow: [...p.commands.allow],
      deny: [...p.commands.deny],
      interpreters: [...interpreters],
      ...(p.commands.ask?.length ? { ask: [...p.commands.ask] } : {}),
    },
  };
}

/** The longest non-glob directory prefix of a path entry (`/srv/*.log` -> `/srv`), or null when inert. */
export function nonGlobPrefix(entry: string): string | null {
  const n = normalizePath(entry);
  if (n === null) return null;
  if (!isGlob(n)) return n;
  const first = n.search(/[*?[]/);
  const slash = n.lastIndexOf('/', first);
  return slash <= 0 ? '/' : n.slice(0, slash);
}

/**
 * The paths whose filesystems must be marked for a policy: every filesystem entry's
 * non-glob prefix, the directory of every absolute command entry, and `filesystem.watch`. Basename command
 * entries name no filesystem (coverage of those is markCoverage's business).
 */
export function policyRoots(p: FsCmdPolicy | null): string[] {
  if (!p) return [];
  const out = new Set<string>();
  for (const w of p.filesystem.watch ?? []) {
    const n = typeof w === 'string' ? normalizePath(w) : null;
    if (n) out.add(n);
  }
  for (const e of [...p.filesystem.allow, ...p.filesystem.deny, ...(p.filesystem.ask ?? [])]) {
    const r = typeof e === 'string' ? nonGlobPrefix(e) : null;
    if (r) out.add(r);
  }
  for (const e of [...p.commands.allow, ...p.commands.deny, ...(p.commands.ask ?? [])]) {
    if (typeof e !== 'string' || !e.startsWith('/')) continue;
    const n = normalizePath(e);
    if (n && n !== '/') out.add(n.slice(0, n.lastIndexOf('/')) || '/');
  }
  return [...out].sort();
}

/** One line of /proc/self/mountinfo. */
export interface MountEntry {
  mountId: number;
  /** "major:minor": one filesystem may be mounted many times under the same dev. */
  dev: string;
  mountPoint: string;
  fsType: string;
}

function unescapeMount(s: string): string {
  return s.replace(/\\([0-7]{3})/g, (_m, o: string) => String.fromCharCode(parseInt(o, 8)));
}

/** Parses /proc/self/mountinfo. */
export function parseMountinfo(text: string): MountEntry[] {
  const out: MountEntry[] = [];
  for (const line of text.split('\n')) {
    if (!line) continue;
    const f = line.split(' ');
    const sep = f.indexOf('-');
    if (sep < 0 || f.length < sep + 2) continue;
    out.push({ mountId: Number(f[0]), dev: f[2]!, mountPoint: unescapeMount(f[4]!), fsType: f[sep + 1]! });
  }
  return out;
}

/** The mount a path lies on: the longest mount point that is a segment prefix of it (last mounted wins). */
export function mountOf(mounts: MountEntry[], p: string): MountEntry | null {
  let best: MountEntry | null = null;
  for (const m of mounts) {
    const mp = m.mountPoint;
    const under = mp === '/' || p === mp || p.startsWith(mp + '/');
    if (under && (!best || mp.length >= best.mountPoint.length)) best = m;
  }
  return best;
}

/**
 * Kernel filesystems whose files an agent cannot fill with a program of its own: the namespace scanner
 * (namespaces.ts) does not mark them when a subject mounts one.
 */
export const KERNEL_FILESYSTEMS: ReadonlySet<string> = new Set([
  'proc',
  'sysfs',
  'cgroup',
  'cgroup2',
  'devpts',
  'mqueue',
  'bpf',
  'debugfs',
  'tracefs',
  'securityfs',
  'nsfs',
  'pstore',
  'configfs',
  'binfmt_misc',
  'fusectl',
  'hugetlbfs',
]);

/** Filesystems no fanotify mark can cover or that hold no files an agent opens (mark coverage skips them). */
const PSEUDO = new Set([...KERNEL_FILESYSTEMS, 'autofs', 'efivarfs']);

export interface CoverageWarning {
  surface: 'filesystem' | 'commands';
  /** Mount points of filesystems the marks do not cover (opens/execs there are never judged). */
  unmarked: string[];
  message: string;
}

/**
 * Whether the marks a policy produces cover a whitelist. A whitelist means "everything
 * else is denied", but the watcher judges only filesystems it marks (those holding the
 * policy's paths, plus `filesystem.watch`): opens and execs elsewhere pass unjudged.
 */
export function markCoverage(opts: { policy: FsCmdPolicy; watch?: string[]; mounts: MountEntry[] }): CoverageWarning[] {
  const roots = [...policyRoots(opts.policy), ...(opts.watch ?? [])];
  const marked = new Set<string>();
  for (const r of roots) {
    const m = mountOf(opts.mounts, r);
    if (m) marked.add(m.dev);
    // A filesystem mounted beneath a root is marked too (the watcher's re-scan does it).
    for (const x of opts.mounts) if (r === '/' || x.mountPoint.startsWith(r + '/')) marked.add(x.dev);
  }
  const unmarked = [
    ...new Set(opts.mounts.filter((m) => !PSEUDO.has(m.fsType) && !marked.has(m.dev)).map((m) => m.mountPoint)),
  ].sort();
  const out: CoverageWarning[] = [];
  if (unmarked.length === 0) return out;
  for (const surface of ['filesystem', 'commands'] as const) {
    if (opts.policy[surface].mode !== 'whitelist') continue;
    const what = surface === 'filesystem' ? 'opens' : 'execs';
    out.push({
      surface,
      unmarked,
      message:
        `${surface} is a whitelist, but ${what} on ${unmarked.length} filesystem(s) are not watched ` +
        `(${unmarked.slice(0, 5).join(', ')}${unmarked.length > 5 ? ', ...' : ''}); add their paths to ` +
        `filesystem.watch to have them judged`,
    });
  }
  return out;
}
