#pragma once
#include <napi.h>

#include <string>
#include <string_view>
#include <vector>

namespace leash {

/**
 * The tools gate's path reading (src/tools/judge/operations/paths.ts `walk`), in one call: the
 * components in order, an existing symlink replaced by its realpath, `..` by the parent of what was
 * reached so far (the kernel's reading), the rest appended as written once a component is missing.
 * A path without `..` and without a symlink before its first missing component is answered by one
 * openat2 (RESOLVE_NO_SYMLINKS, O_PATH: no file is opened for reading, so no fanotify permission
 * event): the path as written is then its own reading. Only absolute paths; `raw` holds no NUL.
 */
std::string WalkPath(const std::string& raw);

/** The components of `raw` without empty ones and `.`; `dots` says whether one is `..`. */
std::vector<std::string_view> PathComponents(std::string_view raw, bool* dots);

/** `/` followed by the components joined with `/` (`/` for none). */
std::string JoinComponents(const std::vector<std::string_view>& parts);

/**
 * True when the walk gives `norm` (absolute, no `.`, `..` or empty component) as written: one openat2
 * with RESOLVE_NO_SYMLINKS met no symlink before the path ended or a component was missing.
 */
bool WalkGivesItself(const std::string& norm);

/** The component walk (symlinks followed, `..` by the parent reached so far), for WalkPath's slow case. */
std::string WalkComponents(const std::vector<std::string_view>& parts);

/** Reads the one absolute-path argument of `what` (a TypeError thrown for anything else). */
bool WalkArgument(const Napi::CallbackInfo& info, const char* what, std::string* raw);

/** walkPath(path) -> string: WalkPath from JavaScript (a TypeError for anything but an absolute path). */
Napi::Value WalkPathJs(const Napi::CallbackInfo& info);

}  // namespace leash
