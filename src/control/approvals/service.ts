/**
 * The approvals queue in the service: the queue (./queue.ts), its socket (./socket.ts), and what a
 * `persist` decision writes (./persist.ts). The reconcile (src/control/reconcile/loop.ts) starts it before the
 * surfaces and hands its `ask` to each enforcer that holds actions; it is closed before them, so every pending
 * request is answered with a block (approval_cancelled) while the enforcers are still there to act on it.
 */
import fs from 'node:fs';
import type { Config } from '../config/types.js';
import type { DecisionWriter } from '../../log/decisions.js';
import type { Logger } from '../../log/logger.js';
import { floorOf } from '../policy/fragment.js';
import { discoverFrom, readPasswd, type Subject } from '../subjects/discovery.js';
import { persistApproval } from './persist.js';
import type { MetricFamily } from '../../metrics/metrics.js';
import { createApprovalQueue, type ApprovalCounts, type ApprovalQueue } from './queue.js';
import { createApprovalsSocket, DEFAULT_APPROVALS_SOCKET } from './socket.js';

export interface ApprovalsOptions {
  config: () => Config;
  stateDir: string;
  decisions: DecisionWriter;
  logger: Logger;
  /** The subjects discovered at start (every leashed UID, resolved or not). */
  subjects: Subject[];
  socket?: string;
  /** A persist decision wrote a profile: the service runs a reconcile pass. */
  onPersisted?: () => void;
}

export interface Approvals {
  readonly queue: ApprovalQueue;
  readonly socketPath: string;
  /** The subjects as the last reconcile found them (who may never approve). */
  setSubjects(s: Subject[]): void;
  /** A subject held fail-closed or gone: its pending requests are blocked, its sessions end. */
  forget(uid: number): void;
  close(): Promise<void>;
}

/** The queue's counts as metric families (leash_approvals_pending, _decided_total, _timeouts_total). */
export function approvalFamilies(c: ApprovalCounts): MetricFamily[] {
  return [
    {
      name: 'leash_approvals_pending',
      help: 'actions held now for a human, by surface',
      type: 'gauge',
      values: Object.entries(c.pending).map(([surface, value]) => ({ value, labels: { surface } })),
    },
    {
      name: 'leash_approvals_decided',
      help: 'held actions answered, by surface and outcome (approved_once, approved_session, approved_persist, approval_denied, approval_timeout, approval_cancelled)',
      type: 'counter',
      values: Object.entries(c.decided).map(([k, value]) => {
        const [surface, outcome] = k.split('\0');
        return { value, labels: { surface: surface ?? '', outcome: outcome ?? '' } };
      }),
    },
    {
      name: 'leash_approvals_timeouts',
      help: 'held actions whose deadline passed (blocked), by surface',
      type: 'counter',
      values: Object.entries(c.timeouts).map(([surface, value]) => ({ value, labels: { surface } })),
    },
  ];
}

export async function startApprovals(o: ApprovalsOptions): Promise<Approvals> {
  let subjects = new Map<number, string>(o.subjects.map((s) => [s.uid, s.account]));
  let names = new Map<number, string>();
  const refreshNames = () => {
    try {
      names = new Map(readPasswd().map((e) => [e.uid, e.name]));
    } catch {
      // keep the last good list
    }
  };
  refreshNames();
  const accountOf = (uid: number) => subjects.get(uid) ?? names.get(uid) ?? null;
  const a = () => o.config().approvals;
  const queue = createApprovalQueue({
    log: o.decisions,
    settings: () => a(),
    accountOf,
    persist: async (req, by) => {
      const c = o.config();
      const entries = readPasswd();
      const ctx = {
        stateDir: o.stateDir,
        floor: floorOf(c),
        discovery: discoverFrom(entries, c.user),
        configuredUser: c.user,
      };
      const r = await persistApproval(ctx, req);
      o.logger.info(
        { uid: req.uid, request: req.id, profile: r.profile, ack: r.token, by: by.uid },
        'approval persisted as an allow entry',
      );
      o.onPersisted?.();
    },
  });
  const socketPath = o.socket ?? process.env.LEASH_APPROVALS_SOCKET ?? DEFAULT_APPROVALS_SOCKET;
  fs.mkdirSync(socketPath.slice(0, socketPath.lastIndexOf('/')) || '/', { recursive: true, mode: 0o755 });
  const operatorUid = () => {
    const op = a().operator;
    if (op === null) return null;
    for (const [uid, n] of names) if (n === op) return uid;
    refreshNames();
    for (const [uid, n] of names) if (n === op) return uid;
    return null;
  };
  const socket = await createApprovalsSocket({
    queue,
    path: socketPath,
    isSubject: (uid) => subjects.has(uid),
    operatorUid,
    accountOf,
    onRefused: (why, peer) =>
      o.logger.warn({ pid: peer?.pid, uid: peer?.uid, uids: peer?.uids }, `approvals socket refused a peer: ${why}`),
  });
  return {
    queue,
    socketPath,
    setSubjects(s) {
      subjects = new Map(s.map((x) => [x.uid, x.account]));
      refreshNames();
    },
    forget(uid) {
      queue.cancelSubject(uid);
      queue.endSessions(uid);
    },
    async close() {
      queue.close();
      await socket.close();
    },
  };
}
