// Identity of an event's process (see identity.h): PIDFD_GET_INFO through a cached pidfd,
// or the event's pidfd, or /proc/<pid>/status when the kernel predates PIDFD_GET_INFO.
#include "identity.h"

#include <fcntl.h>
#include <sys/ioctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

namespace leash {

namespace {

// PIDFD_GET_INFO (Linux 6.13) returns every UID of a process in one call, race-free
// against PID reuse because the pidfd pins the process. Debian 12's headers predate
// it, so the first (64-byte) version of the struct is declared here.
struct PidfdInfoV0 {
  uint64_t mask;
  uint64_t cgroupid;
  uint32_t pid, tgid, ppid, ruid, rgid, euid, egid, suid, sgid, fsuid, fsgid;
  int32_t spare0;
};
static_assert(sizeof(PidfdInfoV0) == 64, "pidfd_info v0 is 64 bytes");
constexpr unsigned long kPidfdGetInfo = _IOWR(0xFF, 11, PidfdInfoV0);
constexpr uint64_t kPidfdInfoPid = 1ULL << 0;
constexpr uint64_t kPidfdInfoCreds = 1ULL << 1;

bool CredsFromProc(int pid, Creds* c) {
  char path[64];
  snprintf(path, sizeof path, "/proc/%d/status", pid);
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  char buf[2048];
  ssize_t n = read(fd, buf, sizeof buf - 1);
  close(fd);
  if (n <= 0) return false;
  buf[n] = 0;
  const char* u = strstr(buf, "\nUid:");
  if (!u) return false;
  return sscanf(u + 5, "%u %u %u %u", &c->uid[0], &c->uid[1], &c->uid[2], &c->uid[3]) == 4;
}

bool InfoCreds(int pidfd, Creds* c) {
  PidfdInfoV0 info;
  memset(&info, 0, sizeof info);
  info.mask = kPidfdInfoPid | kPidfdInfoCreds;
  if (ioctl(pidfd, kPidfdGetInfo, &info) != 0 || !(info.mask & kPidfdInfoCreds)) return false;
  c->uid[0] = info.ruid;
  c->uid[1] = info.euid;
  c->uid[2] = info.suid;
  c->uid[3] = info.fsuid;
  return true;
}

// ENOTTY / EINVAL from PIDFD_GET_INFO: a kernel before 6.13.
bool NoPidfdInfo(int err) { return err == ENOTTY || err == EINVAL; }

}  // namespace

// Credentials through a pidfd kept per process. Safe against PID reuse: a pidfd whose
// process is alive (or a zombie) answers PIDFD_GET_INFO, and while it does its PID cannot
// belong to anyone else; once it is reaped the ioctl fails with ESRCH and the PID is
// opened afresh. A fresh pidfd_open(pid) names the event's process, which is blocked in
// this very open and cannot be reaped unless killed (then the answer no longer matters).
// This costs one ioctl per event instead of the kernel making and us closing a pidfd.
bool Identity::CredsFromCache(int32_t pid, Creds* c) {
  auto it = pidfds_.find(pid);
  if (it != pidfds_.end()) {
    if (InfoCreds(it->second, c)) return true;
    int err = errno;
    close(it->second);
    pidfds_.erase(it);
    if (NoPidfdInfo(err)) {
      pidfdInfoOk_.store(false);
      return false;
    }
  }
  int fd = static_cast<int>(syscall(SYS_pidfd_open, pid, 0));
  if (fd < 0) return false;
  fcntl(fd, F_SETFD, FD_CLOEXEC);
  if (!InfoCreds(fd, c)) {
    if (NoPidfdInfo(errno)) pidfdInfoOk_.store(false);
    close(fd);
    return false;
  }
  if (pidfds_.size() >= kPidfdCacheMax) {
    for (auto& kv : pidfds_) close(kv.second);
    pidfds_.clear();
  }
  pidfds_.emplace(pid, fd);
  return true;
}

bool Identity::CredsOf(int pidfd, int32_t pid, Creds* c) {
  bool infoOk = pidfdInfoOk_.load(std::memory_order_relaxed);
  if (mode_ == kCache && infoOk) {
    if (CredsFromCache(pid, c)) return true;
    if (errno == ESRCH) return false;  // the process is gone
  } else if (pidfd >= 0 && infoOk) {
    if (InfoCreds(pidfd, c)) return true;
    if (NoPidfdInfo(errno)) pidfdInfoOk_.store(false);
    if (errno == ESRCH) return false;  // the process is gone
  }
  procFallback_.fetch_add(1, std::memory_order_relaxed);
  return CredsFromProc(pid, c);
}

void Identity::Close() {
  for (auto& kv : pidfds_) close(kv.second);
  pidfds_.clear();
}

}  // namespace leash
