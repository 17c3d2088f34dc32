// The fanotify read loop (native thread): reads a batch of events, identifies each opener,
// judges a subject's open or exec against the policy snapshot (fsmatch.h) with the exec state
// of its process (exec_state.h), answers the kernel, and queues the decision-log lines for
// JavaScript without ever waiting for it. Nothing here takes a lock JavaScript holds for
// longer than a swap.
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <vector>

#include "clock.h"
#include "hardlinks.h"
#include "watcher.h"

namespace leash {

void Watcher::Loop() {
  // Named, so that a stack dump and bench/fanotify (its CPU per open, answer path only) find it.
  pthread_setname_np(pthread_self(), "leash-loop");
  if (nice_ != 0) setpriority(PRIO_PROCESS, static_cast<id_t>(syscall(SYS_gettid)), nice_);
  // A standby reads nothing while the active watcher lives; then it takes over (takeover.cc).
  if (standby_.load()) {
    if (!WaitForActive()) {
      dog_.LoopDone();
      return;
    }
    TakeOver();
  }
  // The read buffer is the in-flight table's read area (takeover.h): an event is in the table the
  // moment the kernel hands it over. A crafted-event test descriptor has no table.
  std::vector<char> storage(inflight_.ok() ? 0 : kReadBytes + alignof(fanotify_event_metadata));
  char* buf = inflight_.ok() ? inflight_.Area() : storage.data();
  int64_t lastEvent = 0;
  int64_t spinOffUntil = 0;
  int64_t lastBatch = 0;  // when the previous batch was done
  bool burst = false;     // the last two batches came close together: spin after this one
  while (!stop_.load(std::memory_order_relaxed)) {
    if (hold_.answersPending.load(std::memory_order_relaxed)) ServeAnswers();
    dog_.SetPhase(kReading);
    ssize_t n = read(fd_, buf, readLen_);
    if (n > 0) {
      Process(buf, n);
      int64_t t = NowNs();
      burst = t - lastBatch < kBurstGapFactor * spinNs_;
      lastBatch = lastEvent = t;
      dog_.BeatLoop(t / 1000000);
      if (hold_.count.load(std::memory_order_relaxed) > 0) ExpireHeld(t);
      continue;
    }
    if (n == 0) break;  // a test pipe reached EOF
    if (errno == EINTR) continue;
    if (errno != EAGAIN) {
      loopErrno_ = errno;
      break;
    }
    if (spinNs_ > 0 && burst) {
      // Stay awake briefly after an event of a burst: the next event of a busy opener then
      // finds this thread running instead of paying a sleep and a wake-up of an idle vCPU,
      // which costs more than the spin (measured: docs/filesystem.md). Only in a burst (the
      // previous batch less than kBurstGapFactor spins ago): after an isolated event the
      // spin would be CPU for nothing. The spin yields rather than pauses: a process just
      // answered may be waiting for this very CPU, and it is what produces the next event.
      // A yield that takes long means other work shares this CPU, and the loop would then
      // wait out its time slice instead of being woken at once by the next event: spinning
      // is off for kSpinBackoffNs.
      int64_t t = NowNs();
      if (t - lastEvent < spinNs_ && t >= spinOffUntil) {
        sched_yield();
        int64_t t2 = NowNs();
        if (t2 - t > kYieldContendedNs) spinOffUntil = t2 + kSpinBackoffNs;
        continue;
      }
    }
    dog_.SetPhase(kIdle);
    pollfd p[2] = {{fd_, POLLIN, 0}, {stopFd_, POLLIN, 0}};
    int held = hold_.count.load(std::memory_order_relaxed);
    int r = poll(p, 2, held > 0 ? HoldPollMs(NowNs()) : 1000);
    int64_t t = NowNs();
    dog_.BeatLoop(t / 1000000);
    if (r > 0 && (p[1].revents & POLLIN) && !stop_.load()) {
      uint64_t v;  // an answer woke us (Watcher::Answer), not a stop: reset the eventfd
      ssize_t ignored = read(stopFd_, &v, sizeof v);
      (void)ignored;
    }
    if (held > 0 || hold_.count.load(std::memory_order_relaxed) > 0) ExpireHeld(t);
    if (r > 0 && (p[0].revents & POLLIN)) lastEvent = t;
    if (r > 0 && (p[0].revents & (POLLHUP | POLLERR)) && !(p[0].revents & POLLIN)) break;
  }
  dog_.LoopDone();
}

void Watcher::Process(char* buf, ssize_t len) {
  // One clock read per batch of events: the decisions' time (ms) and the wake-up coalescing's.
  timespec wall;
  clock_gettime(CLOCK_REALTIME, &wall);
  batchWallMs_ = static_cast<int64_t>(wall.tv_sec) * 1000 + wall.tv_nsec / 1000000;
  batchMonoNs_ = NowNs();
  auto* m = reinterpret_cast<fanotify_event_metadata*>(buf);
  // First, every permission event of the batch goes into the in-flight table: if this process
  // dies before answering one, its standby answers it (takeover.h).
  ssize_t left = len;  // FAN_EVENT_NEXT consumes its length argument
  for (auto* r = m; FAN_EVENT_OK(r, left); r = FAN_EVENT_NEXT(r, left))
    if ((r->mask & kPermMask) && r->fd >= 0) inflight_.Record(r->fd, r->pid, static_cast<uint32_t>(r->mask));
  while (FAN_EVENT_OK(m, len)) {
    if (m->vers == FANOTIFY_METADATA_VERSION) HandleEvent(m);
    m = FAN_EVENT_NEXT(m, len);
  }
}

void Watcher::HandleEvent(const fanotify_event_metadata* m) {
  int pidfd = -1;
  if (m->event_len > m->metadata_len) {
    const char* p = reinterpret_cast<const char*>(m) + m->metadata_len;
    const char* end = reinterpret_cast<const char*>(m) + m->event_len;
    while (p + sizeof(fanotify_event_info_header) <= end) {
      auto* h = reinterpret_cast<const fanotify_event_info_header*>(p);
      if (h->len < sizeof(fanotify_event_info_header) || p + h->len > end) break;
      if (h->info_type == FAN_EVENT_INFO_TYPE_PIDFD && h->len >= sizeof(fanotify_event_info_pidfd))
        pidfd = reinterpret_cast<const fanotify_event_info_pidfd*>(p)->pidfd;
      p += h->len;
    }
  }
  bool perm = (m->mask & kPermMask) != 0;
  bool allow = true;
  DecisionRecord decs[8];
  int ndec = 0;
  std::shared_ptr<const Snapshot> snap;  // held until the decisions (which point into it) are queued
  int64_t t0 = 0;                        // a subject-era event's start (metrics), 0 when not timed
  if (perm) {
    events_.fetch_add(1, std::memory_order_relaxed);
    snap = std::atomic_load(&snap_);
    if (m->pid == 0) {
      // The kernel names the opener in the reader's PID namespace, and 0 when it has no PID there: a process
      // outside this watcher's namespace (the host's, when the service runs in a container). Nothing identifies
      // it (no PID, no pidfd), and a process inside the namespace tree always has a PID here, so no subject
      // the watcher can know is behind it: allowed, counted, logged as a count (docs/filesystem.md).
      int exec = (m->mask & FAN_OPEN_EXEC_PERM) ? 1 : 0;
      foreignPid_[exec].fetch_add(1, std::memory_order_relaxed);
      auto& c = byReason_[exec][1][static_cast<int>(Reason::kForeignPidNamespace)];
      c.store(c.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);  // loop thread only
    } else if (m->pid == selfPid_) {
      // Our own open: answering it from here is what keeps the watcher from deadlocking on itself.
      self_.fetch_add(1, std::memory_order_relaxed);
    } else if (snap->subjects.empty()) {
      nonSubject_.fetch_add(1, std::memory_order_relaxed);
    } else {
      if (timing_) t0 = NowNs();
      dog_.SetPhase(kJudging);
      dog_.SetPid(m->pid);
      Creds c;
      if (!identity_.CredsOf(pidfd, m->pid, &c)) {
        // Only a process that no longer exists has no credentials; its open cannot complete.
        allow = false;
        unknown_.fetch_add(1, std::memory_order_relaxed);
      } else {
        ndec = Judge(*snap, c, m, &allow, decs);
        if (ndec == 0) nonSubject_.fetch_add(1, std::memory_order_relaxed);
        // An ask entry: the event is held (answered later, hold.cc), or the ask becomes a block.
        if (askAt_ >= 0 && TryHold(m, decs, &ndec)) {
          if (t0 != 0) CountJudge(NowNs() - t0);
          if (seen_) seen_->insert(m->pid);
          execs_.AfterAnswer(batchMonoNs_);
          if (pidfd >= 0) close(pidfd);
          if (ndec > 0) Enqueue(decs, ndec);
          return;
        }
      }
    }
    dog_.SetPhase(kAnswering);
    fanotify_response r{m->fd, static_cast<__u32>(allow ? FAN_ALLOW : FAN_DENY)};
    if (write(respFd_, &r, sizeof r) != static_cast<ssize_t>(sizeof r))
      writeErrors_.fetch_add(1, std::memory_order_relaxed);
    inflight_.Clear(m->fd);
    if (t0 != 0) CountJudge(NowNs() - t0);
    if (seen_) seen_->insert(m->pid);
    execs_.AfterAnswer(batchMonoNs_);  // the rest of the exec state's work, off the opener's wait
  }
  if (m->fd >= 0) close(m->fd);
  if (pidfd >= 0) close(pidfd);
  if (ndec > 0) Enqueue(decs, ndec);
}

// Judges the event under every subject UID the process carries (real, effective,
// saved, fs): a setuid helper started by an agent stays the agent's. Deny if any denies.
int Watcher::Judge(const Snapshot& snap, const Creds& c, const fanotify_event_metadata* m, bool* allow,
                   DecisionRecord* decs) {
  const SubjectEntry* hits[4];
  uint32_t uids[4];
  int nh = 0;
  for (int i = 0; i < 4; i++) {
    bool dup = false;
    for (int j = 0; j < nh; j++) dup = dup || uids[j] == c.uid[i];
    if (dup) continue;
    auto it = snap.subjects.find(c.uid[i]);
    if (it == snap.subjects.end()) continue;
    hits[nh] = &it->second;
    uids[nh++] = c.uid[i];
  }
  if (nh == 0) return 0;
  askAt_ = -1;
  bool havePath = paths_.PathOf(m->fd);
  std::string_view subject = paths_.path();
  // A file with more than one name that the process could have linked itself: an allow by this
  // name also needs its other names (hardlinks.h). One compare for the common nlink == 1 file.
  const FileFacts& facts = paths_.facts();
  bool linked = linkCheck_ && havePath && facts.nlink > 1 && CouldHaveLinked(facts, c, protectedHardlinks_);
  bool isExec = (m->mask & FAN_OPEN_EXEC_PERM) != 0;
  // Exec state: is this exec the kernel loading the interpreter of the program this process
  // just had allowed? Any exec event of the process ends its entry (used, or stale).
  bool asInterp = false;
  if (isExec) asInterp = execs_.Take(m->pid, m->fd, batchMonoNs_);
  bool wantInterp = false;
  int n = 0;
  for (int h = 0; h < nh; h++) {
    const SubjectEntry& se = *hits[h];
    const FsPolicy* pol = se.policy.get();
    bool failOpen = pol ? pol->failOpen : se.failOpen;
    wantInterp = wantInterp || (pol && pol->cmdWhitelist && pol->hasInterpreters);
    for (int k = 0; k < 2; k++) {
      bool exec = k == 0;
      if (!(m->mask & (exec ? FAN_OPEN_EXEC_PERM : FAN_OPEN_PERM))) continue;
      MatchVerdict v;
      if (!havePath) {
        v = {failOpen, Reason::kEngineError, nullptr};
      } else if (paths_.agent_fs() && pol && (exec ? pol->cmdWhitelist : pol->fsWhitelist)) {
        // A file on a filesystem the agent mounted itself: its name is the agent's choice (it
        // can mount over any allowed directory in its own namespace), so no allow entry can
        // vouch for it. A blacklist judges the agent's name: its deny entries still match it.
        v = {false, Reason::kNamespaceDenied, nullptr};
      } else {
        v = exec ? MatchCommandPolicy(pol, se.failOpen, subject, asInterp) : MatchPathPolicy(pol, se.failOpen, subject);
        if (linked && v.allow && pol) {
          v = JudgeLinks(*pol, exec, facts, v);
          if (v.reason == Reason::kHardlinked) hardlinked_.fetch_add(1, std::memory_order_relaxed);
        }
        if (pol && pol->hasAsk && AskOf(*pol, exec, subject, &v)) {
          // Asked: a human sees one name, so a file with other names the process could have made
          // is judged by them as an allow would be, and blocked (hardlinked) rather than asked.
          MatchVerdict asAllowed = linked ? JudgeLinks(*pol, exec, facts, {true, Reason::kAllowEntry, v.rule}) : v;
          if (linked && asAllowed.reason == Reason::kHardlinked) v = asAllowed;
          else askAt_ = n;
        }
      }
      bool shadowed = ShadowAnswer(pol, &v);
      if (!v.allow) *allow = false;
      bool served = exec && v.reason == Reason::kInterpreterOf;
      if (served) interpreterOf_.fetch_add(1, std::memory_order_relaxed);
      DecisionRecord& d = decs[n++];
      d.uid = uids[h];
      d.exec = exec;
      d.allow = v.allow;
      d.wouldBlock = shadowed;
      d.reason = v.reason;
      d.rule = v.rule;
      d.program = served ? &execs_.program() : nullptr;
      d.inode = v.reason == Reason::kHardlinked ? facts.ino : 0;
      d.nlink = v.reason == Reason::kHardlinked ? facts.nlink : 0;
    }
  }
  // An allowed exec under a whitelist with interpreters: read what the kernel will load next for
  // it (remembered after the answer). A header that cannot be read as the kernel reads it is never
  // an allow. An ELF interpreter loads nothing after it: the ELF loader never reads its PT_INTERP
  // (and refuses its malformed headers itself).
  bool chains = !asInterp || execs_.served_can_chain();
  if (isExec && *allow && wantInterp && havePath && chains && !execs_.Prepare(m->pid, m->fd, subject)) {
    *allow = false;
    for (int i = 0; i < n; i++) {
      if (!decs[i].exec) continue;
      decs[i].allow = false;
      decs[i].wouldBlock = false;
      decs[i].reason = Reason::kEngineError;
      decs[i].rule = nullptr;
      decs[i].program = nullptr;
    }
  }
  (*allow ? subjectAllow_ : subjectDeny_).fetch_add(1, std::memory_order_relaxed);
  return n;
}

// Shadow mode (FsPolicy::shadow): a verdict that denies is answered allow and logged as
// would_block, its reason and rule kept. Returns true when it turned a deny into that. A subject
// without a policy (no_policy) is never shadowed: there is no policy that asked for it.
bool Watcher::ShadowAnswer(const FsPolicy* pol, MatchVerdict* v) {
  if (v->allow || pol == nullptr || !pol->shadow) return false;
  v->allow = true;
  return true;
}

// Denies (and would-blocks) are always queued; allows beyond queueAllows_ are counted instead and the
// count reaches the log with the next drain. The loop never waits for JavaScript: the
// lock is held by Drain only for a swap. Each decision is queued as its finished log line
// (decisionline.h), so JavaScript only writes a drain's bytes.
// Waking JavaScript costs the loop an eventfd write and a futex per wake, so wakes are
// coalesced: a deny or a full batch wakes at once, otherwise at most one wake per
// kWakeEveryNs; JavaScript also drains on a short timer, which picks up the rest.
void Watcher::EnqueueAt(DecisionRecord* d, int n, std::string_view subject) {
  refs_.Reserve(static_cast<size_t>(n));  // any getrandom happens outside the lock
  bool wake = false;
  bool deny = false;
  {
    std::lock_guard<std::mutex> g(qmu_);
    for (int i = 0; i < n; i++) {
      auto& c = byReason_[d[i].exec ? 1 : 0][d[i].wouldBlock ? 2 : d[i].allow ? 1 : 0][static_cast<int>(d[i].reason)];
      c.store(c.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);  // one writer
      if (d[i].wouldBlock) {
        deny = true;  // as prompt as a block: what shadow mode is for
      } else if (!d[i].allow) {
        deny = true;
        qDenies_++;
      } else if (allowLines_ != AllowLines::kAll) {
        // Counted, and formatted only when sampled: the line is not built unless it is written.
        AllowTally& t = tally_[(static_cast<uint64_t>(d[i].uid) << 1) | (d[i].exec ? 1 : 0)];
        t.allowed++;
        if (allowLines_ != AllowLines::kSampled) continue;
        if (t.sampledAtMs != INT64_MIN && batchWallMs_ - t.sampledAtMs < sampleMs_) continue;
        t.sampledAtMs = batchWallMs_;
        t.written++;
        qAllows_++;
      } else if (qAllows_ >= queueAllows_) {
        dropped_++;
        continue;
      } else {
        qAllows_++;
      }
      char ref[8];
      refs_.Next(ref);
      d[i].tsMs = batchWallMs_;
      d[i].ref = ref;
      d[i].subject = subject;
      AppendDecisionLine(&q_, &iso_, d[i]);
      qCount_++;
    }
    if (!wakePending_) {
      if (deny || qCount_ >= kWakeBatch || batchMonoNs_ - lastWakeNs_ >= kWakeEveryNs) {
        wakePending_ = true;
        lastWakeNs_ = batchMonoNs_;
        wake = true;
      }
    }
  }
  if (wake && haveTsfn_) tsfn_.NonBlockingCall();
}

extern const int64_t kJudgeBucketUs[11];
const int64_t kJudgeBucketUs[11] = {1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000};

void Watcher::CountJudge(int64_t ns) {
  int b = 0;
  while (b < kJudgeBuckets - 1 && ns > kJudgeBucketUs[b] * 1000) b++;
  auto bump = [](std::atomic<uint64_t>& a, uint64_t v) {
    a.store(a.load(std::memory_order_relaxed) + v, std::memory_order_relaxed);  // loop thread only
  };
  bump(judgeBuckets_[b], 1);
  bump(judgeNs_, static_cast<uint64_t>(ns));
  bump(judgeCount_, 1);
}

}  // namespace leash
