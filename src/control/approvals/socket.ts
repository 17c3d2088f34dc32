/**
 * The approvals socket (/run/leash/approvals.sock): JSON lines both ways; a request carries `seq`,
 * its answer echoes it. Every message is authorised afresh from the peer's credentials (./peer.ts):
 *   {op:"list"}                      → {seq, ok:true, requests:[PendingView…]}
 *   {op:"decide", id, decision}      → {seq, ok:true, outcome} | {seq, ok:false, error:{code, message}}
 *   {op:"subscribe"}                 → {seq, ok:true, requests:[…]} then {event:"request"|"decided", …} lines
 * A refused peer gets one {seq, ok:false, error:{code:"approvals_refused"}} and the connection is
 * closed. The console (#18) is meant to be a client of these three operations.
 */
import type net from 'node:net';
import { DECISIONS, type Decision } from '../../engine/approval.js';
import { isLeashError } from '../../errors.js';
import type { JsonObject, JsonValue } from '../../formats/json.js';
import { listenJsonLines } from '../../formats/line-server.js';
import { loadNative } from '../../native.js';
import { judgePeer, procUids, type PeerIds } from './peer.js';
import type { ApprovalQueue } from './queue.js';

export const DEFAULT_APPROVALS_SOCKET = '/run/leash/approvals.sock';
const MAX_LINE = 64 * 1024;

export interface ApprovalsSocketOptions {
  queue: ApprovalQueue;
  path?: string;
  /** Is this UID a leashed subject (read at each message: a reconcile changes it)? */
  isSubject: (uid: number) => boolean;
  /** The configured operator account's UID, or null (root only). */
  operatorUid: () => number | null;
  accountOf?: (uid: number) => string | null;
  /** The peer's pid and UIDs (default: SO_PEERCRED through the addon, then /proc). */
  peer?: (sock: net.Socket) => PeerIds | null;
  /** Refused peers, for the service's own log. */
  onRefused?: (why: string, peer: PeerIds | null) => void;
}

export interface ApprovalsSocket {
  readonly path: string;
  close(): Promise<void>;
}

export function peerFromAddon(sock: net.Socket): PeerIds | null {
  const fd = (sock as unknown as { _handle?: { fd?: number } })._handle?.fd;
  if (typeof fd !== 'number' || fd < 0) return null;
  try {
    const c = loadNative().peerCred(fd);
    const uids = procUids(c.pid);
    return uids ? { pid: c.pid, uid: c.uid, uids } : null;
  } catch {
    return null;
  }
}

export async function createApprovalsSocket(o: ApprovalsSocketOptions): Promise<ApprovalsSocket> {
  const peerOf = o.peer ?? peerFromAddon;
  return listenJsonLines({
    path: o.path ?? DEFAULT_APPROVALS_SOCKET,
    maxLineBytes: MAX_LINE,
    // Anyone may connect; who may act is decided per message from the peer's credentials.
    mode: 0o666,
    accept: (conn) => {
      const sock = conn.sock;
      let unsubscribe: (() => void) | null = null;
      sock.on('close', () => unsubscribe?.());
      const send = (v: unknown) => conn.send(JSON.parse(JSON.stringify(v)) as JsonValue);
      const authorise = (seq: JsonValue): number | null => {
        // Per message, not once: a peer whose UIDs changed, or that became a subject, is refused now.
        const peer = peerOf(sock);
        const v = judgePeer(peer, o.isSubject, o.operatorUid());
        if (v.ok) return v.uid;
        o.onRefused?.(v.why, peer);
        send({ seq, ok: false, error: { code: 'approvals_refused', message: v.why } });
        sock.end();
        return null;
      };
      const handle = async (msg: JsonObject) => {
        const seq = msg.seq ?? null;
        const uid = authorise(seq);
        if (uid === null) return;
        const by = { uid, account: o.accountOf?.(uid) ?? null };
        switch (msg.op) {
          case 'list':
            send({ seq, ok: true, requests: o.queue.list() });
            return;
          case 'subscribe':
            if (!unsubscribe) unsubscribe = o.queue.subscribe((ev) => send(ev));
            send({ seq, ok: true, requests: o.queue.list() });
            return;
          case 'decide': {
            const id = typeof msg.id === 'string' ? msg.id : '';
            const d = msg.decision;
            if (typeof d !== 'string' || !DECISIONS.includes(d as Decision)) {
              send({
                seq,
                ok: false,
                error: { code: 'usage', message: 'decision must be once, session, persist or deny' },
              });
              return;
            }
            try {
              const outcome = await o.queue.decide(id, d as Decision, by);
              send({ seq, ok: true, outcome });
            } catch (e) {
              const code = isLeashError(e) ? e.code : 'internal';
              send({ seq, ok: false, error: { code, message: (e as Error).message } });
            }
            return;
          }
          default:
            send({ seq, ok: false, error: { code: 'usage', message: 'unknown op' } });
        }
      };
      return (msg: JsonObject) => void handle(msg);
    },
  });
}
