// Identity: which UIDs the process behind a fanotify event carries (real, effective, saved,
// filesystem). Owns the per-process pidfd cache and the PIDFD_GET_INFO / /proc fallbacks;
// used by the read loop only (fanotify_loop.cc), counters read by Watcher.stats().
#pragma once
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <unordered_map>

namespace leash {

/** The four UIDs of a process: real, effective, saved, filesystem. */
struct Creds {
  uint32_t uid[4];
};

class Identity {
 public:
  /**
   * How credentials are read. kCache (default): one pidfd per live process, kept;
   * kReport: the kernel's pidfd on every event (FAN_REPORT_PIDFD); kProc: /proc/<pid>/status.
   * The last two are for measurement (bench/fanotify --explore).
   */
  enum Mode { kCache, kReport, kProc };

  explicit Identity(Mode mode = kCache) : mode_(mode) {}
  Identity(const Identity&) = delete;
  Identity& operator=(const Identity&) = delete;
  ~Identity() { Close(); }

  Mode mode() const { return mode_; }
  void set_mode(Mode m) { mode_ = m; }

  /**
   * The credentials of `pid` (`pidfd`: the event's own, or -1). False when the process is gone
   * (its open cannot complete) or cannot be read. Loop thread only.
   */
  bool CredsOf(int pidfd, int32_t pid, Creds* c);

  /** Closes every cached pidfd. */
  void Close();

  /** Events whose credentials came from /proc (no PIDFD_GET_INFO): Watcher.stats().procFallback. */
  uint64_t proc_fallbacks() const { return procFallback_.load(std::memory_order_relaxed); }

 private:
  bool CredsFromCache(int32_t pid, Creds* c);

  static constexpr size_t kPidfdCacheMax = 512;
  Mode mode_;
  std::atomic<bool> pidfdInfoOk_{true};
  std::atomic<uint64_t> procFallback_{0};
  std::unordered_map<int32_t, int> pidfds_;
};

}  // namespace leash
