import { createRequire } from 'node:module';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

/** The surface of the C++ addon. The only file that loads it. */
export interface OriginalDst {
  family: 4 | 6;
  address: string;
  port: number;
}
export interface PeerCred {
  pid: number;
  uid: number;
  gid: number;
}
/** A splice(2) pump shared by many connections (native/splice.cc). */
export interface SplicerInstance {
  /** Starts moving bytes both ways between two connected sockets JS no longer reads; returns the pair's id. */
  add(fdA: number, fdB: number): number;
  /** Finishes a pair now (its onDone fires with ECANCELED). */
  abort(id: number): void;
  /** Finishes every pair and stops the thread. */
  close(): void;
}
export interface NativeAddon {
  /** new Splicer(onDone): onDone(id, errno (0 = both sides closed cleanly), bytesAtoB, bytesBtoA). */
  Splicer: new (onDone: (id: number, errno: number, ab: number, ba: number) => void) => SplicerInstance;
  originalDst(fd: number): OriginalDst;
  peerCred(fd: number): PeerCred;
  sdNotify(state: string): boolean;
}

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
