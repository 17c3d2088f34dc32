// The gate's path walk with a memory (see walkcache.h).
#include "walkcache.h"

#include <fcntl.h>
#include <linux/magic.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/inotify.h>
#include <sys/vfs.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <mutex>
#include <string>
#include <thread>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "errors.h"
#include "walkpath.h"

namespace leash {

namespace {

// What can change a walk through a directory: a child appearing, going, being renamed or re-permitted, or
// the directory itself going. IN_ONLYDIR and IN_DONT_FOLLOW: a prefix that is a symlink or not a directory
// is refused (ENOTDIR) instead of watched through.
constexpr uint32_t kMask = IN_CREATE | IN_DELETE | IN_MOVED_FROM | IN_MOVED_TO | IN_ATTRIB | IN_DELETE_SELF |
                           IN_MOVE_SELF | IN_ONLYDIR | IN_DONT_FOLLOW;
constexpr size_t kMaxPaths = 4096;
constexpr size_t kMaxDeps = 65536;
constexpr size_t kMaxWatches = 8192;

#ifndef F2FS_SUPER_MAGIC
#define F2FS_SUPER_MAGIC 0xF2F52010
#endif

/** Filesystems whose every change goes through this kernel's VFS, so inotify sees it. */
bool Evented(long type) {
  switch (static_cast<unsigned long>(type) & 0xffffffffUL) {
    case EXT4_SUPER_MAGIC:  // ext2/3/4 share it
    case XFS_SUPER_MAGIC:
    case BTRFS_SUPER_MAGIC:
    case F2FS_SUPER_MAGIC:
    case TMPFS_MAGIC:
    case RAMFS_MAGIC:
      return true;
    default:
      return false;
  }
}

struct Watch {
  // False on a filesystem without events: watched only so that the same directory is not asked again.
  bool evented = true;
  // A child's name -> the remembered paths whose walk went through it.
  std::unordered_map<std::string, std::vector<std::string>> byName;
};

// Marks a WalkCache object, so that PathMemoryOf unwraps nothing else.
constexpr napi_type_tag kWalkCacheTag = {0x6c65617368776b63ULL, 0x9e3779b97f4a7c15ULL};

class WalkCache : public Napi::ObjectWrap<WalkCache>, public PathMemory {
 public:
  static Napi::Function Define(Napi::Env env) {
    return DefineClass(env, "WalkCache",
                       {InstanceMethod("walk", &WalkCache::Walk), InstanceMethod("sync", &WalkCache::Sync),
                        InstanceMethod("shared", &WalkCache::Shared),
                        InstanceMethod("stats", &WalkCache::Stats), InstanceMethod("close", &WalkCache::Close)});
  }

  explicit WalkCache(const Napi::CallbackInfo& info) : Napi::ObjectWrap<WalkCache>(info) {
    mnt_ = open("/proc/self/mountinfo", O_RDONLY | O_CLOEXEC);
    ino_ = inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
    stop_ = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (mnt_ < 0 || ino_ < 0 || stop_ < 0) {
      int e = errno;
      const char* what = mnt_ < 0 ? "open /proc/self/mountinfo" : ino_ < 0 ? "inotify_init1" : "eventfd";
      CloseFds();
      ErrnoError(info.Env(), e, what).ThrowAsJavaScriptException();
      return;
    }
    Napi::ArrayBuffer buf = Napi::ArrayBuffer::New(info.Env(), 3 * sizeof(uint32_t));
    shared_ = static_cast<uint32_t*>(buf.Data());
    shared_[0] = shared_[1] = shared_[2] = 0;
    sharedRef_ = Napi::Persistent(buf);
    info.This().As<Napi::Object>().TypeTag(&kWalkCacheTag);
    thread_ = std::thread([this] { Reader(); });
  }

  /**
   * For the gate's native judge: whether `norm` is remembered now (news applied first, as a walk does). It never
   * learns: a path not remembered is left to JavaScript, whose walk learns it.
   */
  bool Remembers(const std::string& norm) override {
    std::lock_guard<std::mutex> lock(mu_);
    if (news_.load(std::memory_order_acquire) && !broken_) CatchUp();
    if (broken_ || known_.count(norm) == 0) return false;
    hits_++;
    return true;
  }
  ~WalkCache() override { Stop(); }

 private:
  /** walk(path) -> the same string walkPath(path) gives. */
  Napi::Value Walk(const Napi::CallbackInfo& info) {
    std::string raw;
    if (!WalkArgument(info, "WalkCache.walk(path)", &raw)) return info.Env().Undefined();
    return Napi::String::New(info.Env(), WalkOne(raw));
  }

  /**
   * sync(): applies, now, whatever the kernel has queued (what the reader thread would apply on waking). After
   * it, every change that completed before the call is reflected. Tests use it to judge the invalidation itself.
   */
  Napi::Value Sync(const Napi::CallbackInfo& info) {
    std::lock_guard<std::mutex> lock(mu_);
    if (!broken_) {
      pollfd p = {mnt_, POLLPRI, 0};
      int n;
      do {
        n = poll(&p, 1, 0);
      } while (n < 0 && errno == EINTR);
      if (n > 0 && (p.revents & (POLLPRI | POLLERR))) mounts_.store(true, std::memory_order_relaxed);
      CatchUp();
    }
    return info.Env().Undefined();
  }

  /**
   * shared() -> ArrayBuffer of three uint32 the JavaScript side reads without a call (paths.ts keeps a memo of
   * remembered answers on it): [0] a generation, moved on whenever a remembered path may have been forgotten;
   * [1] non-zero while news is waiting to be applied (or for good, once closed); [2] whether the last walk's answer
   * was a remembered one.
   */
  Napi::Value Shared(const Napi::CallbackInfo& info) {
    if (sharedRef_.IsEmpty()) return info.Env().Null();
    return sharedRef_.Value();
  }

  void Bump() {
    if (shared_ != nullptr) __atomic_add_fetch(&shared_[0], 1, __ATOMIC_RELEASE);
  }
  void SetNews(uint32_t v) {
    if (shared_ != nullptr) __atomic_store_n(&shared_[1], v, __ATOMIC_RELEASE);
  }

  Napi::Value Stats(const Napi::CallbackInfo& info) {
    std::lock_guard<std::mutex> lock(mu_);
    Napi::Object o = Napi::Object::New(info.Env());
    o.Set("hits", static_cast<double>(hits_));
    o.Set("misses", static_cast<double>(misses_));
    o.Set("wakeups", static_cast<double>(wakeups_));
    o.Set("events", static_cast<double>(events_));
    o.Set("forgotten", static_cast<double>(forgotten_));
    o.Set("broken", broken_);
    o.Set("paths", static_cast<double>(known_.size()));
    o.Set("walkOnly", static_cast<double>(walkOnly_.size()));
    o.Set("watches", static_cast<double>(watches_.size()));
    return o;
  }

  Napi::Value Close(const Napi::CallbackInfo& info) {
    Stop();
    return info.Env().Undefined();
  }

  /** Ends the reader thread, then closes the descriptors; walks from then on are plain. */
  void Stop() {
    if (thread_.joinable()) {
      uint64_t one = 1;
      ssize_t w = write(stop_, &one, sizeof one);
      (void)w;
      thread_.join();
    }
    std::lock_guard<std::mutex> lock(mu_);
    broken_ = true;
    Forget();
    SetNews(1);  // for good: every walk from JavaScript comes here, and is a plain one
    watches_.clear();
    CloseFds();
  }

  void CloseFds() {
    for (int* fd : {&ino_, &mnt_, &stop_}) {
      if (*fd >= 0) close(*fd);
      *fd = -1;
    }
  }

  /**
   * The reader: sleeps in poll until inotify has events, the mount table changed or Stop; then applies them
   * under the lock. A failure to read marks the cache broken (every walk plain from then on), never stale.
   */
  void Reader() {
    for (;;) {
      pollfd p[3] = {{ino_, POLLIN, 0}, {mnt_, POLLPRI, 0}, {stop_, POLLIN, 0}};
      int n = poll(p, 3, -1);
      if (n < 0 && errno == EINTR) continue;
      if (p[2].revents != 0) return;
      // Said before the lock is taken: a walk that sees it applies the news itself instead of waiting for
      // this thread to win the lock from a busy JavaScript thread. This poll consumed the mount table's
      // news (it reports each change once), so that is passed on; inotify's stays queued until read.
      if (p[1].revents & (POLLPRI | POLLERR)) mounts_.store(true, std::memory_order_relaxed);
      news_.store(true, std::memory_order_release);
      SetNews(1);
      std::lock_guard<std::mutex> lock(mu_);
      wakeups_++;
      if (n < 0 || (p[0].revents & (POLLERR | POLLNVAL)) || (p[1].revents & POLLNVAL)) {
        Break();
        return;
      }
      CatchUp();
    }
  }

  /** Applies the news (the lock is held): the reader's, or a walk's that found news waiting. */
  void CatchUp() {
    news_.store(false, std::memory_order_relaxed);
    if (mounts_.exchange(false, std::memory_order_acq_rel)) Forget();
    if (!Drain()) Break();
    // Cleared only once applied (and the generation moved if anything was forgotten): until then the JavaScript
    // memo is not used.
    if (!broken_) SetNews(0);
  }

  void Break() {
    broken_ = true;
    Forget();
  }

  std::string WalkOne(const std::string& raw) {
    bool dots = false;
    std::vector<std::string_view> parts = PathComponents(raw, &dots);
    if (shared_ != nullptr) shared_[2] = 0;
    if (dots) return WalkComponents(parts);  // `..`: two readings, never remembered
    std::string norm = JoinComponents(parts);
    std::lock_guard<std::mutex> lock(mu_);
    if (news_.load(std::memory_order_acquire) && !broken_) CatchUp();
    if (broken_) return WalkGivesItself(norm) ? norm : WalkComponents(parts);
    if (known_.count(norm) != 0) {
      hits_++;
      if (shared_ != nullptr) shared_[2] = 1;
      return norm;
    }
    misses_++;
    if (walkOnly_.count(norm) == 0) {
      if (Learn(norm, parts)) {
        if (shared_ != nullptr) shared_[2] = 1;
        return norm;
      }
      // Not to be remembered (a symlink on the way, a filesystem without events, no permission to watch):
      // walked on every call from now on, without trying again. Only ever a walk more, never a stale answer.
      if (walkOnly_.size() >= kMaxPaths) walkOnly_.clear();
      walkOnly_.insert(norm);
    }
    if (WalkGivesItself(norm)) return norm;
    return WalkComponents(parts);
  }

  /** Applies every queued event; false when the queue cannot be read. */
  bool Drain() {
    alignas(inotify_event) char buf[16384];
    for (;;) {
      ssize_t n = read(ino_, buf, sizeof buf);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && errno == EAGAIN) return true;
      if (n <= 0) return false;
      for (char* at = buf; at < buf + n;) {
        const inotify_event* ev = reinterpret_cast<const inotify_event*>(at);
        at += sizeof(inotify_event) + ev->len;
        events_++;
        if (ev->mask & IN_Q_OVERFLOW) {
          Forget();
          continue;
        }
        auto w = watches_.find(ev->wd);
        if (w == watches_.end()) continue;
        if (ev->len > 0) {
          auto b = w->second.byName.find(std::string(ev->name, strnlen(ev->name, ev->len)));
          if (b != w->second.byName.end()) {
            Drop(b->second);
            w->second.byName.erase(b);
          }
        } else {
          // The directory itself (its permissions, deleted, moved, unmounted): every walk through it.
          for (auto& [name, keys] : w->second.byName) Drop(keys);
          w->second.byName.clear();
        }
        if (ev->mask & IN_IGNORED) watches_.erase(w);
      }
    }
  }

  void Drop(const std::vector<std::string>& keys) {
    size_t gone = 0;
    for (const std::string& k : keys) gone += known_.erase(k);
    forgotten_ += gone;
    deps_ -= keys.size();
    if (gone > 0) Bump();
  }

  /** Forgets every path (the watches stay: they cost nothing while nothing depends on them). */
  void Forget() {
    forgotten_ += known_.size();
    known_.clear();
    Bump();
    walkOnly_.clear();
    for (auto& [wd, w] : watches_) w.byName.clear();
    deps_ = 0;
  }

  /**
   * Watches the directory `dir` (the holder of the next component). 1 watched; 0 the directory does not exist
   * or is not one (the walk stops before it); -1 not rememberable (permission, limits, a filesystem without
   * events).
   */
  int AddWatch(const std::string& dir, int* wd) {
    *wd = inotify_add_watch(ino_, dir.c_str(), kMask);
    if (*wd < 0) return errno == ENOENT || errno == ENOTDIR ? 0 : -1;
    auto w = watches_.find(*wd);
    if (w == watches_.end()) {
      struct statfs sf;
      Watch fresh;
      fresh.evented = statfs(dir.c_str(), &sf) == 0 && Evented(sf.f_type);
      w = watches_.emplace(*wd, std::move(fresh)).first;
    }
    return w->second.evented ? 1 : -1;
  }

  /**
   * Remembers `norm` if its walk gives itself: the directories are watched first, top down, and only then is
   * the walk made, so a change after a directory is watched is an event, and one before it is seen by the walk.
   */
  bool Learn(const std::string& norm, const std::vector<std::string_view>& parts) {
    if (parts.empty()) return false;
    if (known_.size() >= kMaxPaths || deps_ >= kMaxDeps) Forget();
    if (watches_.size() >= kMaxWatches) return false;  // the watches stay until their directories go
    std::vector<std::pair<int, std::string_view>> deps;
    std::string dir = "/";
    for (size_t i = 0; i < parts.size(); i++) {
      int wd = -1;
      int r = AddWatch(dir, &wd);
      if (r < 0) return false;
      if (r == 0) {
        if (i == 0) return false;
        break;  // dir (parts[i-1]) is missing or a file: its parent's watch covers it appearing
      }
      deps.emplace_back(wd, parts[i]);
      if (dir.size() > 1) dir += '/';
      dir.append(parts[i]);
    }
    if (!WalkGivesItself(norm)) return false;
    for (auto& [wd, name] : deps) watches_[wd].byName[std::string(name)].push_back(norm);
    deps_ += deps.size();
    known_.insert(norm);
    return true;
  }

  int ino_ = -1;
  int mnt_ = -1;
  int stop_ = -1;
  std::thread thread_;
  uint32_t* shared_ = nullptr;  // in sharedRef_'s buffer (see Shared)
  Napi::Reference<Napi::ArrayBuffer> sharedRef_;
  // Everything below is the reader thread's and the walk's alike.
  std::mutex mu_;
  std::atomic<bool> news_{false};
  std::atomic<bool> mounts_{false};
  bool broken_ = false;
  std::unordered_set<std::string> known_;
  std::unordered_set<std::string> walkOnly_;
  std::unordered_map<int, Watch> watches_;
  size_t deps_ = 0;
  uint64_t hits_ = 0, misses_ = 0, wakeups_ = 0, events_ = 0, forgotten_ = 0;
};

}  // namespace

void InitWalkCache(Napi::Env env, Napi::Object exports) { exports.Set("WalkCache", WalkCache::Define(env)); }

PathMemory* PathMemoryOf(Napi::Value v) {
  if (!v.IsObject() || !v.As<Napi::Object>().CheckTypeTag(&kWalkCacheTag)) return nullptr;
  return WalkCache::Unwrap(v.As<Napi::Object>());
}

}  // namespace leash
