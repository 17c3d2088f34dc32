// The watchdog: a native thread that exits the watcher process (status 70) when the read loop
// or the JavaScript side has not beaten for `ms`, after dumping every thread's kernel stack and,
// when V8 can be interrupted, the JavaScript stack. Exiting closes the fanotify group, which
// answers every pending event allow: a wedged watcher releases the host; the service respawns it.
// Owns the heartbeats and the loop's phase (what the dump says the loop was doing).
#pragma once
#include <v8.h>

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <thread>

namespace leash {

/** What the read loop is doing, for the watchdog's report. */
enum Phase : int { kIdle = 0, kReading = 1, kJudging = 2, kAnswering = 3, kStopped = 4 };

class Watchdog {
 public:
  Watchdog() = default;
  Watchdog(const Watchdog&) = delete;
  Watchdog& operator=(const Watchdog&) = delete;
  ~Watchdog() { Stop(); }

  /** Both sides beat now (at construction and start). */
  void Reset();
  /** Starts the thread (no-op for ms <= 0); `isolate` is the JavaScript thread's, for its stack. */
  void Start(int64_t ms, v8::Isolate* isolate);
  /** Stops and joins the thread. */
  void Stop();

  /** The read loop is alive at `ms` (NowMs). */
  void BeatLoop(int64_t ms) { loopBeat_.store(ms, std::memory_order_relaxed); }
  /** The JavaScript side is alive (Watcher.heartbeat()). */
  void BeatJs();
  void SetPhase(Phase p) { phase_.store(p, std::memory_order_relaxed); }
  void SetPid(int32_t pid) { curPid_.store(pid, std::memory_order_relaxed); }
  /** The loop has ended: its age no longer counts. */
  void LoopDone() {
    phase_.store(kStopped);
    loopDone_.store(true);
  }
  bool loop_done() const { return loopDone_.load(); }

 private:
  void Run();
  static void JsStackInterrupt(v8::Isolate* isolate, void* data);

  int64_t ms_ = 0;
  v8::Isolate* isolate_ = nullptr;
  std::thread thread_;
  std::atomic<bool> stop_{false};
  std::mutex mu_;
  std::condition_variable cv_;
  std::atomic<int64_t> loopBeat_{0}, jsBeat_{0};
  std::atomic<bool> loopDone_{false};
  std::atomic<int> phase_{kIdle};
  std::atomic<int32_t> curPid_{0};
  std::atomic<bool> jsDumped_{false};
};

}  // namespace leash
