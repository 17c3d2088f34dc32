// The map protocol between the service (supervisor) and the watcher: JSON lines over
// the watcher's fd 3. Every request carries an id and is acknowledged with that id.
import { LineReader } from '../../formats/lines.js';
import type { AskOutcome } from '../../engine/approval.js';
import type { FsCmdPolicy, HeldAsk, WatcherStats, WatcherSubject } from './addon.js';
import type { NamespaceStatus } from './namespaces.js';

export type ToWatcher =
  | { id: number; op: 'init'; subjects: WatcherSubject[]; watch: string[] }
  | { id: number; op: 'set'; subject: WatcherSubject }
  /** Many subjects in one change: one map swap and one mark scan for all (a start, a fleet's accounts). */
  | { id: number; op: 'setMany'; subjects: WatcherSubject[] }
  | { id: number; op: 'status' }
  /**
   * A new service takes over an orphaned watcher (adopt.ts): the whole current map and watch list, on the
   * connection to the watcher's adoption socket, which is the channel from then on.
   */
  | { id: number; op: 'adopt'; subjects: WatcherSubject[]; watch: string[] }
  /** A deliberate stop: the watcher closes its group (unanswered events are let through by the kernel) and exits. */
  | { id: number; op: 'release' }
  /** Reopen the decision log by its path (after a rename-style rotation). */
  | { id: number; op: 'reopen' }
  /** The approvals queue's outcome for a held event (`hold`: the id of its `ask` line). */
  | { id: number; op: 'answer'; hold: number; outcome: AskOutcome }
  /** Test hook: honoured only when the watcher runs with LEASH_TEST_WEDGE_JS=1. */
  | { id: number; op: 'wedge' }
  /** Test hook (same switch): the watcher opens and reads a file itself, e.g. on its own marked filesystem. */
  | { id: number; op: 'selfopen'; path: string };

export interface WatcherStatus {
  pid: number;
  /** 'standby': holds the group, reads nothing until the active watcher is gone. */
  role: 'active' | 'standby';
  /** The group's and the in-flight table's descriptor numbers in this process (a standby takes them by pidfd_getfd). */
  groupFd?: number;
  tableFd?: number;
  /** Paths a FAN_MARK_FILESYSTEM mark was put on (one per filesystem). */
  marks: string[];
  /** Roots whose filesystem could not be marked, with the errno code. */
  markErrors: { path: string; code: string }[];
  subjects: number;
  droppedAllows: number;
  /** The watcher's PID namespace (inode; pidns.ts): outside the initial one, the host's processes have no PID in it. */
  pidNs: number | null;
  /** Namespaces subjects made (namespaces.ts): known now, filesystems marked and processes killed since start. */
  namespaces?: NamespaceStatus;
  stats: WatcherStats;
  /** Which build of the watcher runs (its script file's inode and mtime at its start: adopt.ts compares them). */
  build?: string;
}

export type FromWatcher =
  | { id: number; ok: true; status?: WatcherStatus; bytes?: number; held?: boolean }
  | { id: number; ok: false; error: string; code?: string };

/** A held open or exec, sent by the watcher unasked (no `id`): the service asks its approvals queue and answers. */
export interface WatcherAsk extends HeldAsk {
  /** The asking process's command line (/proc/PID/cmdline), for the approver. */
  cmdline: string[];
}
/** A standby's exit status when the active it was spawned for had exited before it could take the group (EX_TEMPFAIL). */
export const EXIT_ACTIVE_GONE = 75;

/** A standby that took over the group says so unasked (the supervisor promotes it: takeover.ts). */
export type WatcherEvent = { ask: WatcherAsk } | { takeover: { pid: number } };

export type { FsCmdPolicy, WatcherSubject };

/** A map-protocol line longer than this is refused (the whole starting map is one `init` line). */
const MAX_MAP_LINE = 256 * 1024 * 1024;

/**
 * Splits a byte stream into JSON lines (the one line reader, src/formats/lines.ts); calls `on` for
 * each parsed message and `onBad` for a line that is not JSON or is over the limit.
 */
export function lineReader<T>(on: (msg: T) => void, onBad: (line: string) => void): (chunk: Buffer | string) => void {
  const lines = new LineReader(
    (bytes) => {
      const line = bytes.toString('utf8');
      if (!line.trim()) return;
      let msg: T;
      try {
        msg = JSON.parse(line) as T;
      } catch {
        onBad(line);
        return;
      }
      on(msg);
    },
    () => onBad(`(a line over ${MAX_MAP_LINE} bytes)`),
    { maxBytes: MAX_MAP_LINE },
  );
  return (chunk) => lines.push(chunk);
}
