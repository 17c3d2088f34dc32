// The Watcher object shared by the watcher's files (internal to native/): its JavaScript surface
// (fanotify.cc), its read loop and judging (fanotify_loop.cc), and the parts it is made of:
// identity of the opener (identity.h), the path judged (paths.h), the exec state of each process
// (exec_state.h), the watchdog (watchdog.h), the decision-log lines (decisionline.h).
#pragma once
#include <napi.h>
#include <sys/fanotify.h>
#include <sys/resource.h>
#include <v8.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "decisionline.h"
#include "exec_state.h"
#include "fsmatch.h"
#include "hold.h"
#include "identity.h"
#include "paths.h"
#include "takeover.h"
#include "watchdog.h"

#ifndef FAN_REPORT_PIDFD
#define FAN_REPORT_PIDFD 0x00000080
#endif
#ifndef FAN_EVENT_INFO_TYPE_PIDFD
#define FAN_EVENT_INFO_TYPE_PIDFD 4
struct fanotify_event_info_pidfd {
  struct fanotify_event_info_header hdr;
  __s32 pidfd;
};
#endif

namespace leash {

constexpr uint64_t kPermMask = FAN_OPEN_PERM | FAN_OPEN_EXEC_PERM;

struct SubjectEntry {
  std::shared_ptr<const FsPolicy> policy;  // null = subject with no policy
  bool failOpen;
};

/** One immutable generation of the UID -> policy map. */
struct Snapshot {
  std::unordered_map<uint32_t, SubjectEntry> subjects;
};

/** The judge-time histogram's upper bounds in microseconds (Watcher::kJudgeBuckets - 1 of them, then +Inf). */
extern const int64_t kJudgeBucketUs[11];

/**
 * The watcher's JavaScript surface, one list of (name in JavaScript, member): the class declares each member from
 * it and Define (fanotify.cc) registers each, so a method is added in one place.
 */
#define LEASH_WATCHER_METHODS(X)                                                                          \
  X("start", Start) X("mark", Mark) X("setSubjects", SetSubjects) X("drain", Drain) X("heartbeat", Heartbeat) \
      X("stats", Stats) X("close", Close) X("takeoverRecords", TakeoverRecords) X("answer", Answer)
/** Read-only properties: (name in JavaScript, getter). */
#define LEASH_WATCHER_ACCESSORS(X) \
  X("fd", Fd) X("reportsPidfd", ReportsPidfd) X("tableFd", TableFd) X("standby", Standby)

class Watcher : public Napi::ObjectWrap<Watcher> {
 public:
  static Napi::Function Define(Napi::Env env);
  explicit Watcher(const Napi::CallbackInfo& info);
  ~Watcher() override { StopThreads(); }

 private:
  // ---- JavaScript surface (fanotify.cc): declared from the one list Define registers ----
#define LEASH_WATCHER_DECLARE(js, member) Napi::Value member(const Napi::CallbackInfo& info);
  LEASH_WATCHER_METHODS(LEASH_WATCHER_DECLARE)
  LEASH_WATCHER_ACCESSORS(LEASH_WATCHER_DECLARE)
#undef LEASH_WATCHER_DECLARE
  void StopThreads();

  // ---- held events (hold.cc; hold.h explains them) ----
  /** After Judge asked (askAt_): holds the event (true: not answered now) or turns the ask into a block. */
  bool TryHold(const fanotify_event_metadata* m, DecisionRecord* decs, int* ndec);
  /** Loop thread: writes the answers JavaScript decided. */
  void ServeAnswers();
  /** Loop thread: denies the holds whose deadline has passed (approval_timeout). */
  void ExpireHeld(int64_t nowNs);
  /** The poll timeout while events are held: until the nearest deadline, at most 1000 ms. */
  int HoldPollMs(int64_t nowNs);
  /** After the loop stopped: writes decided answers, denies the rest (approval_cancelled). */
  void ReleaseHeld();
  /** Writes one held event's answer (loop thread, or after it stopped) and queues its line when `reason` is set. */
  void AnswerHeld(HeldEvent& h, bool allow, const Reason* reason);
  void HoldStats(Napi::Env env, Napi::Object o);
  void DrainAsks(Napi::Env env, Napi::Object out);

  // ---- the standby's takeover (takeover.cc; loop thread) ----
  /** Waits until the active watcher has exited (true) or this one is stopped (false). */
  bool WaitForActive();
  /** Answers the dead watcher's pending events, drains the queue, then the loop reads on. */
  void TakeOver();

  // ---- the read loop (fanotify_loop.cc; native thread) ----
  void Loop();
  void Process(char* buf, ssize_t len);
  void HandleEvent(const fanotify_event_metadata* m);
  int Judge(const Snapshot& snap, const Creds& c, const fanotify_event_metadata* m, bool* allow,
            DecisionRecord* decs);
  void Enqueue(DecisionRecord* d, int n) { EnqueueAt(d, n, paths_.path()); }
  void EnqueueAt(DecisionRecord* d, int n, std::string_view subject);
  static bool ShadowAnswer(const FsPolicy* pol, MatchVerdict* v);

  // The loop's timing and the queue's wake-up coalescing (fanotify_loop.cc explains them).
  static constexpr int64_t kWakeEveryNs = 20 * 1000 * 1000;
  static constexpr int64_t kYieldContendedNs = 500 * 1000;
  static constexpr int64_t kBurstGapFactor = 5;
  static constexpr int64_t kSpinBackoffNs = 100 * 1000 * 1000;
  static constexpr size_t kWakeBatch = 512;
  static constexpr size_t kKeepQueueBytes = 4 << 20;
  static constexpr size_t kReadBytes = 64 * 1024;
  static_assert(kReadBytes <= InflightTable::kAreaBytes, "a read fits the in-flight table's read area");
  /** Descriptors a takeover's fence leaves free below RLIMIT_NOFILE (takeover.cc). */
  static constexpr rlim_t kFenceReserve = 256;
  /**
   * How much one read(2) asks for: exactly one event. A watcher killed inside read(2) then loses
   * at most one event that its standby cannot attribute from the in-flight table (takeover.h);
   * a batch could mix a subject's event with root's, and both would have to be denied.
   */
  size_t readLen_ = sizeof(fanotify_event_metadata);

  int fd_ = -1;
  int respFd_ = -1;
  int stopFd_ = -1;
  bool ownsFd_ = false;
  bool pidfd_ = false;
  bool started_ = false;
  int32_t selfPid_ = 0;
  int nice_ = 0;
  bool protectedHardlinks_ = false;
  bool linkCheck_ = true;  // false: measurement only (bench/fanotify)  // fs.protected_hardlinks, read at construction (hardlinks.h)
  int64_t spinNs_ = 0;
  int64_t watchdogMs_ = 10000;
  size_t queueAllows_ = 4096;
  std::thread loop_;
  std::atomic<bool> stop_{false};
  std::atomic<int> loopErrno_{0};
  std::shared_ptr<const Snapshot> snap_;

  // The in-flight table (takeover.h) and, in a standby, the active watcher it will succeed.
  InflightTable inflight_;
  int activePidfd_ = -1;  // a standby's: the pidfd of the watcher it waits on (ownerPid_), -1 once that one exited
  int32_t ownerPid_ = 0;
  std::atomic<bool> standby_{false};
  std::unordered_set<int32_t>* seen_ = nullptr;  // during a takeover's drain: the openers answered
  std::mutex tmu_;
  std::vector<TakeoverRecord> takeoverRecs_;
  std::atomic<uint64_t> takeovers_{0}, takeoverAllowed_{0}, takeoverDenied_{0}, takeoverUnrecorded_{0};
  // How the takeover went (its log line): the highest number fenced and answered, the errno that cut the
  // fence short (0: none), recorded events whose process could not be read, events drained from the
  // queue and the errno that ended the drain (0: EAGAIN, the queue was empty).
  // fromArea: events the dead watcher had read but not recorded, found in the read area (takeover.h).
  std::atomic<uint64_t> takeoverFromArea_{0};
  std::atomic<uint64_t> takeoverHi_{0}, takeoverFenceErrno_{0}, takeoverNoCreds_{0}, takeoverDrained_{0},
      takeoverDrainErrno_{0}, followed_{0};

  HoldState hold_;
  int askAt_ = -1;  // loop thread: the decision Judge turned into an ask, or -1

  Identity identity_;  // loop thread only
  PathResolver paths_;  // loop thread, and Mark (its mounts, under its lock)
  ExecState execs_;     // loop thread only
  Watchdog dog_;
  v8::Isolate* isolate_ = nullptr;

  // Loop thread only: the batch's clocks, the line formatter's clock and refs.
  int64_t batchWallMs_ = 0;
  int64_t batchMonoNs_ = 0;
  IsoTime iso_;
  RefPool refs_;

  // The decision-log queue: the loop appends, Drain swaps.
  std::mutex qmu_;
  std::string q_;         // finished decision-log lines, in decision order
  std::string drainBuf_;  // JavaScript thread only (Drain)
  uint64_t qCount_ = 0, qDenies_ = 0;
  size_t qAllows_ = 0;
  uint64_t dropped_ = 0;
  // Plain allows not formatted one by one (option allowLines, config logging.allows): counted per
  // subject and surface, handed to JavaScript with each drain for its allow_summary lines. Under qmu_.
  struct AllowTally {
    uint64_t allowed = 0;
    uint64_t written = 0;
    int64_t sampledAtMs = INT64_MIN;  // sampled: when this key's last allow line was written whole
  };
  enum class AllowLines : uint8_t { kAll, kSummary, kSampled };
  AllowLines allowLines_ = AllowLines::kAll;
  int64_t sampleMs_ = 60000;
  std::unordered_map<uint64_t, AllowTally> tally_;  // key: uid << 1 | exec
  bool wakePending_ = false;
  int64_t lastWakeNs_ = 0;
  Napi::ThreadSafeFunction tsfn_;
  bool haveTsfn_ = false;

  std::atomic<uint64_t> events_{0}, self_{0}, nonSubject_{0}, subjectAllow_{0}, subjectDeny_{0}, unknown_{0},
      writeErrors_{0}, interpreterOf_{0}, hardlinked_{0};
  // Events whose process is outside this watcher's PID namespace (pid 0), by surface (0 open, 1 exec): allowed
  // unjudged (docs/filesystem.md, "PID namespaces"); each drain hands the totals to JavaScript for its log line.
  std::atomic<uint64_t> foreignPid_[2]{};

  // Metrics (stats(), the service's /metrics): written by the loop thread only, read by JavaScript.
  // Decisions by surface (0 open, 1 exec), action (0 block, 1 allow, 2 would_block) and reason, the ones counted
  // instead of queued included; and the time from reading a subject-era event to its answer, in
  // fixed buckets (kJudgeBucketUs, then +Inf). `timing_` off (option metrics: false) skips the
  // two clock reads per event: what bench/fanotify compares.
  static constexpr int kReasons = static_cast<int>(Reason::kLast) + 1;
  static constexpr int kJudgeBuckets = 12;
  std::atomic<uint64_t> byReason_[2][3][kReasons]{};  // action 2: would_block (shadow mode)
  std::atomic<uint64_t> judgeBuckets_[kJudgeBuckets]{};
  std::atomic<uint64_t> judgeNs_{0}, judgeCount_{0};
  bool timing_ = true;
  void CountJudge(int64_t ns);
};

}  // namespace leash
