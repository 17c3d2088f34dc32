import { createRequire } from 'node:module';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import type { NativeProxyPart } from './dataplane/network/addon.js';
import type { NativeWatcherPart } from './dataplane/watcher/addon.js';
import type { NativeToolsPart } from './tools/addon.js';

/**
 * The only file that loads the C++ addon. Each plane gets its own typed part of it (nativeProxy, nativeWatcher,
 * nativeTools; nativeCommon for what every part of the service uses), declared next to that plane
 * (dataplane/network/addon.ts, dataplane/watcher/addon.ts, tools/addon.ts), as native/<subsystem>/register.cc
 * puts it on the module.
 */
export type * from './dataplane/network/addon.js';
export type * from './dataplane/watcher/addon.js';
export type * from './tools/addon.js';

export interface PeerCred {
  pid: number;
  uid: number;
  gid: number;
}

/** Socket credentials, journald, sd_notify and memory release (native/common/register.cc). */
export interface NativeCommonPart {
  peerCred(fd: number): PeerCred;
  sdNotify(state: string): boolean;
  /**
   * A full, memory-reducing V8 collection (critical memory pressure: the young generation shrinks too), then
   * malloc_trim(0); true when malloc_trim returned pages to the kernel.
   */
  releaseMemory(): boolean;
  /** Sends one serialised journal entry (src/log/journal.ts) to journald's socket: 0, or the errno that refused it. */
  journalSend(socketPath: string, entry: Buffer): number;
}

/** The whole module, for tests and benches that reach into several parts. */
export type NativeAddon = NativeCommonPart & NativeProxyPart & NativeWatcherPart & NativeToolsPart;

/** A native failure: `code` is the errno name, `syscall` the call, like Node's fs errors. */
export interface NativeError extends Error {
  code: string;
  syscall: string;
  errno: number;
}

const require = createRequire(import.meta.url);
const here = path.dirname(fileURLToPath(import.meta.url));

function candidates(): string[] {
  // src/native.ts and dist/src/native.js both sit under the package root.
  const roots = [path.resolve(here, '..'), path.resolve(here, '..', '..')];
  const out: string[] = [];
  for (const r of roots) {
    out.push(path.join(r, 'build', 'Release', 'leash_native.node'));
    out.push(path.join(r, 'build', 'Debug', 'leash_native.node'));
  }
  return out;
}

let cached: NativeAddon | null = null;

/**
 * Loads the addon: `override` (tests), then LEASH_NATIVE, then build/Release, then build/Debug.
 * Throws with every path tried when none loads.
 */
export function loadNative(override?: string): NativeAddon {
  if (!override && cached) return cached;
  const tried: string[] = [];
  const list = override ? [override] : process.env.LEASH_NATIVE ? [process.env.LEASH_NATIVE] : candidates();
  for (const p of list) {
    try {
      const mod = require(p) as NativeAddon;
      if (!override) cached = mod;
      return mod;
    } catch (e) {
      tried.push(`${p}: ${(e as Error).message.split('\n')[0]}`);
    }
  }
  throw new Error(
    `leash native addon not found; build it with "npm run build:native". Tried:\n  ${tried.join('\n  ')}`,
  );
}

/** True when the addon can be loaded (tests/native skip without it). */
export function nativeAvailable(): boolean {
  try {
    loadNative();
    return true;
  } catch {
    return false;
  }
}

/** The part the service's common code uses (credentials, journald, sd_notify, memory release). */
export function nativeCommon(): NativeCommonPart {
  return loadNative();
}

/** The network data plane's part: the acceptor, the splice pump, SO_ORIGINAL_DST, conntrack, nf_tables reads. */
export function nativeProxy(): NativeProxyPart {
  return loadNative();
}

/** The watcher's part: the fanotify loop, its matcher, mount watches and the namespace kill. */
export function nativeWatcher(): NativeWatcherPart {
  return loadNative();
}

/** The tools gate's part: the path walk and its cache, the JSON pre-check, the literal finder. */
export function nativeTools(): NativeToolsPart {
  return loadNative();
}
