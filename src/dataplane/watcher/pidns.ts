// PID namespaces and the watcher (docs/filesystem.md, "PID namespaces"): the kernel names an opener in the
// watcher's own PID namespace, with pid 0 when it has none there. Such events are allowed unjudged by the
// native loop and counted; this file turns the counts into rate-limited decision-log lines, and says which
// namespace a process is in and what that means for `leash status` and `leash doctor`.
import fs from 'node:fs';
import { formatUnattributed } from '../../log/decisions.js';

/** The inode of the initial PID namespace (the kernel's PROC_PID_INIT_INO): the host's own. */
export const INITIAL_PID_NS = 4026531836;

/** The inode of `pid`'s PID namespace (/proc/PID/ns/pid), or null when it cannot be read. */
export function pidNsOf(pid: number | 'self' = 'self'): number | null {
  try {
    return fs.statSync(`/proc/${pid}/ns/pid`).ino;
  } catch {
    return null;
  }
}

/**
 * What `leash status` and `leash doctor` say about the processes' PID namespaces (`ns`: process name ->
 * namespace inode): one warning per process outside the initial namespace, with the foreign events counted.
 */
export function pidNsWarnings(ns: Record<string, number>, foreignEvents: number | null): string[] {
  const out: string[] = [];
  for (const [proc, ino] of Object.entries(ns)) {
    if (ino === INITIAL_PID_NS) continue;
    out.push(
      `the ${proc} runs in PID namespace ${ino}, not the host's initial one (${INITIAL_PID_NS}): ` +
        "processes outside it (the host's, other containers') have no PID there, so their opens and execs " +
        `on marked filesystems are allowed unjudged (foreign_pid_namespace${
          foreignEvents === null ? '' : `, ${foreignEvents} so far`
        }), and an agent running outside it is not confined on files and commands`,
    );
  }
  return out;
}

const SURFACES = ['filesystem', 'commands'] as const;

/**
 * The decision-log lines for events from outside the PID namespace: per surface, one line per `intervalMs` at
 * most, written `intervalMs` after the first event it counts (`subject.allowed`: how many, `since`: the first),
 * and a journal warning the first time. `update` takes the loop's totals at each drain; `flush` writes what is
 * counted and not yet logged (at close).
 */
export function createForeignPidLog(o: {
  intervalMs: number;
  write: (text: string) => void;
  warn: (obj: Record<string, unknown>) => void;
  now?: () => number;
}) {
  const now = o.now ?? Date.now;
  const kinds = SURFACES.map((surface) => ({ surface, seen: 0, logged: 0, since: null as number | null }));
  let warned = false;
  const lineOf = (k: (typeof kinds)[number]): string => {
    const text = formatUnattributed({
      surface: k.surface,
      action: 'allow',
      reason: 'foreign_pid_namespace',
      subject: { allowed: k.seen - k.logged, since: new Date(k.since ?? now()).toISOString() },
      rule: null,
    });
    k.logged = k.seen;
    k.since = null;
    return text;
  };
  return {
    update(totals: number[] | undefined): void {
      const t = now();
      let text = '';
      for (let i = 0; i < kinds.length; i++) {
        const k = kinds[i]!;
        const n = totals?.[i] ?? k.seen;
        if (n > k.seen) {
          k.since ??= t;
          k.seen = n;
        }
        if (k.since !== null && t - k.since >= o.intervalMs) text += lineOf(k);
      }
      if (!warned && kinds.some((k) => k.seen > 0)) {
        warned = true;
        o.warn({
          msg: "opens or execs from processes outside the watcher's PID namespace (pid 0): allowed unjudged, counted in the decision log (foreign_pid_namespace)",
          pidNs: pidNsOf(),
        });
      }
      if (text !== '') o.write(text);
    },
    flush(): void {
      let text = '';
      for (const k of kinds) if (k.seen > k.logged) text += lineOf(k);
      if (text !== '') o.write(text);
    },
  };
}
