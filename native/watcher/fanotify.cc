// The fanotify watcher's JavaScript surface (see fanotify.h): the Watcher class's constructor
// (the fanotify group), mark, setSubjects (the policy snapshot), drain (the decision-log
// queue), heartbeat, stats and close. The read loop is in fanotify_loop.cc.
//
// Why the read loop is native: the watcher's own opens of a file on a marked
// filesystem raise permission events to itself, and a listener that answers from
// JavaScript deadlocks as soon as JavaScript opens a file. So every event is
// answered there, on a thread that takes no lock JavaScript can hold: events from
// the watcher itself and from UIDs that are not subjects are allowed at once, and
// subject events are judged against an immutable snapshot swapped in atomically.
#include "fanotify.h"

#include <fcntl.h>
#include <sys/eventfd.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>

#include "clock.h"
#include "errors.h"
#include "hardlinks.h"
#include "watcher.h"

namespace leash {

Napi::Function Watcher::Define(Napi::Env env) {
  std::vector<PropertyDescriptor> props;
#define LEASH_WATCHER_METHOD(js, member) props.push_back(InstanceMethod(js, &Watcher::member));
#define LEASH_WATCHER_ACCESSOR(js, member) props.push_back(InstanceAccessor(js, &Watcher::member, nullptr));
  LEASH_WATCHER_METHODS(LEASH_WATCHER_METHOD)
  LEASH_WATCHER_ACCESSORS(LEASH_WATCHER_ACCESSOR)
#undef LEASH_WATCHER_METHOD
#undef LEASH_WATCHER_ACCESSOR
  return DefineClass(env, "Watcher", props);
}

Watcher::Watcher(const Napi::CallbackInfo& info) : Napi::ObjectWrap<Watcher>(info) {
  Napi::Env env = info.Env();
  snap_ = std::make_shared<const Snapshot>();
  if (info.Length() < 1 || !info[0].IsObject()) {
    Usage(env, "new Watcher({ onRecords, eventFd?, responseFd?, watchdogMs?, spinUs?, nice?, queueAllows?, allowLines?, sampleMs? })");
    return;
  }
  Napi::Object o = info[0].As<Napi::Object>();
  Napi::Value cb = o.Get("onRecords");
  if (!cb.IsFunction()) {
    Usage(env, "Watcher: onRecords must be a function");
    return;
  }
  auto num = [&](const char* k, int64_t d) -> int64_t {
    Napi::Value v = o.Get(k);
    return v.IsNumber() ? v.As<Napi::Number>().Int64Value() : d;
  };
  watchdogMs_ = num("watchdogMs", 10000);
  spinNs_ = num("spinUs", 0) * 1000;
  nice_ = static_cast<int>(num("nice", 0));
  queueAllows_ = static_cast<size_t>(num("queueAllows", 4096));
  // allowLines: 'all' (each allow its line), 'summary' (counted only) or 'sampled' (counted, one in sampleMs written).
  Napi::Value al = o.Get("allowLines");
  if (al.IsString()) {
    std::string a = al.As<Napi::String>().Utf8Value();
    if (a == "summary") allowLines_ = AllowLines::kSummary;
    else if (a == "sampled") allowLines_ = AllowLines::kSampled;
    else if (a != "all") {
      Usage(env, "Watcher: allowLines must be all, summary or sampled");
      return;
    }
  }
  sampleMs_ = num("sampleMs", 60000);
  // metrics: false skips the judge timing (two clock reads per subject-era event).
  Napi::Value mv = o.Get("metrics");
  if (mv.IsBoolean()) timing_ = mv.As<Napi::Boolean>().Value();
  selfPid_ = static_cast<int32_t>(num("selfPid", getpid()));
  int eventFd = static_cast<int>(num("eventFd", -1));
  linkCheck_ = !o.Get("linkCheck").IsBoolean() || o.Get("linkCheck").As<Napi::Boolean>().Value();
  paths_.set_facts(linkCheck_);
  bool readBatch = o.Get("readBatch").IsBoolean() && o.Get("readBatch").As<Napi::Boolean>().Value();
  int responseFd = static_cast<int>(num("responseFd", -1));
  // hold: {max, perSubject, filesystemMs, commandsMs}: ask entries are held for an approver (hold.h).
  if (o.Get("hold").IsObject()) {
    Napi::Object h = o.Get("hold").As<Napi::Object>();
    auto hn = [&](const char* k, int64_t d) -> int64_t {
      Napi::Value v = h.Get(k);
      return v.IsNumber() ? v.As<Napi::Number>().Int64Value() : d;
    };
    hold_.settings.max = static_cast<size_t>(hn("max", 1000));
    hold_.settings.perSubject = static_cast<size_t>(hn("perSubject", 200));
    hold_.settings.filesystemMs = hn("filesystemMs", 10000);
    hold_.settings.commandsMs = hn("commandsMs", 10000);
  }

  // identity: how the opener's credentials are read (identity.h): 'pidfd-cache' (default),
  // 'report-pidfd' or 'proc'.
  Napi::Value idv = o.Get("identity");
  std::string id = idv.IsString() ? idv.As<Napi::String>().Utf8Value() : "pidfd-cache";
  if (id == "proc") identity_.set_mode(Identity::kProc);
  else if (id == "report-pidfd") identity_.set_mode(Identity::kReport);
  else identity_.set_mode(Identity::kCache);
  if (eventFd >= 0) {
    // A test feeds crafted events through any descriptor (fapolicyd's test_notify_set_fanotify_fd).
    fd_ = eventFd;
    ownsFd_ = false;
    int fl = fcntl(fd_, F_GETFL);
    if (fl < 0 || fcntl(fd_, F_SETFL, fl | O_NONBLOCK) < 0) {
      ErrnoError(env, errno, "fcntl").ThrowAsJavaScriptException();
      return;
    }
  } else if (o.Get("standbyOf").IsObject()) {
    // A standby: the active watcher's group and in-flight table, taken from it by number.
    Napi::Object so = o.Get("standbyOf").As<Napi::Object>();
    auto snum = [&](const char* k) -> int {
      Napi::Value v = so.Get(k);
      return v.IsNumber() ? v.As<Napi::Number>().Int32Value() : -1;
    };
    int apid = snum("pid"), gfd = snum("groupFd"), tfd = snum("tableFd");
    if (apid <= 0 || gfd < 0 || tfd < 0) {
      Usage(env, "Watcher: standbyOf needs {pid, groupFd, tableFd}");
      return;
    }
    activePidfd_ = static_cast<int>(syscall(SYS_pidfd_open, apid, 0));
    if (activePidfd_ < 0) {
      ErrnoError(env, errno, "pidfd_open (the active watcher)").ThrowAsJavaScriptException();
      return;
    }
    fcntl(activePidfd_, F_SETFD, FD_CLOEXEC);
    fd_ = static_cast<int>(syscall(SYS_pidfd_getfd, activePidfd_, gfd, 0));
    int t = fd_ >= 0 ? static_cast<int>(syscall(SYS_pidfd_getfd, activePidfd_, tfd, 0)) : -1;
    if (fd_ < 0 || t < 0 || !inflight_.Adopt(t)) {
      ErrnoError(env, errno, "pidfd_getfd (the active watcher's group and table)").ThrowAsJavaScriptException();
      return;
    }
    ownsFd_ = true;
    ownerPid_ = apid;
    standby_.store(true);
  } else {
    unsigned base = FAN_CLASS_CONTENT | FAN_CLOEXEC | FAN_NONBLOCK;
    unsigned ev = O_RDONLY | O_LARGEFILE | O_CLOEXEC;
    bool wantPidfd = identity_.mode() == Identity::kReport;
    fd_ = wantPidfd ? fanotify_init(base | FAN_REPORT_PIDFD, ev) : -1;
    if (fd_ >= 0) {
      pidfd_ = true;
    } else if (!wantPidfd || errno == EINVAL) {
      fd_ = fanotify_init(base, ev);
    }
    if (fd_ < 0) {
      ErrnoError(env, errno, "fanotify_init").ThrowAsJavaScriptException();
      return;
    }
    ownsFd_ = true;
    if (!inflight_.Create()) {
      ErrnoError(env, errno, "memfd_create (the in-flight table)").ThrowAsJavaScriptException();
      return;
    }
    inflight_.SetOwner(static_cast<int32_t>(getpid()));
  }
  respFd_ = responseFd >= 0 ? responseFd : fd_;
  protectedHardlinks_ = ReadProtectedHardlinks();
  // One event per read (watcher.h); a crafted-event test descriptor is read in whole batches.
  readLen_ = eventFd >= 0 || readBatch ? kReadBytes
                          : sizeof(fanotify_event_metadata) + (pidfd_ ? sizeof(fanotify_event_info_pidfd) : 0);
  stopFd_ = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (stopFd_ < 0) {
    ErrnoError(env, errno, "eventfd").ThrowAsJavaScriptException();
    return;
  }
  tsfn_ = Napi::ThreadSafeFunction::New(env, cb.As<Napi::Function>(), "leash-watcher-records", 0, 1);
  tsfn_.Unref(env);
  haveTsfn_ = true;
  isolate_ = v8::Isolate::GetCurrent();
  dog_.Reset();
}

Napi::Value Watcher::Start(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  if (fd_ < 0) return Usage(env, "Watcher is closed");
  if (started_) return env.Undefined();
  started_ = true;
  dog_.Reset();
  loop_ = std::thread([this] { Loop(); });
  dog_.Start(watchdogMs_, isolate_);
  return env.Undefined();
}

/**
 * mark(path, scope = 'filesystem'|'mount') : FAN_MARK_FILESYSTEM (or FAN_MARK_MOUNT) for opens, execs and dirs.
 * mark(path, 'agent', major, minor): a filesystem an agent mounted in a namespace of its own, reached
 * through /proc/PID/root/<mount point>: marked whole through the descriptor opened here, and only when
 * that descriptor is on device major:minor (the one its namespace's mountinfo named, which JavaScript
 * checked is in no mount of ours), so a mount swapped in between cannot put a mark on another
 * filesystem. Its files' names are the agent's to choose (paths.h agent_fs()).
 */
Napi::Value Watcher::Mark(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  const char* usage = "mark(path: string, scope?: 'filesystem'|'mount') | mark(path, 'agent', major, minor)";
  if (info.Length() < 1 || !info[0].IsString()) return Usage(env, usage);
  if (fd_ < 0 || !ownsFd_) return Usage(env, "mark: watcher has no fanotify group");
  std::string path = info[0].As<Napi::String>().Utf8Value();
  unsigned flags = FAN_MARK_ADD | FAN_MARK_FILESYSTEM;
  std::string scope = info.Length() > 1 && info[1].IsString() ? info[1].As<Napi::String>().Utf8Value() : "";
  if (scope == "mount") flags = FAN_MARK_ADD | FAN_MARK_MOUNT;
  bool agent = scope == "agent";
  if (agent && (info.Length() < 4 || !info[2].IsNumber() || !info[3].IsNumber())) return Usage(env, usage);
  // A descriptor on this filesystem through one of OUR mounts: events that arrive
  // through another namespace's mount are renamed through it (see paths.h). It is
  // opened before the mark (so this open raises no event) and not O_PATH, because
  // open_by_handle_at does not take an O_PATH mount descriptor.
  int pfd = open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK | (agent ? O_DIRECTORY : 0));
  struct stat st;
  bool haveSt = pfd >= 0 && fstat(pfd, &st) == 0;
  if (agent) {
    unsigned wantMaj = info[2].As<Napi::Number>().Uint32Value(), wantMin = info[3].As<Napi::Number>().Uint32Value();
    int err = pfd < 0 ? errno : !haveSt ? errno : 0;
    if (!err && (major(st.st_dev) != wantMaj || minor(st.st_dev) != wantMin)) err = EXDEV;
    if (err) {
      if (pfd >= 0) close(pfd);
      ErrnoError(env, err, "mark (an agent's filesystem)").ThrowAsJavaScriptException();
      return env.Undefined();
    }
    paths_.AddAgentDev(st.st_dev);  // before the mark: its first event is already named as the agent's
  }
  int mr = agent ? fanotify_mark(fd_, flags, kPermMask | FAN_ONDIR, pfd, nullptr)
                 : fanotify_mark(fd_, flags, kPermMask | FAN_ONDIR, AT_FDCWD, path.c_str());
  if (mr != 0) {
    int err = errno;
    if (pfd >= 0) close(pfd);
    ErrnoError(env, err, "fanotify_mark").ThrowAsJavaScriptException();
    return env.Undefined();
  }
  if (haveSt) {
    paths_.AddMount(st.st_dev, pfd);
  } else if (pfd >= 0) {
    close(pfd);
  }
  return env.Undefined();
}

/**
 * setSubjects([{uid, policy: {fail_mode, filesystem, commands} | null, failMode}])
 * Builds a new snapshot and swaps it in atomically; the loop sees either the old
 * map or the new one, never a half-built one.
 */
Napi::Value Watcher::SetSubjects(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  if (info.Length() < 1 || !info[0].IsArray()) return Usage(env, "setSubjects(entries: {uid, policy, failMode}[])");
  Napi::Array a = info[0].As<Napi::Array>();
  auto snap = std::make_shared<Snapshot>();
  for (uint32_t i = 0; i < a.Length(); i++) {
    Napi::Value ev = a.Get(i);
    if (!ev.IsObject()) return Usage(env, "setSubjects: each entry is an object");
    Napi::Object e = ev.As<Napi::Object>();
    Napi::Value uid = e.Get("uid");
    if (!uid.IsNumber()) return Usage(env, "setSubjects: uid must be a number");
    Napi::Value fm = e.Get("failMode");
    SubjectEntry se;
    se.failOpen = fm.IsString() && fm.As<Napi::String>().Utf8Value() == "open";
    Napi::Value pv = e.Get("policy");
    if (!pv.IsNull() && !pv.IsUndefined()) {
      se.policy = FsPolicyFromJs(env, pv);
      if (!se.policy) return env.Undefined();
    }
    snap->subjects[uid.As<Napi::Number>().Uint32Value()] = std::move(se);
  }
  std::shared_ptr<const Snapshot> c = snap;
  std::atomic_store(&snap_, c);
  return Napi::Number::New(env, snap->subjects.size());
}

/**
 * drain() -> {lines, count, denies, droppedAllows, allows}: the decision-log lines queued since the
 * last drain, formatted by the loop (decisionline.h), as one Buffer for one write(2); `allows`, with
 * allowLines summary or sampled, the plain allows counted since: [uid, exec (0|1), allowed, written]...;
 * `foreignPid`, the events from outside the PID namespace allowed since start: [opens, execs].
 */
Napi::Value Watcher::Drain(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  uint64_t dropped, count, denies;
  std::vector<uint64_t> counted;  // uid, exec, allowed, written per key
  {
    std::lock_guard<std::mutex> g(qmu_);
    for (auto& [key, t] : tally_) {
      if (t.allowed == 0) continue;
      counted.insert(counted.end(), {key >> 1, key & 1, t.allowed, t.written});
      t.allowed = t.written = 0;
    }
    q_.swap(drainBuf_);  // drainBuf_ is empty: the loop keeps appending into its capacity
    count = qCount_;
    denies = qDenies_;
    qCount_ = qDenies_ = qAllows_ = 0;
    dropped = dropped_;
    dropped_ = 0;
    wakePending_ = false;
  }
  Napi::Buffer<char> lines = Napi::Buffer<char>::Copy(env, drainBuf_.data(), drainBuf_.size());
  drainBuf_.clear();
  if (drainBuf_.capacity() > kKeepQueueBytes) std::string().swap(drainBuf_);  // after a burst of denies
  Napi::Object out = Napi::Object::New(env);
  out.Set("lines", lines);
  out.Set("count", Napi::Number::New(env, static_cast<double>(count)));
  out.Set("denies", Napi::Number::New(env, static_cast<double>(denies)));
  out.Set("droppedAllows", Napi::Number::New(env, static_cast<double>(dropped)));
  Napi::Array allows = Napi::Array::New(env, counted.size());
  for (size_t i = 0; i < counted.size(); i++) allows.Set(i, Napi::Number::New(env, static_cast<double>(counted[i])));
  out.Set("allows", allows);
  Napi::Array foreign = Napi::Array::New(env, 2);
  for (uint32_t e = 0; e < 2; e++)
    foreign.Set(e, Napi::Number::New(env, static_cast<double>(foreignPid_[e].load(std::memory_order_relaxed))));
  out.Set("foreignPid", foreign);
  DrainAsks(env, out);
  return out;
}

/** heartbeat(): the JavaScript side is alive (the watchdog exits when it stops for watchdogMs). */
Napi::Value Watcher::Heartbeat(const Napi::CallbackInfo& info) {
  dog_.BeatJs();
  return info.Env().Undefined();
}

Napi::Value Watcher::Stats(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  Napi::Object o = Napi::Object::New(env);
  auto n = [&](const char* k, uint64_t v) { o.Set(k, Napi::Number::New(env, static_cast<double>(v))); };
  auto a = [&](const char* k, const std::atomic<uint64_t>& v) { n(k, v.load(std::memory_order_relaxed)); };
  a("events", events_);
  a("self", self_);
  a("nonSubject", nonSubject_);
  a("subjectAllow", subjectAllow_);
  a("subjectDeny", subjectDeny_);
  a("unknownProcess", unknown_);
  a("foreignPidOpen", foreignPid_[0]);
  a("foreignPidExec", foreignPid_[1]);
  n("procFallback", identity_.proc_fallbacks());
  a("writeErrors", writeErrors_);
  n("foreignMount", paths_.foreign_mounts());
  a("interpreterOf", interpreterOf_);
  a("hardlinked", hardlinked_);
  n("execStateRefused", execs_.refused());
  n("execStateDropped", execs_.dropped());
  a("takeovers", takeovers_);
  a("takeoverAllowed", takeoverAllowed_);
  a("takeoverDenied", takeoverDenied_);
  a("takeoverUnrecorded", takeoverUnrecorded_);
  a("takeoverFromArea", takeoverFromArea_);
  a("takeoverHi", takeoverHi_);
  a("takeoverFenceErrno", takeoverFenceErrno_);
  a("takeoverNoCreds", takeoverNoCreds_);
  a("takeoverDrained", takeoverDrained_);
  a("takeoverDrainErrno", takeoverDrainErrno_);
  a("standbyFollowed", followed_);
  // Metrics: decisions by surface/action/reason, the judge-time histogram, the queue's depth.
  Napi::Array by = Napi::Array::New(env);
  uint32_t k = 0;
  for (int e = 0; e < 2; e++)
    for (int al = 0; al < 3; al++)
      for (int r = 0; r < kReasons; r++) {
        uint64_t v = byReason_[e][al][r].load(std::memory_order_relaxed);
        if (v == 0) continue;
        Napi::Object row = Napi::Object::New(env);
        row.Set("surface", e ? "commands" : "filesystem");
        row.Set("action", al == 2 ? "would_block" : al ? "allow" : "block");
        row.Set("reason", ReasonName(static_cast<Reason>(r)));
        row.Set("count", Napi::Number::New(env, static_cast<double>(v)));
        by.Set(k++, row);
      }
  o.Set("decisions", by);
  Napi::Array buckets = Napi::Array::New(env, kJudgeBuckets);
  for (int b = 0; b < kJudgeBuckets; b++)
    buckets.Set(b, Napi::Number::New(env, static_cast<double>(judgeBuckets_[b].load(std::memory_order_relaxed))));
  Napi::Object judge = Napi::Object::New(env);
  Napi::Array bounds = Napi::Array::New(env, kJudgeBuckets - 1);
  for (int b = 0; b < kJudgeBuckets - 1; b++) bounds.Set(b, Napi::Number::New(env, kJudgeBucketUs[b] / 1e6));
  judge.Set("bounds", bounds);
  judge.Set("buckets", buckets);
  judge.Set("sum", Napi::Number::New(env, static_cast<double>(judgeNs_.load(std::memory_order_relaxed)) / 1e9));
  judge.Set("count", Napi::Number::New(env, static_cast<double>(judgeCount_.load(std::memory_order_relaxed))));
  o.Set("judge", judge);
  {
    std::lock_guard<std::mutex> g(qmu_);
    n("queued", qCount_);
    n("queuedAllows", qAllows_);
  }
  n("allowsCounted", dropped_);
  HoldStats(env, o);
  o.Set("loopError", Napi::Number::New(env, loopErrno_.load()));
  o.Set("running", Napi::Boolean::New(env, started_ && !dog_.loop_done()));
  return o;
}

Napi::Value Watcher::Close(const Napi::CallbackInfo& info) {
  StopThreads();
  if (haveTsfn_) {
    tsfn_.Release();
    haveTsfn_ = false;
  }
  return info.Env().Undefined();
}

Napi::Value Watcher::Fd(const Napi::CallbackInfo& info) { return Napi::Number::New(info.Env(), fd_); }
Napi::Value Watcher::ReportsPidfd(const Napi::CallbackInfo& info) { return Napi::Boolean::New(info.Env(), pidfd_); }

void Watcher::StopThreads() {
  stop_.store(true);
  if (stopFd_ >= 0) {
    uint64_t one = 1;
    ssize_t ignored = write(stopFd_, &one, sizeof one);
    (void)ignored;
  }
  dog_.Stop();
  if (loop_.joinable()) loop_.join();
  // What is held is answered before the group is let go of: decided answers as decided, the rest denied.
  if (fd_ >= 0 && !standby_.load()) ReleaseHeld();
  // Closing the group answers every pending event allow once no standby holds it: the host is released.
  if (ownsFd_ && fd_ >= 0) close(fd_);
  inflight_.Close();
  if (activePidfd_ >= 0) close(activePidfd_);
  activePidfd_ = -1;
  fd_ = -1;
  if (stopFd_ >= 0) close(stopFd_);
  stopFd_ = -1;
  identity_.Close();
  paths_.Close();
  execs_.Close();
}

void InitWatcher(Napi::Env env, Napi::Object exports) { exports.Set("Watcher", Watcher::Define(env)); }

}  // namespace leash
