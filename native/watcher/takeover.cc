// The in-flight table (takeover.h) and the standby watcher's side of a takeover: waiting on the
// active watcher's pidfd, then answering the events it left pending, then handing over to the
// read loop. JavaScript surface: tableFd, standby, takeoverRecords().
#include "takeover.h"

#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <unordered_set>
#include <vector>

#include "clock.h"
#include "watcher.h"

#ifndef MFD_CLOEXEC
#define MFD_CLOEXEC 0x0001U
#endif
#ifndef MFD_ALLOW_SEALING
#define MFD_ALLOW_SEALING 0x0002U
#endif

namespace leash {

bool InflightTable::Create() {
  int fd = static_cast<int>(syscall(SYS_memfd_create, "leash-inflight", MFD_CLOEXEC | MFD_ALLOW_SEALING));
  if (fd < 0) return false;
  if (ftruncate(fd, static_cast<off_t>(Bytes())) != 0) {
    int e = errno;
    close(fd);
    errno = e;
    return false;
  }
  // Its size is fixed for good: a standby maps exactly this much.
  fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL);
  if (!Adopt(fd)) return false;
  memset(area_, 0, kAreaBytes);  // written once here, so its pages are there before the first read
  hdr_->magic = kMagic;
  hdr_->slots = kSlots;
  return true;
}

bool InflightTable::Adopt(int fd) {
  void* m = mmap(nullptr, Bytes(), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd, 0);
  if (m == MAP_FAILED) {
    int e = errno;
    close(fd);
    errno = e;
    return false;
  }
  auto* h = static_cast<Header*>(m);
  if (h->magic != 0 && (h->magic != kMagic || h->slots != kSlots)) {
    munmap(m, Bytes());
    close(fd);
    errno = EPROTO;  // another build's table
    return false;
  }
  fd_ = fd;
  map_ = m;
  hdr_ = h;
  slots_ = reinterpret_cast<Slot*>(static_cast<char*>(m) + sizeof(Header));
  area_ = static_cast<char*>(m) + SlotBytes();
  mlock(area_, kAreaBytes);  // best effort: without swap its pages stay anyway
  return true;
}

void InflightTable::Settle() {
  if (!slots_) return;
  int32_t hi = 0;
  for (uint32_t i = 0; i < kSlots; i++)
    if (slots_[i].pid.load(std::memory_order_relaxed) != 0) hi = static_cast<int32_t>(i);
  memset(area_, 0, 64);  // the last read's metadata: answered (or recorded), not to be taken again
  hdr_->maxFd.store(hi, std::memory_order_release);
}

void InflightTable::Close() {
  if (map_) munmap(map_, Bytes());
  map_ = nullptr;
  hdr_ = nullptr;
  slots_ = nullptr;
  area_ = nullptr;
  if (fd_ >= 0) close(fd_);
  fd_ = -1;
}

// ---- the standby (loop thread) ----

bool Watcher::WaitForActive() {
  for (;;) {
    if (stop_.load(std::memory_order_relaxed)) return false;
    if (activePidfd_ < 0) {
      // The watcher waited on has exited. Of the standbys, the one whose claim on the table lands first takes over;
      // the others follow it as their new active (and claim from it in turn when it dies).
      int32_t now = 0;
      if (inflight_.Claim(ownerPid_, static_cast<int32_t>(getpid()), &now)) return true;
      ownerPid_ = now;
      if (now <= 0) continue;  // no owner named: claim it
      activePidfd_ = static_cast<int>(syscall(SYS_pidfd_open, now, 0));
      if (activePidfd_ < 0) {
        if (errno == ESRCH) continue;  // that one is gone already: claim from it
        loopErrno_ = errno;
        return false;
      }
      followed_.fetch_add(1, std::memory_order_relaxed);
      continue;
    }
    pollfd p[2] = {{activePidfd_, POLLIN, 0}, {stopFd_, POLLIN, 0}};
    int r = poll(p, 2, 1000);
    dog_.BeatLoop(NowMs());
    if (r < 0 && errno != EINTR) {
      loopErrno_ = errno;
      return false;
    }
    if (r > 0 && (p[1].revents & POLLIN)) return false;
    if (r > 0 && (p[0].revents & (POLLIN | POLLHUP | POLLERR))) {
      close(activePidfd_);  // it has exited
      activePidfd_ = -1;
      continue;
    }
    // The table names another owner than the one waited on (a standby spawned while a takeover was under way):
    // wait on that one.
    int32_t o = inflight_.Owner();
    if (o > 0 && o != ownerPid_) {
      int pfd = static_cast<int>(syscall(SYS_pidfd_open, o, 0));
      if (pfd >= 0 || errno == ESRCH) {
        close(activePidfd_);
        activePidfd_ = pfd;
        ownerPid_ = o;
        followed_.fetch_add(1, std::memory_order_relaxed);
      }
    }
  }
}

namespace {

/** The subject UIDs `c` carries under `snap` (first one), or -1. */
int64_t SubjectUid(const Snapshot& snap, const Creds& c) {
  for (uint32_t u : c.uid)
    if (snap.subjects.count(u)) return u;
  return -1;
}

bool ReadSmall(const char* path, char* buf, size_t n) {
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  ssize_t r = read(fd, buf, n - 1);
  close(fd);
  if (r < 0) return false;
  buf[r] = 0;
  return true;
}

}  // namespace

void Watcher::TakeOver() {
  std::shared_ptr<const Snapshot> snap = std::atomic_load(&snap_);
  std::vector<TakeoverRecord> recs;
  // 0. The dead watcher's last read, which the kernel wrote into the read area before read(2)
  // returned: if it was killed inside read(2), or before it recorded the event, the event is
  // recorded now, as the dead watcher would have. (If it was answered already, answering it again
  // finds nothing: a descriptor number is used by one pending event of a reader at a time, and a
  // later read would have overwritten the area.)
  int areaFd = -1;
  {
    const auto* m = reinterpret_cast<const fanotify_event_metadata*>(inflight_.Area());
    if (m && m->vers == FANOTIFY_METADATA_VERSION && m->event_len >= FAN_EVENT_METADATA_LEN &&
        (m->mask & kPermMask) && m->fd >= 0 && static_cast<uint32_t>(m->fd) < InflightTable::kSlots && m->pid > 0 &&
        inflight_.PidAt(m->fd) == 0) {
      areaFd = m->fd;
      inflight_.Record(m->fd, m->pid, static_cast<uint32_t>(m->mask));
    }
  }
  // A fence: every free descriptor number up to the highest one the dead watcher's events can
  // have had is taken (copies of the stop eventfd), so that the events this watcher reads now
  // get numbers above it and a response by number reaches only the dead watcher's events.
  int hi = inflight_.MaxFd() + static_cast<int>(kReadBytes / sizeof(fanotify_event_metadata)) + 64;
  if (hi >= static_cast<int>(InflightTable::kSlots)) hi = static_cast<int>(InflightTable::kSlots) - 1;
  // The fence never takes the last descriptors: the takeover itself needs some (the /proc scan, each
  // opener's pidfd, each drained event's own descriptor, which the kernel cannot make in a full table
  // and then answers FAN_DENY itself, whoever's event it is). A dead watcher with that many open
  // descriptors (its limit is ours: the same service spawned both) is not a case we meet.
  rlimit nofile{};
  if (getrlimit(RLIMIT_NOFILE, &nofile) == 0 && nofile.rlim_cur != RLIM_INFINITY &&
      static_cast<rlim_t>(hi) + kFenceReserve >= nofile.rlim_cur) {
    hi = nofile.rlim_cur > kFenceReserve ? static_cast<int>(nofile.rlim_cur - kFenceReserve) - 1 : 0;
    takeoverFenceErrno_.store(EMFILE, std::memory_order_relaxed);
  }
  std::vector<int> fence;
  for (;;) {
    int d = fcntl(stopFd_, F_DUPFD_CLOEXEC, 0);
    if (d < 0) {
      takeoverFenceErrno_.store(static_cast<uint64_t>(errno), std::memory_order_relaxed);
      break;  // out of descriptors: the numbers above are ours anyway
    }
    if (d > hi) {
      close(d);
      break;
    }
    fence.push_back(d);
  }
  takeoverHi_.store(static_cast<uint64_t>(hi), std::memory_order_relaxed);
  // Every recorded event is answered, also one above a fence cut short (the table's mark is above every slot recorded).
  int top = std::max(hi, std::min(inflight_.MaxFd(), static_cast<int>(InflightTable::kSlots) - 1));
  std::vector<bool> recorded(static_cast<size_t>(top) + 1, false);
  std::unordered_set<int32_t> known;  // openers whose event is accounted for
  auto answer = [&](int fd, bool allow) -> bool {
    fanotify_response r{fd, static_cast<__u32>(allow ? FAN_ALLOW : FAN_DENY)};
    return write(respFd_, &r, sizeof r) == static_cast<ssize_t>(sizeof r);
  };
  // 1. The events the dead watcher recorded: a subject's was never judged, so it is denied.
  for (int fd = 0; fd <= top; fd++) {
    int32_t pid = inflight_.PidAt(fd);
    if (pid == 0) continue;
    recorded[static_cast<size_t>(fd)] = true;
    if (fd != areaFd) known.insert(pid);
    uint32_t mask = inflight_.MaskAt(fd);
    Creds c;
    bool alive = identity_.CredsOf(-1, pid, &c);
    if (!alive) takeoverNoCreds_.fetch_add(1, std::memory_order_relaxed);
    int64_t uid = alive ? SubjectUid(*snap, c) : -1;
    bool allow = alive && uid < 0;
    if (answer(fd, allow)) {
      if (fd == areaFd) {
        known.insert(pid);
        takeoverFromArea_.fetch_add(1, std::memory_order_relaxed);
      }
      (allow ? takeoverAllowed_ : takeoverDenied_).fetch_add(1, std::memory_order_relaxed);
      if (uid >= 0)
        recs.push_back({pid, static_cast<uint32_t>(uid), (mask & FAN_OPEN_EXEC_PERM) != 0, allow, true});
    }
    inflight_.Clear(fd);
  }
  // 2. The processes blocked in a permission wait now, whose event is not a recorded one: each
  // has an event still queued, or one the dead watcher took out of the queue but never recorded
  // (it was killed inside read(2); it reads one event at a time, so at most one is lost).
  std::vector<std::pair<int32_t, int64_t>> waiting;  // tgid, subject uid or -1
  bool scanned = false;
  if (DIR* proc = opendir("/proc")) {
    scanned = true;
    while (dirent* e = readdir(proc)) {
      char* end;
      long tgid = strtol(e->d_name, &end, 10);
      if (*end || tgid <= 0 || tgid == selfPid_ || known.count(static_cast<int32_t>(tgid))) continue;
      char path[64];
      snprintf(path, sizeof path, "/proc/%ld/task", tgid);
      DIR* tasks = opendir(path);
      if (!tasks) continue;
      bool blocked = false;
      while (dirent* t = readdir(tasks)) {
        if (t->d_name[0] == '.') continue;
        char wp[384], w[64];
        snprintf(wp, sizeof wp, "/proc/%ld/task/%s/wchan", tgid, t->d_name);
        if (ReadSmall(wp, w, sizeof w) && (strstr(w, "fanotify_handle_event") || strstr(w, "fanotify_get_response"))) {
          blocked = true;
          break;
        }
      }
      closedir(tasks);
      if (!blocked) continue;
      Creds c;
      int64_t uid = identity_.CredsOf(-1, static_cast<int32_t>(tgid), &c) ? SubjectUid(*snap, c) : -1;
      waiting.emplace_back(static_cast<int32_t>(tgid), uid);
    }
    closedir(proc);
  }
  // 3. What is queued: read and judged as usual, every event answered before the next read.
  // Its openers are accounted for; events arriving now get numbers above the fence.
  {
    char* buf = inflight_.Area();  // the dead watcher's last read is recorded (step 0): the area is ours
    seen_ = &known;
    for (;;) {
      ssize_t n = read(fd_, buf, readLen_);
      if (n > 0) {
        Process(buf, n);
        takeoverDrained_.fetch_add(1, std::memory_order_relaxed);
        continue;
      }
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && errno != EAGAIN) takeoverDrainErrno_.store(static_cast<uint64_t>(errno), std::memory_order_relaxed);
      break;
    }
    seen_ = nullptr;
  }
  // 4. A waiting process whose event was neither recorded nor queued owns the lost one: its
  // verdict is that process's (a subject's is denied); with none to tell, or no /proc, deny.
  bool subjectWaiting = !scanned;
  for (auto& w : waiting)
    if (!known.count(w.first) && w.second >= 0) subjectWaiting = true;
  for (int fd = 0; fd <= hi; fd++) {
    if (recorded[static_cast<size_t>(fd)]) continue;
    if (answer(fd, !subjectWaiting)) {  // ENOENT: no event of that number is pending
      takeoverUnrecorded_.fetch_add(1, std::memory_order_relaxed);
      (subjectWaiting ? takeoverDenied_ : takeoverAllowed_).fetch_add(1, std::memory_order_relaxed);
      recs.push_back({0, 0, false, !subjectWaiting, false});
    }
  }
  for (int d : fence) close(d);
  inflight_.Settle();  // nothing of the dead watcher's is pending now; this watcher's numbers start afresh
  {
    std::lock_guard<std::mutex> g(tmu_);
    takeoverRecs_.insert(takeoverRecs_.end(), recs.begin(), recs.end());
  }
  if (activePidfd_ >= 0) close(activePidfd_);
  activePidfd_ = -1;
  standby_.store(false);
  takeovers_.fetch_add(1, std::memory_order_relaxed);
  tsfn_.NonBlockingCall();  // JavaScript logs the takeover (takeoverRecords)
}

// ---- JavaScript surface ----

Napi::Value Watcher::TableFd(const Napi::CallbackInfo& info) { return Napi::Number::New(info.Env(), inflight_.fd()); }
Napi::Value Watcher::Standby(const Napi::CallbackInfo& info) { return Napi::Boolean::New(info.Env(), standby_.load()); }

/** takeoverRecords() -> [{pid, uid, exec, allow, recorded}]: what the takeover answered (once). */
Napi::Value Watcher::TakeoverRecords(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  std::vector<TakeoverRecord> recs;
  {
    std::lock_guard<std::mutex> g(tmu_);
    recs.swap(takeoverRecs_);
  }
  Napi::Array a = Napi::Array::New(env, recs.size());
  for (size_t i = 0; i < recs.size(); i++) {
    Napi::Object o = Napi::Object::New(env);
    o.Set("pid", Napi::Number::New(env, recs[i].pid));
    o.Set("uid", Napi::Number::New(env, recs[i].uid));
    o.Set("exec", Napi::Boolean::New(env, recs[i].exec));
    o.Set("allow", Napi::Boolean::New(env, recs[i].allow));
    o.Set("recorded", Napi::Boolean::New(env, recs[i].recorded));
    a.Set(static_cast<uint32_t>(i), o);
  }
  return a;
}

}  // namespace leash
