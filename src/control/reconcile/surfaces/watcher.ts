/**
 * Filesystem and commands' start in the service: the fanotify watcher's supervisor (the surface itself:
 * src/dataplane/watcher/supervisor.ts) spawned with the first plan's whole map, driven with execute.ts's
 * watcherSubjectOf. A subject's map entry is acknowledged by the watcher before apply returns, so a new subject is
 * denied on the filesystem before any other surface lets it through.
 */
import type { Asker } from '../../../engine/approval.js';
import type { Config } from '../../config/types.js';
import { createFsSupervisor } from '../../../dataplane/watcher/index.js';
import type { LeashError } from '../../../errors.js';
import { findJournalSocket } from '../../../log/journal.js';
import type { WatcherSubject } from '../../../dataplane/watcher/addon.js';
import type { WatcherStatus } from '../../../dataplane/watcher/protocol.js';
import { histogramFamily, pidNamespaceFamily, type MetricFamily } from '../../../metrics/metrics.js';
import { drive, watcherSubjectOf, type Driven } from '../execute.js';
import type { Action } from '../plan.js';

export interface WatcherSurfaceOptions {
  config: Config;
  /** The first plan's actions: the watcher starts with the whole map (every subject resolved, or "no policy"). */
  initial: Action[];
  /** The floor's fail_mode at start, for "no policy" entries until the next pass pushes it. */
  failMode: 'closed' | 'open';
  wrap?: string[];
  args?: string[];
  onFatal: (e: LeashError) => void;
  onRespawn: (info: { pid: number; deaths: number; takeover: boolean }) => void;
  onStandbyUnavailable?: (why: string) => void;
  /** The approvals queue: opens and execs an ask entry covers are held by the watcher for it. */
  ask?: Asker;
}

/**
 * The watcher's bounds and deadlines on held events: its own, lower total (every event held costs each answer the
 * group gets a wake-up of the held process: docs/approvals.md, Load), within the queue's (a hold beyond them would
 * be refused there anyway).
 */
export function watcherHoldSettings(c: Config): {
  max: number;
  perSubject: number;
  filesystemMs: number;
  commandsMs: number;
} {
  const a = c.approvals;
  return {
    max: Math.min(a.max_pending, a.max_held_opens),
    perSubject: Math.min(a.max_pending_per_subject, a.max_held_opens),
    filesystemMs: a.deadlines.filesystem * 1000,
    commandsMs: a.deadlines.commands * 1000,
  };
}

export async function startWatcherSurface(o: WatcherSurfaceOptions): Promise<Driven> {
  const c = o.config;
  const subjects = o.initial.flatMap((a): WatcherSubject[] => {
    if (a.kind === 'add' || a.kind === 'reapply') return [watcherSubjectOf(a)];
    if (a.kind === 'fail' || a.kind === 'orphan') return [{ uid: a.uid, policy: null, failMode: c.fail_mode }];
    return [];
  });
  // The watcher sends to the journal the service found (config logging.journal), if any.
  const journal = findJournalSocket(c.logging.journal);
  const journalArgs = [
    ...(journal === null ? [] : ['--journal', journal, '--journal-allows', String(c.logging.journal_allows)]),
    ...['--allows', c.logging.allows, '--allow-summary-ms', String(c.logging.allow_summary_seconds * 1000)],
  ];
  const sup = createFsSupervisor({
    subjects,
    watch: c.filesystem.watch,
    decisions: c.logging.decisions,
    ...(o.wrap ? { wrap: o.wrap } : {}),
    args: [...(o.args ?? []), ...journalArgs],
    onFatal: o.onFatal,
    onRespawn: o.onRespawn,
    ...(o.onStandbyUnavailable ? { onStandbyUnavailable: o.onStandbyUnavailable } : {}),
    ...(o.ask ? { ask: o.ask, hold: watcherHoldSettings(c) } : {}),
    failMode: o.failMode,
  });
  await sup.ready;
  // The watcher acknowledged its map with `ready`: the start's own plan then applies these very policies (the same
  // objects, watcherSubjectOf) again at once, and the supervisor does not send them twice.
  return drive(sup, watcherSubjectOf, async () => watcherFamilies(await sup.status()));
}

/** The watcher's own counts as metric families (src/metrics/metrics.ts names them). */
export function watcherFamilies(status: Pick<WatcherStatus, 'stats' | 'pidNs'>): MetricFamily[] {
  const st = status.stats;
  return [
    {
      name: 'leash_decisions',
      help: 'decisions by surface, action and reason',
      type: 'counter',
      aggregator: 'sum',
      values: st.decisions.map((d) => ({
        value: d.count,
        labels: { surface: d.surface, action: d.action, reason: d.reason },
      })),
    },
    histogramFamily(
      'leash_watcher_judge_seconds',
      "the watcher's time from reading a permission event to answering it, while subjects exist",
      {},
      st.judge,
    ),
    {
      name: 'leash_watcher_queue_depth',
      help: "decision lines waiting for the watcher's next drain",
      type: 'gauge',
      values: [{ value: st.queued, labels: {} }],
    },
    {
      name: 'leash_watcher_allows_counted',
      help: 'allow decisions counted instead of written to the decision log (log pressure)',
      type: 'counter',
      values: [{ value: st.allowsCounted, labels: {} }],
    },
    {
      name: 'leash_watcher_foreign_pid_events',
      help: "opens and execs from processes outside the watcher's PID namespace (pid 0), allowed unjudged",
      type: 'counter',
      values: [
        { value: st.foreignPidOpen, labels: { surface: 'filesystem' } },
        { value: st.foreignPidExec, labels: { surface: 'commands' } },
      ],
    },
    ...(status.pidNs === null ? [] : [pidNamespaceFamily('watcher', status.pidNs)]),
  ];
}
