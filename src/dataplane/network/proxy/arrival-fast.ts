import os from 'node:os';
import { decide as engineDecide, policyInputOf } from '../../../engine/decide.js';
import type { AcceptorInstance } from '../addon.js';
import { compileNetMatch, type NativeNetPolicyHandle } from '../netmatch.js';
import { endSplicedFds } from './relay.js';
import type { ProxyEntry, ProxyState } from './state.js';

/**
 * The native verdict path's JavaScript side (native/proxy/acceptor_fast.cc decides; issue 43). A connection whose
 * answer needs no JavaScript (a TLS ClientHello to an outside address, judged allow or block by the subject's
 * compiled matcher, its name already resolved here) is peeked, judged, connected and spliced in native code; this
 * file gives that path each subject's compiled policy (replaced whole on a policy change), the resolver's answers,
 * and acts on what it reports: one call per batch of events with the lines of refusals (written here, then the
 * reset) and failures. Allow lines, where the decision log lets native code write them (allowSink: its own file,
 * logging.allows all or summary, no journal sampling allows), are written natively, no JavaScript per connection,
 * and their counts (the allow tally, the metrics) and set-up times are pulled here once a second and at close;
 * otherwise they come in the batch too and are written here.
 * Everything else reaches arrival-native.ts's onAccept as before. Off when the proxy's decide is not the engine's,
 * the caller reads SO_ORIGINAL_DST itself, the pump is not inline, or the log cannot write a line's tail.
 */
export interface FastPath<P> {
  /** The entry's listeners (its tags) judge with its policy as it is now, from the next connection on. */
  update(e: ProxyEntry<P>, tags: number[]): void;
  /** The entry is closing: its listeners leave the native path and its native pairs are ended. */
  close(e: ProxyEntry<P>, tags: number[]): void;
  /** The acceptor has closed: what the native path counted last is taken, and the log left alone. */
  stop(): void;
}

/** Every native path's counts in this process: relayed, refused, handed to JavaScript, connect failed. */
const all: AcceptorInstance[] = [];
export function nativePathStats(): { relayed: number; refused: number; toJs: number; connectFailed: number } {
  const s = { relayed: 0, refused: 0, toJs: 0, connectFailed: 0 };
  for (const a of all) {
    const [r, b, j, e] = a.fastStats?.() ?? [0, 0, 0, 0];
    s.relayed += r;
    s.refused += b;
    s.toJs += j;
    s.connectFailed += e;
  }
  return s;
}

export function createFastPath<P>(st: ProxyState<P>, acceptor: AcceptorInstance): FastPath<P> | null {
  const splicer = st.relay.splicer();
  const log = st.opts.log;
  if (!acceptor.fastConfig || !acceptor.setFast || !acceptor.cacheName || !splicer || !log.writeTail) return null;
  if (st.dstOverride || st.opts.decide !== (engineDecide as unknown)) return null;
  if (process.env.LEASH_PROXY_NATIVE_VERDICT === '0') return null;
  const writeTail = log.writeTail.bind(log);
  const onSetup = st.opts.onSetup;

  function onLines(text: string): void {
    for (let at = 0; at < text.length;) {
      const nl = text.indexOf('\n', at);
      const end = nl < 0 ? text.length : nl + 1;
      const rec = text.slice(at, end);
      at = end;
      const tab = rec.indexOf('\t');
      const head = rec.slice(1, tab).split(' ').map(Number);
      const tail = rec.slice(tab + 1);
      switch (rec[0]) {
        case 'a':
          writeTail('allow', tail);
          onSetup?.(head[0]! / 1e6);
          break;
        case 'b':
          // The line first, then the reset: a refusal is in the log before the client sees it.
          writeTail('block', tail);
          st.forget.resetFd(head[1]!, 'reply', head[2]!);
          onSetup?.(head[0]! / 1e6);
          break;
        case 'e': {
          const code = errnoName(head[0]!);
          st.onError(Object.assign(new Error(`splice: ${code}`), { code }), { uid: head[2]!, stage: 'splice' });
          st.forget.resetFd(head[1]!, 'reply', head[2]!);
          break;
        }
        case 'x': {
          const [errno, connected, fd, upFd, uid] = head as [number, number, number, number, number];
          const r = { error: errno === 0 ? null : errnoName(errno), ab: 0, ba: 0, connected: connected === 1 };
          endSplicedFds({ ...r, closed: false }, fd, upFd, 'upstream', uid, st.onError, st.forget);
          break;
        }
      }
    }
  }

  // Allow lines written natively: the log's descriptor (followed across reopens), counts pulled once a second.
  const sink = log.allowSink?.() ?? null;
  const native =
    sink !== null && log.allowsElsewhere && log.onReopen && acceptor.fastTake && acceptor.setLogFd
      ? { sink, elsewhere: log.allowsElsewhere.bind(log), take: acceptor.fastTake.bind(acceptor) }
      : null;
  acceptor.fastConfig({
    splicer,
    counts: st.caps.counts,
    maxTotal: st.caps.maxTotal,
    maxPerSubject: st.caps.maxPerSubject,
    peekBytes: st.peekBytes,
    peekTimeoutMs: st.peekTimeoutMs,
    connectTimeoutMs: st.opts.connectTimeoutMs ?? 10_000,
    told: st.opts.seen !== undefined,
    onLines,
    ...(native ? { logFd: native.sink.fd, logWrite: native.sink.write, setups: onSetup !== undefined } : {}),
  });
  const offReopen = native ? log.onReopen!((fd) => acceptor.setLogFd!(fd)) : null;
  let lastErrno = 0;
  /** What the native path allowed since the last take: the log's tally, the metrics, the set-up times. */
  function take(): void {
    if (!native) return;
    const t = native.take();
    for (const [uid, reason, allowed, written] of t.tally) native.elsewhere(uid, 'network', reason, allowed, written);
    if (onSetup) for (const s of t.setups) onSetup(s);
    if (t.errno !== 0 && t.errno !== lastErrno) {
      const code = errnoName(t.errno);
      st.onError(Object.assign(new Error(`decision log: ${code}, ${t.lost} allow lines lost`), { code }), {
        uid: -1,
        stage: 'decision_log',
      });
    }
    lastErrno = t.errno;
  }
  const pull = native ? setInterval(take, 1000) : null;
  pull?.unref();
  const cacheName = acceptor.cacheName.bind(acceptor);
  st.onAnswer((name, r) => cacheName(name, r.v4, r.v6, r.expires));
  all.push(acceptor);

  /** The entry's policy compiled for the native matcher; null when only the engine may judge it. */
  function handleOf(e: ProxyEntry<P>): NativeNetPolicyHandle | null {
    if (e.policy === null) return null; // fail_mode decides, read at each connection: JavaScript's
    const input = policyInputOf(e.policy);
    if (!input || input.enforce === 'shadow') return null;
    try {
      return compileNetMatch(input);
    } catch {
      return null;
    }
  }

  return {
    update(e, tags) {
      const h = handleOf(e);
      for (const tag of tags) acceptor.setFast!(tag, e.uid, h, e.ech === 'allow', e.slot);
    },
    close(e, tags) {
      for (const tag of tags) acceptor.setFast!(tag, e.uid, null, false, e.slot);
      acceptor.abortSlot?.(e.slot);
    },
    stop() {
      if (pull) clearInterval(pull);
      offReopen?.();
      take();
    },
  };
}

const ERRNO_NAMES = new Map(Object.entries(os.constants.errno).map(([k, v]) => [v, k]));
function errnoName(errno: number): string {
  return ERRNO_NAMES.get(errno) ?? `E${errno}`;
}
