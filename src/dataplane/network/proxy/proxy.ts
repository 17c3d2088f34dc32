import { nativeProxy } from '../../../native.js';
import type { NativeProxyPart } from '../addon.js';
import type { PROXY_REASONS } from '../../../errors.js';
import { startSettler } from './settle.js';
import { createListenerTable } from '../listeners.js';
import { createNativeArrival, type NativeArrival } from './arrival-native.js';
import { openStreamListeners } from './arrival-stream.js';
import { createProxyState, type ProxyEntry, type ProxyOptions, type ProxyState } from './state.js';

/**
 * The transparent proxy: one listener per subject (on 127.0.0.1 and ::1, where `redirect` sends IPv4 and IPv6),
 * so the port a connection arrives on names the subject — no pid lookup. Each connection comes in one of two ways
 * (arrival-native.ts, the addon's acceptor; arrival-stream.ts, net.Server), is judged by verdict.ts, then relayed
 * (relay.ts) or reset.
 */

export { isAddressRule, isLoopback, type NetworkDecide } from './verdict.js';
export {
  DEFAULT_MAX_CONNECTIONS,
  DEFAULT_MAX_PER_SUBJECT,
  rateLimitErrors,
  type ErrorContext,
  type ProxyOptions,
} from './state.js';

/** Reason codes the proxy writes itself (catalogued in src/errors.ts PROXY_REASONS, documented in docs/errors.md). */
export type ProxyReason = keyof typeof PROXY_REASONS;

export interface ProxySubject<P> {
  uid: number;
  port: number;
  /** The subject's compiled policy; null = no resolved policy: the listener stays open and refuses everything. */
  policy: P | null;
  /**
   * `network.ech`: refuse (default) resets a ClientHello carrying encrypted_client_hello, whose outer name says
   * nothing of the real destination; allow judges it by that outer name.
   */
  ech?: 'refuse' | 'allow';
}

export interface Proxy<P> {
  /** Opens the subject's listeners if new, and swaps its policy (new connections see the new one). */
  setSubject(s: ProxySubject<P>): Promise<void>;
  /** Closes a subject's listeners. */
  removeSubject(uid: number): Promise<void>;
  /** uid -> port of every open subject. */
  ports(): Map<number, number>;
  /** What a listener without a policy answers under from the next connection on. */
  setFailMode(m: 'closed' | 'open'): void;
  close(): Promise<void>;
}

/** Creates the proxy. No listener opens until `setSubject`. */
export function createProxy<P>(opts: ProxyOptions<P>): Proxy<P> {
  const table = createListenerTable<ProxyEntry<P>, ProxySubject<P>>({
    create: (s) => ({
      uid: s.uid,
      port: s.port,
      policy: s.policy,
      ech: s.ech ?? 'refuse',
      active: 0,
      servers: [],
      listenIds: [],
      held: new Set(),
      sockets: new Set(),
      spliced: new Set(),
    }),
    update: (cur, s) => {
      cur.policy = s.policy;
      cur.ech = s.ech ?? 'refuse';
    },
    open,
    close: closeEntry,
  });
  const subjects = table.entries;
  const st: ProxyState<P> = createProxyState(opts, subjects);
  // After a burst, memory goes back once the connections have (see settle.ts).
  const stopSettler = opts.settle === false ? () => {} : startSettler(st.caps);
  const Acceptor = nativeAcceptor(opts);
  const native: NativeArrival<P> | null = Acceptor ? createNativeArrival(st, Acceptor) : null;

  async function open(e: ProxyEntry<P>): Promise<void> {
    if (native) return native.open(e);
    return openStreamListeners(st, e);
  }

  async function closeEntry(e: ProxyEntry<P>): Promise<void> {
    const closing = e.servers.map((s) => new Promise<void>((r) => s.close(() => r())));
    native?.close(e);
    st.relay.end(e);
    await Promise.all(closing);
  }

  return {
    setSubject: (s) => table.set(s),
    removeSubject: (uid) => table.remove(uid),
    setFailMode: (m) => void (st.floor.failMode = m),
    ports() {
      return new Map([...subjects.values()].map((e) => [e.uid, e.port]));
    },
    async close() {
      stopSettler();
      const all = [...subjects.values()];
      subjects.clear();
      await Promise.all(all.map(closeEntry));
      native?.closeAll();
      await st.relay.close();
    },
  };
}

/** The addon's native acceptor when it is to be used (see ProxyOptions.nativeAccept), else null. */
function nativeAcceptor(opts: { nativeAccept?: boolean; splice?: boolean }): NativeProxyPart['Acceptor'] | null {
  if (opts.nativeAccept === false || opts.splice === false) return null;
  try {
    const n = nativeProxy();
    return n.Acceptor && n.resetClose ? n.Acceptor : null;
  } catch {
    return null;
  }
}
