// Hard links: the watcher judges a file by the name the open went through (readlink of the event's
// descriptor), but a regular file with more than one link has other names, and a subject that could
// have made a link itself (in a directory its policy allows, to a file its policy denies) would
// otherwise read the denied file through the allowed name. docs/filesystem.md "Hard links" is the
// rule; this is its code. Loop thread only; nothing here opens a file (a stat is no fanotify event,
// an open by the loop thread would be one it waits on itself).
#pragma once
#include <cstdint>
#include <string>

#include "fsmatch.h"
#include "identity.h"
#include "paths.h"

namespace leash {

/**
 * Could the process with these credentials have made a link to this file itself? Under
 * fs.protected_hardlinks = 1 (may_linkat): when it owns the file, or when the file is a regular file,
 * not set-user-ID, not set-group-ID and group-executable, that DAC lets it read and write. The DAC
 * test is taken from the mode alone, conservatively: read and write for "other", or for the group
 * whatever the process's groups (the group bits are also the mask of any POSIX ACL). Under
 * protected_hardlinks = 0 any multi-linked regular file could be its link. False for nlink <= 1
 * and for anything but a regular file (a directory cannot be hard-linked).
 */
bool CouldHaveLinked(const FileFacts& f, const Creds& c, bool protectedHardlinks);

/**
 * The verdict on a multi-linked file that `CouldHaveLinked` says a subject could have linked,
 * for one decision `v` already allowed by the name the open went through (`exec`: the commands
 * lists judge, else the filesystem lists). The other names cannot be listed from the answer path
 * (no directory is opened there), only the policy's plain entries can be looked up by stat:
 * - whitelist: allowed when the plain allow entries that name this inode are `nlink` distinct
 *   names, each allowed by the whole policy (every name the file has is then an allowed one);
 *   otherwise `hardlinked` (not every name can be known to be allowed);
 * - blacklist: `hardlinked` with the deny entry as the rule when a plain deny entry names this
 *   inode; otherwise `v` stands (a name under a denied directory or glob is not found: the threat
 *   model says so).
 */
MatchVerdict JudgeLinks(const FsPolicy& p, bool exec, const FileFacts& f, MatchVerdict v);

/** fs.protected_hardlinks as /proc/sys says (false when it cannot be read: the safer reading). */
bool ReadProtectedHardlinks();

}  // namespace leash
