/**
 * Who is on the other end of the approvals socket, and whether they may decide. SO_PEERCRED gives
 * the connecting process's pid and effective UID; /proc/<pid>/status gives all four UIDs (real,
 * effective, saved, filesystem). A process any of whose four UIDs is a leashed subject's is
 * refused, whatever else it is: a subject's own process, or a setuid-root helper it started (real
 * UID the subject's, effective 0), never approves. The watcher applies the same four-UID rule to
 * decide who is a subject.
 */
import fs from 'node:fs';

export interface PeerIds {
  pid: number;
  /** SO_PEERCRED's UID (the effective UID at connect). */
  uid: number;
  /** real, effective, saved, filesystem, from /proc/<pid>/status. */
  uids: [number, number, number, number];
}

/** The four UIDs of a process from /proc/<pid>/status, or null when it is gone or unreadable. */
export function procUids(pid: number, procRoot = '/proc'): [number, number, number, number] | null {
  let text: string;
  try {
    text = fs.readFileSync(`${procRoot}/${pid}/status`, 'latin1');
  } catch {
    return null;
  }
  const m = /^Uid:\s+(\d+)\s+(\d+)\s+(\d+)\s+(\d+)\s*$/m.exec(text);
  if (!m) return null;
  return [Number(m[1]), Number(m[2]), Number(m[3]), Number(m[4])];
}

export type PeerVerdict = { ok: true; uid: number } | { ok: false; why: string };

/**
 * May this peer list and decide? Refused when its /proc entry cannot be read (it is gone, or the
 * pid no longer names it: its effective UID must still be SO_PEERCRED's), when any of its four UIDs
 * is a subject's, and unless SO_PEERCRED's UID is root or the operator's.
 */
export function judgePeer(
  peer: PeerIds | null,
  isSubject: (uid: number) => boolean,
  operatorUid: number | null,
): PeerVerdict {
  if (peer === null) return { ok: false, why: 'the peer process could not be identified' };
  const [real, eff, saved, fsuid] = peer.uids;
  if (eff !== peer.uid) return { ok: false, why: 'the peer process changed identity since it connected' };
  for (const u of [real, eff, saved, fsuid]) {
    if (isSubject(u)) return { ok: false, why: `uid ${u} is a leashed subject: a subject never approves` };
  }
  if (peer.uid === 0 || (operatorUid !== null && peer.uid === operatorUid)) return { ok: true, uid: peer.uid };
  return { ok: false, why: `uid ${peer.uid} is neither root nor the approvals operator` };
}
