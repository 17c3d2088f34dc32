// Namespaces an agent makes (issue #14). An agent can `unshare -Urm`, mount a tmpfs in its own mount
// namespace and run what it copies there: a new filesystem no mark of the watcher covers. This scan
// finds subject processes whose mount namespace is not the watcher's (a namespace inode, once seen, is
// remembered until no process is in it), and marks every filesystem mounted there that is in no mount
// of the watcher's own namespace (FAN_MARK_FILESYSTEM through /proc/PID/root/<mount point>): a host
// filesystem is never marked from here. A mount notification on each namespace found
// (FAN_MARK_MNTNS, Linux 6.14+) re-reads its mounts as soon as one is attached; without it the scan
// re-reads them every round. Under `filesystem.namespaces: deny` a subject process found in a user
// namespace of its own is killed (`namespace_denied`). A subject process in the watcher's own user namespace is
// in no mount namespace of its making, so its mounts are never attributed to it.
import fs from 'node:fs';
import type { DecisionRecord } from '../../log/decisions.js';
import type { NativeAddon, NativeMountWatch, NativeWatcher, WatcherSubject } from '../../native.js';
import { KERNEL_FILESYSTEMS, parseMountinfo } from './policy.js';

export interface NamespaceStatus {
  /** Mount namespaces of subjects other than the watcher's, known now. */
  known: number;
  /** Filesystems marked because a subject mounted them in a namespace of its own (ever), and their devices. */
  marked: number;
  markedDevs: string[];
  /** Processes killed under namespaces: deny (ever). */
  killed: number;
  /** Whether mount notifications (FAN_MARK_MNTNS) drive the re-reading. */
  mountEvents: boolean;
  /** Mounts attached in the namespaces watched, as notified (ever). */
  notified: number;
  /** Marks refused (errno code), by device. */
  markErrors: { dev: string; code: string }[];
}

export interface NamespaceScanner {
  scan(): void;
  status(): NamespaceStatus;
  close(): void;
}

interface KnownNs {
  /** A process in it, through which its mounts are read (replaced when it exits). */
  pid: number;
  seenInScan: number;
}

export interface NamespaceScannerOptions {
  native: NativeAddon;
  watcher: NativeWatcher;
  subjects: () => ReadonlyMap<number, WatcherSubject>;
  log: { write?(rec: DecisionRecord): string };
  warn: (obj: Record<string, unknown>) => void;
  /** The /proc to read (tests: the real one). */
  proc?: string;
}

function nsIno(proc: string, pid: string, kind: 'mnt' | 'user'): number | null {
  try {
    return fs.statSync(`${proc}/${pid}/ns/${kind}`).ino;
  } catch {
    return null;
  }
}

/** Under which switch a subject is: its policy's, or (no policy) its fail mode's. */
function denies(s: WatcherSubject): boolean {
  if (!s.policy) return s.failMode !== 'open';
  return effectiveNamespaces(s.policy) === 'deny';
}

export function createNamespaceScanner(o: NamespaceScannerOptions): NamespaceScanner {
  const proc = o.proc ?? '/proc';
  const ownMnt = nsIno(proc, 'self', 'mnt');
  const ownUser = nsIno(proc, 'self', 'user');
  const known = new Map<number, KnownNs>();
  const markedDevs = new Set<string>();
  const markErrors = new Map<string, string>();
  let killed = 0;
  let notified = 0;
  let round = 0;
  let mountWatch: NativeMountWatch | null = null;
  try {
    const mw = new o.native.MountWatch((n) => {
      notified += n;
      rereadAll();
    });
    if (mw.supported) mountWatch = mw;
    else mw.close();
  } catch {
    mountWatch = null;
  }

  const ownDevs = (): Set<string> => {
    try {
      return new Set(parseMountinfo(fs.readFileSync(`${proc}/self/mountinfo`, 'utf8')).map((m) => m.dev));
    } catch {
      return new Set();
    }
  };

  /** Marks every filesystem mounted in the namespace of `pid` that is in no mount of ours. */
  const markMounts = (pid: number, ours: Set<string>): void => {
    let text: string;
    try {
      text = fs.readFileSync(`${proc}/${pid}/mountinfo`, 'utf8');
    } catch {
      return; // gone
    }
    for (const m of parseMountinfo(text)) {
      if (ours.has(m.dev) || markedDevs.has(m.dev) || KERNEL_FILESYSTEMS.has(m.fsType)) continue;
      const [maj, min] = m.dev.split(':').map(Number) as [number, number];
      const at = `${proc}/${pid}/root${m.mountPoint === '/' ? '' : m.mountPoint}`;
      try {
        o.watcher.mark(at, 'agent', maj, min);
        markedDevs.add(m.dev);
        markErrors.delete(m.dev);
        o.warn({
          msg: 'marked a filesystem a subject mounted in a namespace of its own',
          dev: m.dev,
          fsType: m.fsType,
          pid,
        });
      } catch (e) {
        const code = (e as { code?: string }).code ?? 'EUNKNOWN';
        // EXDEV: what /proc/PID/root names is not the filesystem mountinfo said (moved meanwhile): the next round.
        if (!markErrors.has(m.dev))
          o.warn({ msg: 'cannot mark a subject namespace filesystem', dev: m.dev, code, pid });
        markErrors.set(m.dev, code);
      }
    }
  };

  const rereadAll = (): void => {
    const ours = ownDevs();
    for (const ns of known.values()) markMounts(ns.pid, ours);
  };

  const logDenied = (action: 'block' | 'would_block', pid: number, uid: number, userIno: number): void => {
    o.log.write?.({
      uid,
      surface: 'commands',
      action,
      reason: 'namespace_denied',
      subject: { pid, user_ns: userIno },
      rule: 'filesystem.namespaces',
    });
  };

  const kill = (pid: number, uid: number, userIno: number): void => {
    if (!o.native.nsKill(pid, userIno)) return;
    killed++;
    logDenied('block', pid, uid, userIno);
  };

  // Shadow mode: the kill is logged once per process as would_block and not done; its mounts are marked as allowed.
  const shadowLogged = new Set<number>();
  const shadowed = (pid: number, uid: number, userIno: number): void => {
    if (shadowLogged.has(pid)) return;
    if (shadowLogged.size > 4096) shadowLogged.clear();
    shadowLogged.add(pid);
    logDenied('would_block', pid, uid, userIno);
  };

  const scan = (): void => {
    const subjects = o.subjects();
    if (subjects.size === 0 || ownMnt === null || ownUser === null) return;
    round++;
    let entries: string[];
    try {
      entries = fs.readdirSync(proc);
    } catch {
      return;
    }
    let ours: Set<string> | null = null;
    for (const name of entries) {
      const c = name.charCodeAt(0);
      if (c < 48 || c > 57) continue;
      let uid: number;
      try {
        uid = fs.statSync(`${proc}/${name}`).uid;
      } catch {
        continue;
      }
      const s = subjects.get(uid);
      if (!s) continue;
      const pid = Number(name);
      const user = nsIno(proc, name, 'user');
      if (user !== null && user !== ownUser && denies(s)) {
        if (!s.policy?.shadow) {
          kill(pid, uid, user);
          continue;
        }
        shadowed(pid, uid, user);
      }
      // A mount namespace a process in our own user namespace is in was made by a privileged process (systemd's
      // private tmp and credentials ramfs for a unit, `ip netns exec`): an unprivileged one can neither make nor
      // enter a mount namespace there. Only one made in a user namespace of the subject's own is the subject's.
      if (user !== null && user === ownUser) continue;
      const mnt = nsIno(proc, name, 'mnt');
      if (mnt === null || mnt === ownMnt) continue;
      const k = known.get(mnt);
      if (k) {
        k.seenInScan = round;
        if (k.pid !== pid && !fs.existsSync(`${proc}/${k.pid}`)) k.pid = pid;
        if (!mountWatch) markMounts(k.pid, (ours ??= ownDevs()));
        continue;
      }
      known.set(mnt, { pid, seenInScan: round });
      // The notification first, then the read: a mount attached in between is seen by one or the other.
      if (mountWatch) {
        try {
          mountWatch.mark(`${proc}/${pid}/ns/mnt`);
        } catch (e) {
          o.warn({ msg: 'cannot watch a subject mount namespace', pid, code: (e as { code?: string }).code });
        }
      }
      markMounts(pid, (ours ??= ownDevs()));
    }
    for (const [ino, k] of known) if (k.seenInScan !== round) known.delete(ino); // nobody left in it
  };

  return {
    scan,
    status: () => ({
      known: known.size,
      marked: markedDevs.size,
      markedDevs: [...markedDevs].sort(),
      killed,
      mountEvents: mountWatch !== null,
      notified,
      markErrors: [...markErrors].map(([dev, code]) => ({ dev, code })),
    }),
    close() {
      mountWatch?.close();
      mountWatch = null;
    },
  };
}

/**
 * `filesystem.namespaces` as enforced: absent means deny when the filesystem or the commands surface is a
 * whitelist (an agent's own namespace is where it can mount what no mark covers yet), allow otherwise.
 */
export function effectiveNamespaces(p: {
  filesystem: { mode: string; namespaces?: 'deny' | 'allow' };
  commands: { mode: string };
}): 'deny' | 'allow' {
  return (
    p.filesystem.namespaces ?? (p.filesystem.mode !== 'blacklist' || p.commands.mode !== 'blacklist' ? 'deny' : 'allow')
  );
}
