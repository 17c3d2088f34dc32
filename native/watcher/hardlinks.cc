// Hard links in the watcher (see hardlinks.h).
#include "hardlinks.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <string_view>
#include <utility>
#include <vector>

namespace leash {

bool CouldHaveLinked(const FileFacts& f, const Creds& c, bool protectedHardlinks) {
  if (f.nlink <= 1 || !S_ISREG(f.mode)) return false;
  if (!protectedHardlinks) return true;
  for (uint32_t u : c.uid)
    if (u == f.uid) return true;  // the owner may link its own file anywhere
  if (f.mode & S_ISUID) return false;
  if ((f.mode & (S_ISGID | S_IXGRP)) == (S_ISGID | S_IXGRP)) return false;
  constexpr uint32_t kOtherRw = S_IROTH | S_IWOTH, kGroupRw = S_IRGRP | S_IWGRP;
  return (f.mode & kOtherRw) == kOtherRw || (f.mode & kGroupRw) == kGroupRw;
}

namespace {

/** statx of a name without following its last component (a stat: no fanotify event). */
bool StatName(const std::string& path, bool follow, uint64_t* dev, uint64_t* ino) {
  struct statx sx;
  int flags = AT_NO_AUTOMOUNT | (follow ? 0 : AT_SYMLINK_NOFOLLOW);
  if (statx(AT_FDCWD, path.c_str(), flags, STATX_INO, &sx) != 0) return false;
  *dev = makedev(sx.stx_dev_major, sx.stx_dev_minor);
  *ino = sx.stx_ino;
  return true;
}

/** Does this plain entry name the file? The name as a link is (its directory's inode, its last component). */
bool NamesFile(const std::string& norm, const FileFacts& f, std::pair<uint64_t, std::string>* name) {
  uint64_t dev, ino;
  if (!StatName(norm, false, &dev, &ino) || dev != f.dev || ino != f.ino) return false;
  size_t slash = norm.rfind('/');
  if (slash == std::string::npos) return false;
  std::string dir = slash == 0 ? std::string("/") : norm.substr(0, slash);
  uint64_t ddev, dino;
  if (!StatName(dir, true, &ddev, &dino)) return false;
  *name = {dino, norm.substr(slash + 1)};
  return true;
}

/** Whitelist: are the plain allow entries naming this inode `nlink` distinct, allowed names? */
template <typename Each>
bool AllNamesAllowed(const FileFacts& f, Each each) {
  std::vector<std::pair<uint64_t, std::string>> names;
  bool ok = true;
  each([&](const std::string& norm, bool allowed) {
    std::pair<uint64_t, std::string> n;
    if (!ok || !NamesFile(norm, f, &n)) return;
    if (!allowed) {
      ok = false;  // a name of it the policy refuses (a deny entry under an allowed directory)
      return;
    }
    for (const auto& m : names)
      if (m == n) return;  // the same name through another spelling
    names.push_back(std::move(n));
  });
  return ok && names.size() == f.nlink;
}

}  // namespace

MatchVerdict JudgeLinks(const FsPolicy& p, bool exec, const FileFacts& f, MatchVerdict v) {
  if (!v.allow) return v;
  bool whitelist = exec ? p.cmdWhitelist : p.fsWhitelist;
  if (whitelist) {
    bool all;
    if (exec) {
      all = AllNamesAllowed(f, [&](auto fn) {
        for (const auto& kv : p.cmdAllow.paths()) fn(kv.first, MatchCommandPolicy(&p, p.failOpen, kv.first).allow);
      });
    } else {
      all = AllNamesAllowed(f, [&](auto fn) {
        for (const auto& l : p.fsAllow.literals()) fn(l.norm, MatchPathPolicy(&p, p.failOpen, l.norm).allow);
      });
    }
    return all ? v : MatchVerdict{false, Reason::kHardlinked, nullptr};
  }
  std::pair<uint64_t, std::string> n;
  if (exec) {
    for (const auto& kv : p.cmdDeny.paths())
      if (NamesFile(kv.first, f, &n)) return {false, Reason::kHardlinked, &kv.second};
  } else {
    for (const auto& l : p.fsDeny.literals())
      if (NamesFile(l.norm, f, &n)) return {false, Reason::kHardlinked, l.rule};
  }
  return v;
}

bool ReadProtectedHardlinks() {
  int fd = open("/proc/sys/fs/protected_hardlinks", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  char b[8] = {0};
  ssize_t n = read(fd, b, sizeof b - 1);
  close(fd);
  return n > 0 && b[0] != '0';
}

}  // namespace leash
