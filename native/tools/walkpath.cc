// The tools gate's path reading (see walkpath.h).
#include "walkpath.h"

#include <fcntl.h>
#include <linux/openat2.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <climits>
#include <cstdlib>
#include <string_view>
#include <vector>

namespace leash {

std::vector<std::string_view> PathComponents(std::string_view raw, bool* dots) {
  std::vector<std::string_view> out;
  *dots = false;
  size_t i = 0;
  while (i < raw.size()) {
    size_t j = raw.find('/', i);
    if (j == std::string_view::npos) j = raw.size();
    std::string_view c = raw.substr(i, j - i);
    if (!c.empty() && c != ".") {
      if (c == "..") *dots = true;
      out.push_back(c);
    }
    i = j + 1;
  }
  return out;
}

/*
 * True when the walk would give `norm` (no `..` in it) as written, told by one openat2 with
 * RESOLVE_NO_SYMLINKS: the kernel walks the components in order and fails with ELOOP at the first
 * symlink it meets. So success means every component exists and none is a symlink; ENOENT, ENOTDIR
 * and EACCES mean the walk stopped at a component that is missing (or under a file, or behind a
 * directory this process cannot search: the walk's lstat fails there too) after a prefix with no
 * symlink in it, and the walk appends the rest as written. Anything else (ELOOP: a symlink to
 * resolve) is for the component walk.
 */
bool WalkGivesItself(const std::string& norm) {
  static bool unsupported = false;  // ENOSYS once (a kernel before 5.6): the walk answers from then on
  if (unsupported) return false;
  struct open_how how = {};
  how.flags = O_PATH | O_CLOEXEC;
  how.resolve = RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS;
  int fd = static_cast<int>(syscall(SYS_openat2, AT_FDCWD, norm.c_str(), &how, sizeof how));
  if (fd >= 0) {
    close(fd);
    return true;
  }
  if (errno == ENOSYS) unsupported = true;
  return errno == ENOENT || errno == ENOTDIR || errno == EACCES;
}

namespace {

std::string Parent(const std::string& p) {
  size_t s = p.rfind('/');
  return s == 0 || s == std::string::npos ? std::string("/") : p.substr(0, s);
}

}  // namespace

std::string JoinComponents(const std::vector<std::string_view>& parts) {
  std::string norm;
  for (std::string_view c : parts) {
    norm += '/';
    norm.append(c);
  }
  if (norm.empty()) norm = "/";
  return norm;
}

std::string WalkPath(const std::string& raw) {
  bool dots = false;
  std::vector<std::string_view> parts = PathComponents(raw, &dots);
  if (!dots) {
    std::string norm = JoinComponents(parts);
    if (WalkGivesItself(norm)) return norm;
  }
  return WalkComponents(parts);
}

std::string WalkComponents(const std::vector<std::string_view>& parts) {
  std::string cur = "/";
  bool missing = false;
  for (std::string_view c : parts) {
    if (c == "..") {
      cur = Parent(cur);
      continue;
    }
    std::string next = cur == "/" ? std::string("/") : cur + "/";
    next.append(c);
    if (!missing) {
      struct stat st;
      if (lstat(next.c_str(), &st) == 0) {
        if (!S_ISLNK(st.st_mode)) {
          cur = std::move(next);
        } else {
          char buf[PATH_MAX];
          if (realpath(next.c_str(), buf) != nullptr) {
            cur = buf;
          } else {
            cur = std::move(next);  // a dangling or looping link: kept as named, nothing below it exists
            missing = true;
          }
        }
        continue;
      }
      missing = true;  // ENOENT, ENOTDIR, EACCES, ELOOP: nothing to follow there
    }
    cur = std::move(next);
  }
  return cur;
}

bool WalkArgument(const Napi::CallbackInfo& info, const char* what, std::string* raw) {
  Napi::Env env = info.Env();
  if (info.Length() < 1 || !info[0].IsString()) {
    Napi::TypeError::New(env, std::string(what) + ": path must be a string").ThrowAsJavaScriptException();
    return false;
  }
  *raw = info[0].As<Napi::String>().Utf8Value();
  if (raw->empty() || (*raw)[0] != '/' || raw->find('\0') != std::string::npos) {
    Napi::TypeError::New(env, std::string(what) + ": path must be absolute and hold no NUL")
        .ThrowAsJavaScriptException();
    return false;
  }
  return true;
}

Napi::Value WalkPathJs(const Napi::CallbackInfo& info) {
  std::string raw;
  if (!WalkArgument(info, "walkPath(path)", &raw)) return info.Env().Undefined();
  return Napi::String::New(info.Env(), WalkPath(raw));
}

}  // namespace leash
