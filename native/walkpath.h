#pragma once
#include <napi.h>

#include <string>

namespace leash {

/**
 * The tools gate's path reading (src/enforcers/tools/operations/paths.ts `walk`), in one call: the
 * components in order, an existing symlink replaced by its realpath, `..` by the parent of what was
 * reached so far (the kernel's reading), the rest appended as written once a component is missing.
 * A path without `..` and without a symlink before its first missing component is answered by one
 * openat2 (RESOLVE_NO_SYMLINKS, O_PATH: no file is opened for reading, so no fanotify permission
 * event): the path as written is then its own reading. Only absolute paths; `raw` holds no NUL.
 */
std::string WalkPath(const std::string& raw);

/** walkPath(path) -> string: WalkPath from JavaScript (a TypeError for anything but an absolute path). */
Napi::Value WalkPathJs(const Napi::CallbackInfo& info);

}  // namespace leash
