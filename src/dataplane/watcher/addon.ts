/**
 * The watcher's part of the native addon (native/watcher/register.cc), as src/native.ts's nativeWatcher() hands it
 * over: the fanotify loop, its matcher and decision lines, and the namespaces agents make.
 */
/** The filesystem + commands part of a subject's policy, as the native matcher reads it. */
export interface FsCmdPolicy {
  fail_mode: 'closed' | 'open';
  /**
   * Shadow mode: the native judge answers allow where it would deny and queues the decision as
   * `would_block` (its reason and rule the block's); the namespace scan logs instead of killing.
   */
  shadow?: boolean;
  /** `watch`: extra paths whose filesystems are marked (config filesystem.watch); the matcher ignores it. */
  filesystem: {
    mode: 'whitelist' | 'blacklist';
    allow: string[];
    deny: string[];
    watch?: string[];
    /**
     * `deny`: a process of the subject found in a user namespace of its own is killed (`namespace_denied`);
     * `allow`: it is left running (its own filesystems are still marked). Absent: deny when filesystem or
     * commands is a whitelist. The matcher ignores it (the watcher's namespace scan reads it).
     */
    namespaces?: 'deny' | 'allow';
    /** Ask entries: an open they cover is held for an approver (WatcherOptions.hold), or blocked. */
    ask?: string[];
  };
  /** `interpreters`: commands.interpreters (absolute paths), implied only as an allowed program's interpreter. */
  commands: {
    mode: 'whitelist' | 'blacklist';
    allow: string[];
    deny: string[];
    interpreters?: string[];
    ask?: string[];
  };
}
/** Opaque handle to a natively compiled FsCmdPolicy. */
export type NativeFsPolicyHandle = { readonly __nativeFsPolicy: unique symbol };
export interface NativeVerdict {
  action: 'allow' | 'block';
  reason:
    | 'allow_entry'
    | 'mode_allow'
    | 'deny_entry'
    | 'not_allowed'
    | 'no_policy'
    | 'engine_error'
    | 'interpreter_of'
    | 'interpreter_direct'
    | 'namespace_denied';
  rule: string | null;
}
/** One map entry: a subject UID and its policy (null = subject with no policy, fail mode decides). */
export interface WatcherSubject {
  uid: number;
  policy: FsCmdPolicy | null;
  failMode: 'closed' | 'open';
}
/** What one drain hands JavaScript: the decision-log lines the loop queued, formatted natively. */
export interface WatcherDrain {
  /**
   * Whole decision-log lines (native/watcher/decisionline.cc), byte for byte what `formatDecision`
   * writes for the same decision, with the time the loop decided and a fresh ref.
   */
  lines: Buffer;
  /** Lines in `lines`. */
  count: number;
  /** Of which blocks. */
  denies: number;
  /** Allow decisions counted instead of queued since the last drain (log pressure). */
  droppedAllows: number;
  /**
   * With allowLines summary or sampled: the plain allows counted since the last drain, flat, four
   * numbers per subject and surface: uid, exec (1: commands, 0: filesystem), allowed, written whole.
   */
  allows?: number[];
  /**
   * Events from processes outside the watcher's PID namespace (pid 0), allowed unjudged, since start:
   * [opens, execs] (docs/filesystem.md, "PID namespaces").
   */
  foreignPid?: number[];
  /** Events held for an approver since the last drain (native/watcher/hold.h): answer each with `answer(id, allow)`. */
  asks: HeldAsk[];
}
/** One held open or exec, as the loop passes it up. */
export interface HeldAsk {
  id: number;
  pid: number;
  uid: number;
  surface: 'filesystem' | 'commands';
  /** The path opened, or the binary executed. */
  subject: string;
  /** The ask entry that covers it. */
  rule: string | null;
  /** When the loop itself denies it unanswered (ms since the epoch). */
  deadline: number;
}
/** One case for the decision-line differential test (`formatDecisionLines`). */
export interface DecisionLineCase {
  ts: number;
  uid: number;
  exec: boolean;
  allow: boolean;
  reason: NativeVerdict['reason'] | 'hardlinked';
  /** The path's raw bytes, as readlink gives them. */
  subject: Buffer;
  rule: string | null;
  ref: string;
  /** interpreter_of: the served program's raw bytes (written as the subject's `interpreterOf`). */
  interpreterOf?: Buffer;
  /** hardlinked: the file's inode and link count (written after the path, both or neither). */
  inode?: number;
  nlink?: number;
}
export interface WatcherOptions {
  /** Called (no arguments) from the event loop when records are waiting; call drain(). */
  onRecords: () => void;
  /** Read crafted events from this descriptor instead of a fanotify group (tests). */
  eventFd?: number;
  /** Write answers here instead of the group (tests). */
  responseFd?: number;
  /** Exit with stacks on stderr when the loop or the JS heartbeat stops this long; 0 = off. */
  watchdogMs?: number;
  /**
   * Stay awake this long after an event of a burst (the previous batch less than 5 spins ago),
   * yielding the CPU, before sleeping in poll(); off for 100 ms after a yield that took over
   * 0.5 ms (the CPU is shared). Default 0 here; the watcher process uses 20.
   */
  spinUs?: number;
  /** Nice value for the loop thread. */
  nice?: number;
  /** Pending allow records beyond this are counted instead of queued (denies always queue). */
  queueAllows?: number;
  /**
   * Plain allows (config logging.allows): 'all' queues each one's line (default); 'summary' only
   * counts them (drain's `allows`), never formatting a line; 'sampled' counts them and queues the
   * first of each subject and surface per `sampleMs` (default 60000).
   */
  allowLines?: 'all' | 'summary' | 'sampled';
  sampleMs?: number;
  /**
   * How the opener's credentials are read: 'pidfd-cache' (default: one pidfd kept per live
   * process, one ioctl per event), 'report-pidfd' (FAN_REPORT_PIDFD: a new pidfd from the kernel
   * on every event), 'proc' (/proc/<pid>/status). The last two are for measurement.
   */
  identity?: 'pidfd-cache' | 'report-pidfd' | 'proc';
  /**
   * Measurement only (bench/fanotify): false skips the hard-link check (native/watcher/hardlinks.h) and asks
   * statx for the mount ID alone, as before the check; the default is true.
   */
  linkCheck?: boolean;
  /**
   * Measurement only (bench/fanotify): read up to 64 KiB of events per read(2) instead of one event
   * (watcher.h says why one: a watcher killed inside read(2) then loses at most one event).
   */
  readBatch?: boolean;
  /**
   * Measurement only (bench/fanotify): false skips the judge-time histogram's two clock reads per
   * subject-era event (the metrics' leash_watcher_judge_seconds); the default is true.
   */
  metrics?: boolean;
  /** The PID whose events are always allowed (default: this process). */
  selfPid?: number;
  /**
   * Be the standby of the watcher process `pid`: take its group (`groupFd`) and in-flight table
   * (`tableFd`) with pidfd_getfd, and after start() read nothing until that process has exited;
   * then answer the events it had read and not answered (its table), and read on.
   */
  standbyOf?: { pid: number; groupFd: number; tableFd: number };
  /**
   * Hold the events an ask entry covers for an approver (native/watcher/hold.h): at most `max` at once and
   * `perSubject` per subject (beyond: denied at once, approval_limit), each denied unanswered after its
   * surface's deadline (approval_timeout). Absent: an ask is denied at once (approval_unavailable).
   */
  hold?: { max: number; perSubject: number; filesystemMs: number; commandsMs: number };
}
export interface WatcherStats {
  events: number;
  self: number;
  nonSubject: number;
  subjectAllow: number;
  subjectDeny: number;
  unknownProcess: number;
  /** Opens and execs from processes outside the watcher's PID namespace (pid 0): allowed unjudged. */
  foreignPidOpen: number;
  foreignPidExec: number;
  procFallback: number;
  writeErrors: number;
  /** Subject events that came through another mount namespace's mount and were renamed through ours. */
  foreignMount: number;
  /** Execs allowed as the interpreter of an allowed program. */
  interpreterOf: number;
  /** Decisions turned into a block because the file has other names (`hardlinked`: native/watcher/hardlinks.h). */
  hardlinked: number;
  /** Execs of a remembered interpreter refused the implication (the process was not in a binfmt loader). */
  execStateRefused: number;
  /** Exec-state entries dropped because the table was full. */
  execStateDropped: number;
  /** Takeovers done (0 or 1), and the dead watcher's unanswered events this watcher answered then. */
  takeovers: number;
  takeoverAllowed: number;
  takeoverDenied: number;
  /** Of those, events read by the dead watcher but never recorded (it was killed inside read). */
  takeoverUnrecorded: number;
  /** Events the dead watcher had read but not recorded, found in the in-flight table's read area and answered like recorded ones. */
  takeoverFromArea: number;
  /** The highest descriptor number the takeover fenced and answered by number. */
  takeoverHi: number;
  /** The errno that cut the fence short (EMFILE: out of descriptors), 0 when it was whole. */
  takeoverFenceErrno: number;
  /** Recorded events whose process could not be read (denied). */
  takeoverNoCreds: number;
  /** Events read from the queue and judged during the takeover, and the errno that ended that drain (0: empty). */
  takeoverDrained: number;
  takeoverDrainErrno: number;
  /** Times this standby found another standby had taken over first and went on waiting on that one. */
  standbyFollowed: number;
  loopError: number;
  running: boolean;
  /** Decisions by surface, action and reason since start (the ones counted instead of queued included). */
  decisions: {
    surface: 'filesystem' | 'commands';
    action: 'allow' | 'block' | 'would_block';
    reason: string;
    count: number;
  }[];
  /** Time from reading a subject-era event to its answer: `buckets[i]` are those <= bounds[i] seconds, the last +Inf. */
  judge: { bounds: number[]; buckets: number[]; sum: number; count: number };
  /** Decision lines waiting for JavaScript's next drain, and of those allows. */
  queued: number;
  queuedAllows: number;
  /** Allow decisions counted instead of written since start (log pressure). */
  allowsCounted: number;
  /** Events held now, and since start: held, answered allow, answered deny, denied at their deadline, refused over the bound. */
  held: number;
  heldTotal: number;
  heldAllowed: number;
  heldDenied: number;
  heldExpired: number;
  heldLimited: number;
}
export interface NativeWatcher {
  readonly fd: number;
  /** The in-flight table (a memfd: one slot per event descriptor number, the PID of each unanswered event). */
  readonly tableFd: number;
  /** A standby that has not taken over yet. */
  readonly standby: boolean;
  /** What the takeover answered (returned once): subject events by PID, and unrecorded ones (pid 0). */
  takeoverRecords(): { pid: number; uid: number; exec: boolean; allow: boolean; recorded: boolean }[];
  readonly reportsPidfd: boolean;
  start(): void;
  mark(path: string, scope?: 'filesystem' | 'mount'): void;
  /**
   * Marks (FAN_MARK_FILESYSTEM, through the descriptor opened here) a filesystem an agent mounted in a
   * namespace of its own, reached as /proc/PID/root/<mount point>, only when that descriptor is on device
   * major:minor (EXDEV otherwise). Its files' names are the agent's: under a whitelist they are
   * `namespace_denied`.
   */
  mark(path: string, scope: 'agent', major: number, minor: number): void;
  setSubjects(entries: WatcherSubject[]): number;
  drain(): WatcherDrain;
  /** Answers a held event (HeldAsk.id); false when it is no longer held (its deadline passed). */
  answer(id: number, allow: boolean): boolean;
  heartbeat(): void;
  stats(): WatcherStats;
  close(): void;
}

export interface NativeMountWatch {
  readonly supported: boolean;
  readonly initErrno: number;
  /** FAN_MARK_MNTNS on /proc/PID/ns/mnt. */
  mark(nsPath: string): void;
  close(): void;
}

export interface BpfLsmProbe {
  /** The LSM hook the probe program is for, and its BTF id (0: not in the kernel's BTF). */
  hook: string;
  btfId: number;
  /** The LSM program: loaded, or the errno name the kernel refused it with. */
  lsm: { loaded: boolean; code: string | null };
  /** A socket filter with the same two instructions: shows the loader itself works. */
  control: { loaded: boolean; code: string | null };
}

export interface NativeWatcherPart {
  compileFsPolicy(policy: FsCmdPolicy): NativeFsPolicyHandle;
  nativeMatch(
    handle: NativeFsPolicyHandle | null,
    /** 'interpreter': a commands subject with `interpreterOf` set (the exec state's case). */
    kind: 'filesystem' | 'commands' | 'interpreter',
    subject: string,
    failMode?: 'closed' | 'open',
  ): NativeVerdict;
  /** Batch form for the differential test: "action|reason|rule" per case ("\x01null" for no rule). */
  nativeMatchBatch(
    handle: NativeFsPolicyHandle | null,
    kinds: ('filesystem' | 'commands' | 'interpreter')[],
    subjects: string[],
    failMode?: 'closed' | 'open',
  ): string[];
  /** The watcher's line formatter on given cases (test hook); `subjects`/`rules` as V8 decodes the same bytes. */
  formatDecisionLines(cases: DecisionLineCase[]): { text: Buffer; subjects: string[]; rules: (string | null)[] };
  Watcher: new (opts: WatcherOptions) => NativeWatcher;
  /**
   * Mount events (native/watcher/mntns.cc): FAN_REPORT_MNT, FAN_MARK_MNTNS (Linux 6.14+). `onMounts(n)` is called
   * with the number of mounts attached (coalesced) in the namespaces marked. `supported` is false (and
   * `initErrno` says why) on a kernel without them.
   */
  MountWatch: new (onMounts: (count: number) => void) => NativeMountWatch;
  /** SIGKILL to `pid` by pidfd if it is still in the user namespace of inode `userNsIno`; true when sent. */
  nsKill(pid: number, userNsIno: number): boolean;
  /** Whether a BPF LSM program loads here (nothing attached), beside a socket filter as the control. */
  probeBpfLsm(): BpfLsmProbe;
}
