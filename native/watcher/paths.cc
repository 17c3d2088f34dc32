// Paths of events (see paths.h): readlink of our own descriptor, and the re-opening by handle
// that keeps an agent's own mount namespace from choosing the name its open is judged on.
#include "paths.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "clock.h"

namespace leash {

PathResolver::PathResolver() {
  // Paths are read with readlinkat(this, "<fd>"): one lookup instead of the walk of "/proc/self/fd/<fd>".
  procFd_ = open("/proc/self/fd", O_PATH | O_DIRECTORY | O_CLOEXEC);
}

void PathResolver::AddMount(dev_t dev, int fd) {
  std::lock_guard<std::mutex> g(mountMu_);
  if (!mountFds_.emplace(dev, fd).second) close(fd);
}

void PathResolver::AddAgentDev(dev_t dev) {
  std::lock_guard<std::mutex> g(mountMu_);
  agentDevs_.insert(dev);
}

void PathResolver::Close() {
  if (procFd_ >= 0) close(procFd_);
  procFd_ = -1;
  std::lock_guard<std::mutex> g(mountMu_);
  for (auto& kv : mountFds_) close(kv.second);
  mountFds_.clear();
  agentDevs_.clear();
  if (mountinfoFd_ >= 0) close(mountinfoFd_);
  mountinfoFd_ = -1;
}

// The name of one of our descriptors, into path_.
bool PathResolver::ReadLinkFd(int fd) {
  if (fd < 0) return false;
  char name[16];
  char* e = name + sizeof name;
  char* p = e;
  *--p = 0;
  unsigned v = static_cast<unsigned>(fd);
  do {
    *--p = static_cast<char>('0' + v % 10);
    v /= 10;
  } while (v);
  ssize_t pl;
  if (procFd_ >= 0) {
    pl = readlinkat(procFd_, p, path_, sizeof path_ - 1);
  } else {
    char link[64];
    snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
    pl = readlink(link, path_, sizeof path_ - 1);
  }
  if (pl <= 0 || static_cast<size_t>(pl) >= sizeof path_ - 1) return false;  // empty or cut short
  pathLen_ = static_cast<size_t>(pl);
  return true;
}

// Is this mount one of this process's own (the watcher's mount namespace)?
//
// With unique mount IDs (statx STATX_MNT_ID_UNIQUE + listmount, Linux 6.8+) the set of our
// mounts can be stale only by missing new mounts of ours: a unique ID is never reused, so a
// mount of another namespace can never match. A miss re-lists our mounts (at most every
// 50 ms); a new mount of ours missed in that window is only renamed through our marked
// mount of the same filesystem. No syscall per event beyond the statx.
//
// Without them, the classic 32-bit IDs are reused, so the set is re-read whenever
// /proc/self/mountinfo signals a change (checked with poll on every event).
bool PathResolver::OurMount(uint64_t id, bool unique) {
  if (unique) {
    if (ourUnique_.count(id)) return true;
    int64_t now = NowNs();
    if (now - lastListNs_ < 50 * 1000 * 1000) return false;
    lastListNs_ = now;
    if (!ListOurMounts()) return false;
    return ourUnique_.count(id) > 0;
  }
  bool reload = mountinfoFd_ < 0;
  if (!reload) {
    pollfd p{mountinfoFd_, POLLPRI, 0};
    reload = poll(&p, 1, 0) > 0 && (p.revents & (POLLPRI | POLLERR));
  }
  if (reload) {
    if (mountinfoFd_ >= 0) close(mountinfoFd_);
    mountinfoFd_ = open("/proc/self/mountinfo", O_RDONLY | O_CLOEXEC);
    ourMounts_.clear();
    std::string text;
    char buf[65536];
    for (;;) {
      ssize_t n = mountinfoFd_ >= 0 ? read(mountinfoFd_, buf, sizeof buf) : -1;
      if (n <= 0) break;
      text.append(buf, static_cast<size_t>(n));
    }
    size_t i = 0;
    while (i < text.size()) {
      ourMounts_.insert(strtoull(text.c_str() + i, nullptr, 10));
      size_t nl = text.find('\n', i);
      if (nl == std::string::npos) break;
      i = nl + 1;
    }
  }
  return ourMounts_.count(id) > 0;
}

// listmount(2) of every mount in our namespace, by unique ID.
bool PathResolver::ListOurMounts() {
  struct {
    uint32_t size, spare;
    uint64_t mnt_id, param;
  } req{24, 0, ~0ULL /* LSMT_ROOT */, 0};
  std::unordered_set<uint64_t> ids;
  std::vector<uint64_t> buf(1024);
  for (;;) {
    long n = syscall(458 /* __NR_listmount */, &req, buf.data(), buf.size(), 0);
    if (n < 0) {
      listmountOk_ = false;
      return false;
    }
    ids.insert(buf.begin(), buf.begin() + n);
    if (static_cast<size_t>(n) < buf.size()) break;
    req.param = buf[static_cast<size_t>(n) - 1];  // continue after the last ID
  }
  ourUnique_.swap(ids);
  return true;
}

// The path a subject's event is judged on. Through one of our mounts it is what
// readlink says. Through a mount of another namespace (an agent's `unshare -Urm`, its
// own bind mounts) readlink would name the file as that namespace sees it, which the
// agent controls: so the file is re-opened by handle through our own mount of the
// same filesystem and named from there. No such mount, no name: engine_error.
bool PathResolver::PathOf(int fd) {
  pathLen_ = 0;  // set only by a successful lookup: no name is logged as ""
  facts_.mode = 0;
  agentFs_ = false;
  struct statx sx;
  constexpr unsigned kMntIdUnique = 0x4000;  // STATX_MNT_ID_UNIQUE (Linux 6.8)
  // The file's type, owner, mode, inode and link count come with the same call (the hard-link
  // check: hardlinks.h); the common case pays nothing for them.
  constexpr unsigned kFacts = STATX_TYPE | STATX_MODE | STATX_NLINK | STATX_UID | STATX_GID | STATX_INO;
  unsigned want = STATX_MNT_ID | (wantFacts_ ? kFacts : 0u) | (listmountOk_ ? kMntIdUnique : 0u);  // an old kernel ignores the new bit
  if (statx(fd, "", AT_EMPTY_PATH, want, &sx) != 0) return false;
  if (wantFacts_ && (sx.stx_mask & kFacts) == kFacts) {
    facts_.dev = makedev(sx.stx_dev_major, sx.stx_dev_minor);
    facts_.ino = sx.stx_ino;
    facts_.nlink = sx.stx_nlink;
    facts_.uid = sx.stx_uid;
    facts_.gid = sx.stx_gid;
    facts_.mode = sx.stx_mode;
  }
  bool unique = (sx.stx_mask & kMntIdUnique) != 0;
  if (!unique && !(sx.stx_mask & STATX_MNT_ID)) return false;
  if (OurMount(sx.stx_mnt_id, unique && listmountOk_)) return ReadLinkFd(fd);
  foreignMount_.fetch_add(1, std::memory_order_relaxed);
  struct {
    file_handle fh;
    unsigned char bytes[MAX_HANDLE_SZ];
  } h;
  h.fh.handle_bytes = MAX_HANDLE_SZ;
  int mntId = 0;
  if (name_to_handle_at(fd, "", &h.fh, &mntId, AT_EMPTY_PATH) != 0) return false;
  dev_t dev = makedev(sx.stx_dev_major, sx.stx_dev_minor);
  std::lock_guard<std::mutex> g(mountMu_);
  // An agent's own filesystem is never mounted in our namespace: only this branch meets it.
  agentFs_ = !agentDevs_.empty() && agentDevs_.count(dev) > 0;
  auto it = mountFds_.find(dev);
  if (it == mountFds_.end() || it->second < 0) return false;
  int nfd = open_by_handle_at(it->second, &h.fh, O_PATH | O_CLOEXEC);
  if (nfd < 0) return false;
  bool ok = ReadLinkFd(nfd);
  close(nfd);
  return ok;
}

}  // namespace leash
