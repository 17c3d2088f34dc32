/**
 * Resetting a connection without leaving its conntrack entry behind.
 *
 * The kernel keeps the entry of a connection ended by a reset for 10 s (nf_conntrack_tcp_timeout_close), and a new
 * SYN with the same addresses and ports joins that entry and keeps its translation rather than making a new one.
 * A subject's connection the proxy refused leaves an entry redirected to the subject's listener; the proxy's own
 * upstream connection to the same destination, given that source port by the kernel (which only checks sockets,
 * not conntrack), would be sent back into the proxy instead of out; so was root's own connection from that port
 * (measured: tests/integration/network-conntrack-reuse.test.ts). So every reset here is followed by deleting the
 * connection's entry.
 * The subject's side of the same hole (a SYN joining an entry that is not its redirect) is closed in nft/render.ts.
 */
import type net from 'node:net';
import { nativeProxy } from '../../../native.js';
import type { NativeProxyPart } from '../addon.js';

/**
 * Which tuple of the entry this socket's packets carry: `reply` for a connection redirected to this process (the
 * client side of the proxy and the forwarder), `orig` for one this process made (an upstream).
 */
export type Side = 'orig' | 'reply';

export interface Forgetter {
  /** sock.resetAndDestroy(), then the delete of the connection's entry (none for a socket not yet connected). */
  reset(sock: net.Socket, side: Side, uid: number): void;
  /** The same for a descriptor held as a number (the native acceptor and pump): reset, close, delete the entry. */
  resetFd(fd: number, side: Side, uid: number): void;
  /** Entries deleted and refused deletes so far (ENOENT, an entry already gone, is neither). */
  readonly stats: { deleted: number; failed: number };
}

type Native = Pick<NativeProxyPart, 'conntrackRequest' | 'conntrackDelete' | 'resetClose'>;

function fdOf(s: net.Socket): number {
  return (s as unknown as { _handle?: { fd?: number } })._handle?.fd ?? -1;
}

export function createForgetter(
  onError: (err: Error, ctx: { uid: number; stage: string }) => void,
  native?: Native | null,
): Forgetter {
  let addon: Native | null | undefined = native;
  const stats = { deleted: 0, failed: 0 };
  const get = (): Native | null => {
    if (addon === undefined) {
      try {
        addon = nativeProxy();
      } catch {
        addon = null;
      }
    }
    return addon;
  };
  const deleteEntry = (n: Native, req: Buffer, uid: number) => {
    const r = n.conntrackDelete(req);
    if (r === 0) stats.deleted++;
    else if (r !== 'ENOENT') {
      stats.failed++;
      onError(Object.assign(new Error(`conntrack delete: ${r}`), { code: r }), { uid, stage: 'conntrack' });
    }
  };
  return {
    stats,
    resetFd(fd, side, uid) {
      const n = get();
      if (!n?.resetClose) throw new Error('resetFd needs the addon');
      let req: Buffer | null = null;
      try {
        req = n.conntrackRequest(fd, side);
      } catch {
        req = null; // not connected (any more): nothing to name the entry by
      }
      n.resetClose(fd);
      if (req) deleteEntry(n, req, uid);
    },
    reset(sock, side, uid) {
      const n = get();
      let req: Buffer | null = null;
      const fd = fdOf(sock);
      // A socket still connecting is reset once connected (Node defers it); one the peer has reset has no peer
      // address left to name its entry by (getpeername ENOTCONN): both are reset without the delete.
      if (n && fd >= 0 && !sock.connecting && !sock.destroyed) {
        try {
          req = n.conntrackRequest(fd, side);
        } catch {
          req = null;
        }
      }
      sock.resetAndDestroy();
      if (!req || !n) return;
      deleteEntry(n, req, uid);
    },
  };
}
