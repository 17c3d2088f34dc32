/**
 * The proxy's part of the native addon (native/proxy/register.cc), as src/native.ts's nativeProxy() hands it over:
 * the acceptor, the splice pump, SO_ORIGINAL_DST, conntrack and nf_tables reads.
 */
import type { NativeNetMatchPart, NativeNetPolicyHandle } from './netmatch.js';

export interface OriginalDst {
  family: 4 | 6;
  address: string;
  port: number;
}
/** A splice(2) pump shared by many connections (native/proxy/splice.cc). */
export interface SplicerInstance {
  /** Starts moving bytes both ways between two connected sockets JS no longer reads; returns the pair's id. */
  add(fdA: number, fdB: number): number;
  /**
   * Opens a non-blocking TCP connection to ip:port and splices fdA with it once connected; returns the pair's id
   * and the new socket's descriptor. Both descriptors are the caller's to close after onDone, except when
   * `closeOnClean` is set and the pair ended cleanly (onDone's `closed`): the pump closed them.
   */
  connect(fdA: number, ip: string, port: number, timeoutMs: number, closeOnClean?: boolean): [number, number];
  /** Finishes a pair now (its onDone fires with ECANCELED). */
  abort(id: number): void;
  /** Finishes every pair and stops the thread. */
  close(): void;
}
/** Which listener and connection: the listener's tag, the connection's id and its descriptor. */
type AcceptedConn = [tag: number, id: number, fd: number];
/** The connection's two ends as the kernel reports them. */
type AcceptedEnds = [localAddr: string, localPort: number, peerAddr: string, peerPort: number];
/** Its SO_ORIGINAL_DST (family 4 or 6), or family 0 and `dstError` the errno name when there is none. */
type AcceptedDst = [dstFamily: 0 | 4 | 6, dstAddr: string, dstPort: number, dstError: string];
export type AcceptedArgs = [...AcceptedConn, ...AcceptedEnds, ...AcceptedDst];
/** The proxy's listeners and first-bytes peek on Node's loop (native/proxy/acceptor.cc). */
export interface AcceptorCallbacks {
  onAccept(...args: AcceptedArgs): void;
  /** `why` "data": return true when the bytes are enough, false to wait for more; else the peek is over. */
  onPeek(id: number, bytes: Buffer, why: 'data' | 'closed' | 'timeout' | 'limit'): boolean | void;
  /** An accept failed with errno; `refused` waiting connections were reset for want of descriptors. */
  onError(tag: number, errno: number, refused: number): void;
}
/** The native verdict path's set-up (native/proxy/acceptor_fast.cc). */
export interface AcceptorFastConfig {
  /** The relay's pump, inline on this loop. */
  splicer: SplicerInstance;
  /** The caps' counts: [active, opened, then one cell per subject slot], shared with native code. */
  counts: Int32Array;
  maxTotal: number;
  maxPerSubject: number;
  peekBytes: number;
  peekTimeoutMs: number;
  connectTimeoutMs: number;
  /** The proxy reads the DNS forwarder's answers (ProxyOptions.seen): a name not resolved here goes to JavaScript. */
  told: boolean;
  /**
   * One batch's records, each ending in a newline: `a<setupUs>\t<tail>` relayed, `b<setupUs> <fd> <uid>\t<tail>`
   * refused (write, then reset fd), `e<errno> <fd> <uid>\t` no upstream socket (reset fd), `x<errno> <connected>
   * <fd> <upFd> <uid>\t` a pair that did not end cleanly (as relay.ts endSplicedFds).
   */
  onLines(records: string): void;
  /**
   * The decision log's descriptor (DecisionWriter.allowSink): the native path's allow lines are written there by
   * native code instead of given to onLines (`logWrite` false: only counted), and pulled with fastTake.
   */
  logFd?: number;
  logWrite?: boolean;
  /** Keep each native connection's set-up time for fastTake. */
  setups?: boolean;
}
/** What the native path allowed since the last fastTake (its lines written or counted natively). */
export interface AcceptorTake {
  /** [uid, reason, allowed, written] */
  tally: Array<[number, string, number, number]>;
  /** Set-up times, seconds. */
  setups: Float64Array;
  /** The last write(2) error on the log's descriptor (0: none), and how many lines it lost. */
  errno: number;
  lost: number;
}
export interface AcceptorInstance {
  /** Turns the native verdict path on. */
  fastConfig?(c: AcceptorFastConfig): void;
  /** The listener's subject for the native path; `handle` null: none of its connections take it. */
  setFast?(tag: number, uid: number, handle: NativeNetPolicyHandle | null, echAllow: boolean, slot: number): void;
  /** The resolver's answer for a name (Date.now()-based expiry). */
  cacheName?(name: string, v4: string[], v6: string[], expiresMs: number): void;
  /** Ends a subject's native pairs. */
  abortSlot?(slot: number): void;
  /** [relayed, refused, handed to JavaScript, connect failed] on the native path. */
  fastStats?(): [number, number, number, number];
  /** The decision log's new descriptor (after a reopen) for the native allow lines. */
  setLogFd?(fd: number): void;
  fastTake?(): AcceptorTake;
  /**
   * Listens on host:port (an IP literal), the socket marked `mark` (SO_MARK) when given; returns the listener's id.
   * Throws with `code` (EADDRINUSE, EPERM for a mark without CAP_NET_ADMIN, ...).
   */
  listen(host: string, port: number, backlog: number, tag: number, mark?: number): number;
  unlisten(id: number): void;
  peek(id: number, maxBytes: number, timeoutMs: number): boolean;
  /** The descriptor is the caller's from here; `consume` peeked bytes are read off it first. */
  release(id: number, consume: number): number;
  /** Refuses with a TCP reset and closes. */
  reset(id: number): boolean;
  size(): number;
  close(): void;
}

/** One table to read: `chains` null for every chain of it. */
export interface NftReadAsk {
  family: 'ip' | 'ip6' | 'inet';
  table: string;
  /** The verdict map whose jump elements are read. */
  map: string;
  chains: string[] | null;
}

export interface NftReadTable {
  exists: boolean;
  /** The asked chains that exist (every chain for `chains: null`), the hooked ones included. */
  chains: string[];
  /** Their rules in order; `dispatch` is exactly `meta skuid vmap @<map>`. */
  rules: { chain: string; handle: number; comment: string | null; dispatch: boolean }[];
  elements: [number, string][];
}

export interface NativeProxyPart extends NativeNetMatchPart {
  /**
   * new Splicer(onDone): onDone(id, errno (0 = both sides closed cleanly), bytesAtoB, bytesBtoA, connected: false
   * when a connect() pair's upstream never connected, closed: the pump closed both descriptors (closeOnClean)).
   */
  Splicer: new (
    onDone: (id: number, errno: number, ab: number, ba: number, connected: boolean, closed: boolean) => void,
    options?: { inline?: boolean },
  ) => SplicerInstance;
  Acceptor?: new (callbacks: AcceptorCallbacks) => AcceptorInstance;
  /** SO_LINGER 0 and close: the peer gets a TCP reset. */
  resetClose?(fd: number): void;
  originalDst(fd: number): OriginalDst;
  /** SO_MARK on a socket (CAP_NET_ADMIN); throws an errno error. */
  setMark(fd: number, mark: number): void;
  /** The ctnetlink delete request for a connected TCP socket's entry, by the tuple of the packets it sends. */
  conntrackRequest(fd: number, direction: 'orig' | 'reply'): Buffer;
  /** Sends one conntrackRequest: 0 when deleted, else the errno name ("ENOENT": no such entry). */
  conntrackDelete(request: Buffer): 0 | string;
  /**
   * Reads nf_tables objects straight from the kernel (native/proxy/nftread.cc), in the network namespace at `netns`
   * (null: the process's own), from one generation of the ruleset. Throws an errno error (EPERM: not root).
   */
  nftRead(netns: string | null, tables: NftReadAsk[]): NftReadTable[];
}
