#pragma once
#include <napi.h>

#include "pathmemory.h"

namespace leash {

/**
 * The gate's path walk with a memory (src/tools/judge/operations/paths.ts `createValidatedWalker`). The
 * per-call walk costs one system call per path (WalkPath's openat2), which on a VM is as much as the rest of
 * judging a call. This remembers the plain paths (no `..`, no symlink before the walk ends) whose walk gave the
 * path itself, and forgets each one as soon as anything it depended on may have changed:
 *
 * - every directory the walk passed through is watched with inotify (entries created, deleted, renamed in or
 *   out, attributes; the directory itself deleted or moved); an event naming the child a remembered walk went
 *   through forgets that walk, an event on the directory itself forgets every walk through it, an overflow
 *   forgets everything;
 * - the mount table (`/proc/self/mountinfo`, whose poll reports each change once) forgets everything;
 * - only directories on filesystems whose every change passes through this kernel's VFS (ext2/3/4, XFS,
 *   btrfs, f2fs, tmpfs, ramfs) are remembered: on NFS, FUSE, overlayfs, 9p or /proc a change can happen with no
 *   event, so walks there are always made.
 *
 * A thread of the cache sleeps in poll on both descriptors and applies what they report under the cache's lock,
 * so a remembered answer costs no system call; three words shared with JavaScript (`shared()`) let paths.ts keep
 * a memo of the remembered answers that costs no call either. An answer can therefore be stale for as long as that
 * thread takes to wake up after a change (bench/mcp measures it; figures in docs/tools.md). A walk per call has a
 * window of the same kind after the check, between the gate's check and the server's own open, which no check in
 * the gate can close (docs/threat-model.md, "Tools"). Memory is bounded: past 4,096 paths or 65,536 dependencies
 * it starts again empty; past 8,192 watches, new paths are walked per call. A queue that cannot be read marks the
 * cache broken, and every walk is made from then on.
 */
void InitWalkCache(Napi::Env env, Napi::Object exports);

/** The remembering walk behind a WalkCache object, or null for any other value (checked by a type tag). */
PathMemory* PathMemoryOf(Napi::Value v);

}  // namespace leash
