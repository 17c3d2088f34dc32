// The fanotify watcher (see fanotify.h).
//
// Why the read loop is native: the watcher's own opens of a file on a marked
// filesystem raise permission events to itself, and a listener that answers from
// JavaScript deadlocks as soon as JavaScript opens a file. So every event is
// answered here, on a thread that takes no lock JavaScript can hold: events from
// the watcher itself and from UIDs that are not subjects are allowed at once, and
// subject events are judged against an immutable snapshot swapped in atomically.
#include "fanotify.h"

#include <dirent.h>
#include <elf.h>
#include <fcntl.h>
#include <linux/openat2.h>
#include <poll.h>
#include <sched.h>
#include <sys/eventfd.h>
#include <sys/fanotify.h>
#include <sys/ioctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>
#include <v8.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <climits>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "decisionline.h"
#include "errors.h"
#include "fsmatch.h"

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

constexpr uint64_t kPermMask = FAN_OPEN_PERM | FAN_OPEN_EXEC_PERM;

int64_t NowMs() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1000 + ts.tv_nsec / 1000000;
}

int64_t NowNs() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}

void WriteAll(int fd, const std::string& s) {
  size_t off = 0;
  while (off < s.size()) {
    ssize_t n = write(fd, s.data() + off, s.size() - off);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;
    off += static_cast<size_t>(n);
  }
}

std::string ReadSmallFile(const std::string& path) {
  int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return "";
  std::string out;
  char buf[4096];
  for (;;) {
    ssize_t n = read(fd, buf, sizeof buf);
    if (n <= 0) break;
    out.append(buf, static_cast<size_t>(n));
    if (out.size() > 65536) break;
  }
  close(fd);
  return out;
}

struct Creds {
  uint32_t uid[4];  // real, effective, saved, filesystem
};

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

enum Phase : int { kIdle = 0, kReading = 1, kJudging = 2, kAnswering = 3, kStopped = 4 };
const char* const kPhaseNames[] = {"idle (poll)", "reading events", "judging a subject event", "answering",
                                   "stopped"};

struct SubjectEntry {
  std::shared_ptr<const FsPolicy> policy;  // null = subject with no policy
  bool failOpen;
};

/** One immutable generation of the UID -> policy map. */
struct Snapshot {
  std::unordered_map<uint32_t, SubjectEntry> subjects;
};

/** One verdict for the decision log; the subject is the loop's current path. */
struct Decision {
  uint32_t uid;
  bool exec;
  bool allow;
  Reason reason;
  const std::string* rule;     // points into a policy of the snapshot HandleEvent holds
  const std::string* program;  // interpreter_of: the program served (the loop's execProgram_), else null
};

// ---- the interpreter of an exec (loop thread; see Watcher::Judge) ----

enum class InterpRead { kNone, kFound, kMalformed };

template <typename Ehdr, typename Phdr>
InterpRead ElfInterp(int fd, const unsigned char* head, size_t n, std::string* out) {
  if (n < sizeof(Ehdr)) return InterpRead::kMalformed;
  Ehdr e;
  memcpy(&e, head, sizeof e);
  if (e.e_type != ET_EXEC && e.e_type != ET_DYN) return InterpRead::kNone;  // the kernel runs neither
  // The kernel's own bounds (fs/binfmt_elf.c load_elf_phdrs): a table it would refuse is malformed.
  size_t size = static_cast<size_t>(e.e_phnum) * e.e_phentsize;
  if (e.e_phentsize != sizeof(Phdr) || size == 0 || size > 4096) return InterpRead::kMalformed;
  Phdr ph[4096 / sizeof(Phdr)];
  ssize_t r = pread(fd, ph, size, static_cast<off_t>(e.e_phoff));
  if (r != static_cast<ssize_t>(size)) return InterpRead::kMalformed;
  for (size_t i = 0; i < e.e_phnum; i++) {
    if (ph[i].p_type != PT_INTERP) continue;  // only the first counts, as in the kernel
    if (ph[i].p_filesz > PATH_MAX || ph[i].p_filesz < 2) return InterpRead::kMalformed;
    char buf[PATH_MAX + 1];
    size_t len = static_cast<size_t>(ph[i].p_filesz);
    if (pread(fd, buf, len, static_cast<off_t>(ph[i].p_offset)) != static_cast<ssize_t>(len))
      return InterpRead::kMalformed;
    if (buf[len - 1] != 0) return InterpRead::kMalformed;
    out->assign(buf);  // up to the first NUL, as the kernel opens it
    return InterpRead::kFound;
  }
  return InterpRead::kNone;  // a static binary: nothing is loaded after it
}

/**
 * The interpreter the kernel will exec-open after `fd` (an exec event's own descriptor): the
 * PT_INTERP of an ELF or the `#!` line of a script. kNone: nothing (a static binary, a file the
 * kernel runs through no interpreter or refuses); kMalformed: an ELF whose headers cannot be read
 * as the kernel reads them (judged engine_error, never an allow).
 */
InterpRead ReadInterpreter(int fd, std::string* out) {
  unsigned char head[256];  // BINPRM_BUF_SIZE: what the kernel reads of the file first
  ssize_t n = pread(fd, head, sizeof head, 0);
  if (n < 0) return InterpRead::kMalformed;
  size_t len = static_cast<size_t>(n);
  if (len >= 2 && head[0] == '#' && head[1] == '!') {
    // fs/binfmt_script.c: blanks, then the interpreter up to a blank, a newline or NUL.
    size_t i = 2;
    while (i < len && (head[i] == ' ' || head[i] == '\t')) i++;
    size_t start = i;
    while (i < len && head[i] != ' ' && head[i] != '\t' && head[i] != '\n' && head[i] != 0) i++;
    if (i == start || i == len) return InterpRead::kNone;  // no interpreter, or cut off: ENOEXEC
    out->assign(reinterpret_cast<const char*>(head + start), i - start);
    return InterpRead::kFound;
  }
  if (len < EI_NIDENT || memcmp(head, ELFMAG, SELFMAG) != 0) return InterpRead::kNone;
  if (head[EI_DATA] != ELFDATA2LSB) return InterpRead::kNone;  // not this machine's: the kernel refuses it
  if (head[EI_CLASS] == ELFCLASS64) return ElfInterp<Elf64_Ehdr, Elf64_Phdr>(fd, head, len, out);
  if (head[EI_CLASS] == ELFCLASS32) return ElfInterp<Elf32_Ehdr, Elf32_Phdr>(fd, head, len, out);
  return InterpRead::kMalformed;
}

/**
 * Resolves an interpreter path as the kernel does for the process: from its root (a chroot, its
 * mount namespace), following symlinks. O_PATH raises no fanotify event, so the loop can do this
 * on a marked filesystem without waiting for itself. A relative path (resolved by the kernel from
 * the process's working directory) is not followed: nothing is implied for it.
 */
bool ResolveInterpreter(int32_t pid, const std::string& path, struct stat* st) {
  if (path.empty() || path[0] != '/') return false;
  char root[64];
  snprintf(root, sizeof root, "/proc/%d/root", pid);
  int rfd = open(root, O_PATH | O_DIRECTORY | O_CLOEXEC);
  if (rfd < 0) return false;
  open_how how;
  memset(&how, 0, sizeof how);
  how.flags = O_PATH | O_CLOEXEC;
  how.resolve = RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS;
  int fd = static_cast<int>(syscall(SYS_openat2, rfd, path.c_str(), &how, sizeof how));
  close(rfd);
  if (fd < 0) return false;
  bool ok = fstat(fd, st) == 0;
  close(fd);
  return ok;
}

/**
 * Is the process blocked in a binary format's loader (its exec-open of an interpreter), rather
 * than in an execve of its own? A stale entry (an execve that failed after its exec-open, e.g. a
 * bad argv pointer) followed by a direct execve of the loader gives the same events as a real
 * exec; the kernel stack tells them apart. The process is blocked on our answer, so its stack
 * cannot change while it is read; a second thread could exec the loader while the first is in
 * a loader, so only a single-threaded process qualifies.
 */
bool InBinfmtLoader(int32_t pid) {
  char path[64];
  char buf[8192];
  // The event can be read before the process has gone to sleep waiting for the answer; a task
  // still running on another CPU shows an empty stack. So: wait (briefly, bounded) until it sleeps.
  for (int attempt = 0; attempt < 200; attempt++) {
    if (attempt > 0) {
      if (attempt < 50) {
        sched_yield();
      } else {
        timespec ts{0, 20 * 1000};
        nanosleep(&ts, nullptr);
      }
    }
    snprintf(path, sizeof path, "/proc/%d/stat", pid);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return false;
    ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (n <= 0) return false;
    buf[n] = 0;
    const char* p = strrchr(buf, ')');
    if (!p || p[1] != ' ') return false;
    char state = p[2];
    p++;
    for (int f = 0; f < 17 && p; f++) p = strchr(p + 1, ' ');  // p: " S ppid...": to the space before field 20, num_threads
    if (!p || strtol(p + 1, nullptr, 10) != 1) return false;
    if (state == 'R') continue;  // not asleep yet
    snprintf(path, sizeof path, "/proc/%d/stack", pid);
    fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return false;
    n = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (n < 0) return false;
    buf[n] = 0;
    if (n == 0) continue;  // woke or switched between the two reads: look again
    // The loaders that exec-open an interpreter: ELF (PT_INTERP), #! scripts, binfmt_misc.
    return strstr(buf, " load_elf_binary+") || strstr(buf, " load_script+") || strstr(buf, " load_misc_binary+") ||
           strstr(buf, " load_elf_fdpic_binary+");
  }
  return false;
}

class Watcher : public Napi::ObjectWrap<Watcher> {
 public:
  static Napi::Function Define(Napi::Env env) {
    return DefineClass(env, "Watcher",
                       {
                           InstanceMethod("start", &Watcher::Start),
                           InstanceMethod("mark", &Watcher::Mark),
                           InstanceMethod("setSubjects", &Watcher::SetSubjects),
                           InstanceMethod("drain", &Watcher::Drain),
                           InstanceMethod("heartbeat", &Watcher::Heartbeat),
                           InstanceMethod("stats", &Watcher::Stats),
                           InstanceMethod("close", &Watcher::Close),
                           InstanceAccessor("fd", &Watcher::Fd, nullptr),
                           InstanceAccessor("reportsPidfd", &Watcher::ReportsPidfd, nullptr),
                       });
  }

  explicit Watcher(const Napi::CallbackInfo& info) : Napi::ObjectWrap<Watcher>(info) {
    Napi::Env env = info.Env();
    snap_ = std::make_shared<const Snapshot>();
    if (info.Length() < 1 || !info[0].IsObject()) {
      Usage(env, "new Watcher({ onRecords, eventFd?, responseFd?, watchdogMs?, spinUs?, nice?, queueAllows? })");
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
    selfPid_ = static_cast<int32_t>(num("selfPid", getpid()));
    int eventFd = static_cast<int>(num("eventFd", -1));
    int responseFd = static_cast<int>(num("responseFd", -1));

    // identity: how the opener's credentials are read (see CredsOf). 'pidfd-cache' (default):
    // one pidfd per live process, kept; 'report-pidfd': the kernel's pidfd on every event
    // (FAN_REPORT_PIDFD); 'proc': /proc/<pid>/status. The last two are for measurement.
    Napi::Value idv = o.Get("identity");
    std::string id = idv.IsString() ? idv.As<Napi::String>().Utf8Value() : "pidfd-cache";
    if (id == "proc") identity_ = kIdProc;
    else if (id == "report-pidfd") identity_ = kIdReport;
    else identity_ = kIdCache;
    if (eventFd >= 0) {
      // A test feeds crafted events through any descriptor (fapolicyd's test_notify_set_fanotify_fd).
      fd_ = eventFd;
      ownsFd_ = false;
      int fl = fcntl(fd_, F_GETFL);
      if (fl < 0 || fcntl(fd_, F_SETFL, fl | O_NONBLOCK) < 0) {
        ErrnoError(env, errno, "fcntl").ThrowAsJavaScriptException();
        return;
      }
    } else {
      unsigned base = FAN_CLASS_CONTENT | FAN_CLOEXEC | FAN_NONBLOCK;
      unsigned ev = O_RDONLY | O_LARGEFILE | O_CLOEXEC;
      bool wantPidfd = identity_ == kIdReport;
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
    }
    respFd_ = responseFd >= 0 ? responseFd : fd_;
    // Paths are read with readlinkat(this, "<fd>"): one lookup instead of the walk of "/proc/self/fd/<fd>".
    procFd_ = open("/proc/self/fd", O_PATH | O_DIRECTORY | O_CLOEXEC);
    stopFd_ = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (stopFd_ < 0) {
      ErrnoError(env, errno, "eventfd").ThrowAsJavaScriptException();
      return;
    }
    tsfn_ = Napi::ThreadSafeFunction::New(env, cb.As<Napi::Function>(), "leash-watcher-records", 0, 1);
    tsfn_.Unref(env);
    haveTsfn_ = true;
    isolate_ = v8::Isolate::GetCurrent();
    loopBeat_ = jsBeat_ = NowMs();
  }

  ~Watcher() override { StopThreads(); }

 private:
  // ---- JavaScript surface ----

  Napi::Value Start(const Napi::CallbackInfo& info) {
    Napi::Env env = info.Env();
    if (fd_ < 0) return Usage(env, "Watcher is closed");
    if (started_) return env.Undefined();
    started_ = true;
    loopBeat_ = jsBeat_ = NowMs();
    loop_ = std::thread([this] { Loop(); });
    if (watchdogMs_ > 0) dog_ = std::thread([this] { Watchdog(); });
    return env.Undefined();
  }

  /** mark(path, scope = 'filesystem'): FAN_MARK_FILESYSTEM (or FAN_MARK_MOUNT) for opens, execs and dirs. */
  Napi::Value Mark(const Napi::CallbackInfo& info) {
    Napi::Env env = info.Env();
    if (info.Length() < 1 || !info[0].IsString()) return Usage(env, "mark(path: string, scope?: 'filesystem'|'mount')");
    if (fd_ < 0 || !ownsFd_) return Usage(env, "mark: watcher has no fanotify group");
    std::string path = info[0].As<Napi::String>().Utf8Value();
    unsigned flags = FAN_MARK_ADD | FAN_MARK_FILESYSTEM;
    if (info.Length() > 1 && info[1].IsString() && info[1].As<Napi::String>().Utf8Value() == "mount")
      flags = FAN_MARK_ADD | FAN_MARK_MOUNT;
    // A descriptor on this filesystem through one of OUR mounts: events that arrive
    // through another namespace's mount are renamed through it (see PathOf). It is
    // opened before the mark (so this open raises no event) and not O_PATH, because
    // open_by_handle_at does not take an O_PATH mount descriptor.
    int pfd = open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fanotify_mark(fd_, flags, kPermMask | FAN_ONDIR, AT_FDCWD, path.c_str()) != 0) {
      int err = errno;
      if (pfd >= 0) close(pfd);
      ErrnoError(env, err, "fanotify_mark").ThrowAsJavaScriptException();
      return env.Undefined();
    }
    struct stat st;
    if (pfd >= 0 && fstat(pfd, &st) == 0) {
      std::lock_guard<std::mutex> g(mountMu_);
      if (!mountFds_.emplace(st.st_dev, pfd).second) close(pfd);
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
  Napi::Value SetSubjects(const Napi::CallbackInfo& info) {
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
   * drain() -> {lines, count, denies, droppedAllows}: the decision-log lines queued since the
   * last drain, formatted by the loop (decisionline.h), as one Buffer for one write(2).
   */
  Napi::Value Drain(const Napi::CallbackInfo& info) {
    Napi::Env env = info.Env();
    uint64_t dropped, count, denies;
    {
      std::lock_guard<std::mutex> g(qmu_);
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
    return out;
  }

  /** heartbeat(): the JavaScript side is alive (the watchdog exits when it stops for watchdogMs). */
  Napi::Value Heartbeat(const Napi::CallbackInfo& info) {
    jsBeat_ = NowMs();
    return info.Env().Undefined();
  }

  Napi::Value Stats(const Napi::CallbackInfo& info) {
    Napi::Env env = info.Env();
    Napi::Object o = Napi::Object::New(env);
    auto n = [&](const char* k, const std::atomic<uint64_t>& v) {
      o.Set(k, Napi::Number::New(env, static_cast<double>(v.load(std::memory_order_relaxed))));
    };
    n("events", events_);
    n("self", self_);
    n("nonSubject", nonSubject_);
    n("subjectAllow", subjectAllow_);
    n("subjectDeny", subjectDeny_);
    n("unknownProcess", unknown_);
    n("procFallback", procFallback_);
    n("writeErrors", writeErrors_);
    n("foreignMount", foreignMount_);
    n("interpreterOf", interpreterOf_);
    n("execStateRefused", execStateRefused_);
    n("execStateDropped", execStateDropped_);
    o.Set("loopError", Napi::Number::New(env, loopErrno_.load()));
    o.Set("running", Napi::Boolean::New(env, started_ && !loopDone_.load()));
    return o;
  }

  Napi::Value Close(const Napi::CallbackInfo& info) {
    StopThreads();
    if (haveTsfn_) {
      tsfn_.Release();
      haveTsfn_ = false;
    }
    return info.Env().Undefined();
  }

  Napi::Value Fd(const Napi::CallbackInfo& info) { return Napi::Number::New(info.Env(), fd_); }
  Napi::Value ReportsPidfd(const Napi::CallbackInfo& info) { return Napi::Boolean::New(info.Env(), pidfd_); }

  void StopThreads() {
    stop_.store(true);
    if (stopFd_ >= 0) {
      uint64_t one = 1;
      ssize_t ignored = write(stopFd_, &one, sizeof one);
      (void)ignored;
    }
    {
      std::lock_guard<std::mutex> g(dogMu_);
      dogCv_.notify_all();
    }
    if (loop_.joinable()) loop_.join();
    if (dog_.joinable()) dog_.join();
    // Closing the group answers every pending event allow: the host is released.
    if (ownsFd_ && fd_ >= 0) close(fd_);
    fd_ = -1;
    if (stopFd_ >= 0) close(stopFd_);
    stopFd_ = -1;
    if (procFd_ >= 0) close(procFd_);
    procFd_ = -1;
    for (auto& kv : pidfds_) close(kv.second);
    pidfds_.clear();
    std::lock_guard<std::mutex> g(mountMu_);
    for (auto& kv : mountFds_) close(kv.second);
    mountFds_.clear();
    if (mountinfoFd_ >= 0) close(mountinfoFd_);
    mountinfoFd_ = -1;
  }

  // ---- the read loop (native thread) ----

  void Loop() {
    if (nice_ != 0) setpriority(PRIO_PROCESS, static_cast<id_t>(syscall(SYS_gettid)), nice_);
    std::vector<char> storage(64 * 1024 + alignof(fanotify_event_metadata));
    char* buf = storage.data();
    int64_t lastEvent = 0;
    int64_t spinOffUntil = 0;
    int64_t lastBatch = 0;  // when the previous batch was done
    bool burst = false;     // the last two batches came close together: spin after this one
    while (!stop_.load(std::memory_order_relaxed)) {
      phase_.store(kReading, std::memory_order_relaxed);
      ssize_t n = read(fd_, buf, 64 * 1024);
      if (n > 0) {
        Process(buf, n);
        int64_t t = NowNs();
        burst = t - lastBatch < kBurstGapFactor * spinNs_;
        lastBatch = lastEvent = t;
        loopBeat_.store(t / 1000000, std::memory_order_relaxed);
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
      phase_.store(kIdle, std::memory_order_relaxed);
      pollfd p[2] = {{fd_, POLLIN, 0}, {stopFd_, POLLIN, 0}};
      int r = poll(p, 2, 1000);
      int64_t t = NowNs();
      loopBeat_.store(t / 1000000, std::memory_order_relaxed);
      if (r > 0 && (p[0].revents & POLLIN)) lastEvent = t;
      if (r > 0 && (p[0].revents & (POLLHUP | POLLERR)) && !(p[0].revents & POLLIN)) break;
    }
    phase_.store(kStopped);
    loopDone_.store(true);
  }

  void Process(char* buf, ssize_t len) {
    // One clock read per batch of events: the decisions' time (ms) and the wake-up coalescing's.
    timespec wall;
    clock_gettime(CLOCK_REALTIME, &wall);
    batchWallMs_ = static_cast<int64_t>(wall.tv_sec) * 1000 + wall.tv_nsec / 1000000;
    batchMonoNs_ = NowNs();
    auto* m = reinterpret_cast<fanotify_event_metadata*>(buf);
    while (FAN_EVENT_OK(m, len)) {
      if (m->vers == FANOTIFY_METADATA_VERSION) HandleEvent(m);
      m = FAN_EVENT_NEXT(m, len);
    }
  }

  static bool InfoCreds(int pidfd, Creds* c) {
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

  // Credentials through a pidfd kept per process. Safe against PID reuse: a pidfd whose
  // process is alive (or a zombie) answers PIDFD_GET_INFO, and while it does its PID cannot
  // belong to anyone else; once it is reaped the ioctl fails with ESRCH and the PID is
  // opened afresh. A fresh pidfd_open(pid) names the event's process, which is blocked in
  // this very open and cannot be reaped unless killed (then the answer no longer matters).
  // This costs one ioctl per event instead of the kernel making and us closing a pidfd.
  bool CredsFromCache(int32_t pid, Creds* c) {
    auto it = pidfds_.find(pid);
    if (it != pidfds_.end()) {
      if (InfoCreds(it->second, c)) return true;
      int err = errno;
      close(it->second);
      pidfds_.erase(it);
      if (err == ENOTTY || err == EINVAL) {
        pidfdInfoOk_.store(false);
        return false;
      }
    }
    int fd = static_cast<int>(syscall(SYS_pidfd_open, pid, 0));
    if (fd < 0) return false;
    fcntl(fd, F_SETFD, FD_CLOEXEC);
    if (!InfoCreds(fd, c)) {
      if (errno == ENOTTY || errno == EINVAL) pidfdInfoOk_.store(false);
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

  bool CredsOf(int pidfd, int32_t pid, Creds* c) {
    if (identity_ == kIdCache && pidfdInfoOk_.load(std::memory_order_relaxed)) {
      if (CredsFromCache(pid, c)) return true;
      if (errno == ESRCH) return false;  // the process is gone
    } else if (pidfd >= 0 && pidfdInfoOk_.load(std::memory_order_relaxed)) {
      PidfdInfoV0 info;
      memset(&info, 0, sizeof info);
      info.mask = kPidfdInfoPid | kPidfdInfoCreds;
      if (ioctl(pidfd, kPidfdGetInfo, &info) == 0 && (info.mask & kPidfdInfoCreds)) {
        c->uid[0] = info.ruid;
        c->uid[1] = info.euid;
        c->uid[2] = info.suid;
        c->uid[3] = info.fsuid;
        return true;
      }
      if (errno == ENOTTY || errno == EINVAL) pidfdInfoOk_.store(false);  // kernel before 6.13
      if (errno == ESRCH) return false;                                  // the process is gone
    }
    procFallback_.fetch_add(1, std::memory_order_relaxed);
    return CredsFromProc(pid, c);
  }

  void HandleEvent(const fanotify_event_metadata* m) {
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
    Decision decs[8];
    int ndec = 0;
    std::shared_ptr<const Snapshot> snap;  // held until the decisions (which point into it) are queued
    if (perm) {
      events_.fetch_add(1, std::memory_order_relaxed);
      snap = std::atomic_load(&snap_);
      if (m->pid == selfPid_) {
        // Our own open: answering it from here is what keeps the watcher from deadlocking on itself.
        self_.fetch_add(1, std::memory_order_relaxed);
      } else if (snap->subjects.empty()) {
        nonSubject_.fetch_add(1, std::memory_order_relaxed);
      } else {
        phase_.store(kJudging, std::memory_order_relaxed);
        curPid_.store(m->pid, std::memory_order_relaxed);
        Creds c;
        if (!CredsOf(pidfd, m->pid, &c)) {
          // Only a process that no longer exists has no credentials; its open cannot complete.
          allow = false;
          unknown_.fetch_add(1, std::memory_order_relaxed);
        } else {
          ndec = Judge(*snap, c, m, &allow, decs);
          if (ndec == 0) nonSubject_.fetch_add(1, std::memory_order_relaxed);
        }
      }
      phase_.store(kAnswering, std::memory_order_relaxed);
      fanotify_response r{m->fd, static_cast<__u32>(allow ? FAN_ALLOW : FAN_DENY)};
      if (write(respFd_, &r, sizeof r) != static_cast<ssize_t>(sizeof r))
        writeErrors_.fetch_add(1, std::memory_order_relaxed);
    }
    if (m->fd >= 0) close(m->fd);
    if (pidfd >= 0) close(pidfd);
    if (ndec > 0) Enqueue(decs, ndec);
  }

  // Judges the event under every subject UID the process carries (real, effective,
  // saved, fs): a setuid helper started by an agent stays the agent's. Deny if any denies.
  int Judge(const Snapshot& snap, const Creds& c, const fanotify_event_metadata* m, bool* allow, Decision* decs) {
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
    pathLen_ = 0;  // set only by a successful PathOf: no name is logged as ""
    bool havePath = PathOf(m->fd);
    std::string_view subject(path_, pathLen_);
    bool isExec = (m->mask & FAN_OPEN_EXEC_PERM) != 0;
    // Exec state: is this exec the kernel loading the interpreter of the program this process
    // just had allowed? Any exec event of the process ends its entry (used, or stale).
    bool asInterp = false;
    if (isExec) asInterp = TakeExecEntry(m);
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
        } else {
          v = exec ? MatchCommandPolicy(pol, se.failOpen, subject, asInterp)
                   : MatchPathPolicy(pol, se.failOpen, subject);
        }
        if (!v.allow) *allow = false;
        bool served = exec && v.reason == Reason::kInterpreterOf;
        if (served) interpreterOf_.fetch_add(1, std::memory_order_relaxed);
        decs[n++] = {uids[h], exec, v.allow, v.reason, v.rule, served ? &execProgram_ : nullptr};
      }
    }
    // An allowed exec under a whitelist with interpreters: remember what the kernel will load
    // next for it. A header that cannot be read as the kernel reads it is never an allow.
    if (isExec && *allow && wantInterp && havePath && !RememberInterpreter(m, subject)) {
      *allow = false;
      for (int i = 0; i < n; i++) {
        if (!decs[i].exec) continue;
        decs[i] = {decs[i].uid, true, false, Reason::kEngineError, nullptr, nullptr};
      }
    }
    (*allow ? subjectAllow_ : subjectDeny_).fetch_add(1, std::memory_order_relaxed);
    return n;
  }

  // Exec state per process (loop thread only). When a subject's exec is allowed, the interpreter
  // it names is remembered with its identity; the next exec event of that process is the kernel
  // loading it only if it is exactly that file, soon, and the process is in a binfmt loader.
  struct ExecEntry {
    dev_t dev;
    ino_t ino;
    int64_t atNs;
    std::string program;
  };
  static constexpr size_t kExecStateMax = 1024;
  static constexpr int64_t kExecStateTtlNs = 5LL * 1000 * 1000 * 1000;

  bool TakeExecEntry(const fanotify_event_metadata* m) {
    if (execs_.empty()) return false;
    auto it = execs_.find(m->pid);
    if (it == execs_.end()) return false;
    ExecEntry e = std::move(it->second);
    execs_.erase(it);
    struct stat st;
    if (batchMonoNs_ - e.atNs > kExecStateTtlNs) return false;
    if (fstat(m->fd, &st) != 0 || st.st_dev != e.dev || st.st_ino != e.ino) return false;
    if (!InBinfmtLoader(m->pid)) {
      execStateRefused_.fetch_add(1, std::memory_order_relaxed);
      return false;
    }
    execProgram_ = std::move(e.program);
    return true;
  }

  // Returns false for a malformed header (the exec is then engine_error).
  bool RememberInterpreter(const fanotify_event_metadata* m, std::string_view program) {
    std::string interp;
    InterpRead r = ReadInterpreter(m->fd, &interp);
    if (r == InterpRead::kMalformed) return false;
    if (r == InterpRead::kNone) return true;
    struct stat st;
    if (!ResolveInterpreter(m->pid, interp, &st)) return true;  // the exec will fail; nothing implied
    if (execs_.size() >= kExecStateMax) {
      for (auto it = execs_.begin(); it != execs_.end();) {
        if (batchMonoNs_ - it->second.atNs > kExecStateTtlNs) it = execs_.erase(it);
        else ++it;
      }
      if (execs_.size() >= kExecStateMax) {
        // Fails closed: a dropped entry only leaves an interpreter to be judged by its own name.
        execStateDropped_.fetch_add(execs_.size(), std::memory_order_relaxed);
        execs_.clear();
      }
    }
    execs_[m->pid] = {st.st_dev, st.st_ino, batchMonoNs_, std::string(program)};
    return true;
  }

  // Denies are always queued; allows beyond queueAllows_ are counted instead and the
  // count reaches the log with the next drain. The loop never waits for JavaScript: the
  // lock is held by Drain only for a swap. Each decision is queued as its finished log line
  // (decisionline.h), so JavaScript only writes a drain's bytes.
  // Waking JavaScript costs the loop an eventfd write and a futex per wake, so wakes are
  // coalesced: a deny or a full batch wakes at once, otherwise at most one wake per
  // kWakeEveryNs; JavaScript also drains on a short timer, which picks up the rest.
  static constexpr int64_t kWakeEveryNs = 20 * 1000 * 1000;
  static constexpr int64_t kYieldContendedNs = 500 * 1000;
  static constexpr int64_t kBurstGapFactor = 5;
  static constexpr int64_t kSpinBackoffNs = 100 * 1000 * 1000;
  static constexpr size_t kWakeBatch = 512;
  static constexpr size_t kKeepQueueBytes = 4 << 20;
  void Enqueue(const Decision* d, int n) {
    refs_.Reserve(static_cast<size_t>(n));  // any getrandom happens outside the lock
    bool wake = false;
    bool deny = false;
    {
      std::lock_guard<std::mutex> g(qmu_);
      for (int i = 0; i < n; i++) {
        if (!d[i].allow) {
          deny = true;
          qDenies_++;
        } else if (qAllows_ >= queueAllows_) {
          dropped_++;
          continue;
        } else {
          qAllows_++;
        }
        char ref[8];
        refs_.Next(ref);
        AppendDecisionLine(&q_, &iso_, batchWallMs_, ref, d[i].uid, d[i].exec, d[i].allow, d[i].reason, path_,
                           pathLen_, d[i].rule, d[i].program);
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
    if (wake) tsfn_.NonBlockingCall();
  }

  // ---- paths ----

  // The name of one of our descriptors, into path_ (loop thread only).
  bool ReadLinkFd(int fd) {
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
  bool OurMount(uint64_t id, bool unique) {
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
  bool ListOurMounts() {
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
  bool PathOf(int fd) {
    struct statx sx;
    constexpr unsigned kMntIdUnique = 0x4000;  // STATX_MNT_ID_UNIQUE (Linux 6.8)
    unsigned want = STATX_MNT_ID | (listmountOk_ ? kMntIdUnique : 0u);  // an old kernel ignores the new bit
    if (statx(fd, "", AT_EMPTY_PATH, want, &sx) != 0) return false;
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
    int mfd = -1;
    {
      std::lock_guard<std::mutex> g(mountMu_);
      auto it = mountFds_.find(dev);
      if (it != mountFds_.end()) mfd = it->second;
      if (mfd < 0) return false;
      int nfd = open_by_handle_at(mfd, &h.fh, O_PATH | O_CLOEXEC);
      if (nfd < 0) return false;
      bool ok = ReadLinkFd(nfd);
      close(nfd);
      return ok;
    }
  }

  // ---- the watchdog (native thread) ----

  static void JsStackInterrupt(v8::Isolate* isolate, void* data) {
    auto* self = static_cast<Watcher*>(data);
    std::string out = "leash-watcher: JavaScript stack:\n";
    v8::HandleScope scope(isolate);
    v8::Local<v8::StackTrace> st = v8::StackTrace::CurrentStackTrace(isolate, 32);
    for (int i = 0; i < st->GetFrameCount(); i++) {
      v8::Local<v8::StackFrame> f = st->GetFrame(isolate, i);
      v8::String::Utf8Value fn(isolate, f->GetFunctionName());
      v8::String::Utf8Value script(isolate, f->GetScriptName());
      char line[64];
      snprintf(line, sizeof line, ":%d:%d\n", f->GetLineNumber(), f->GetColumn());
      out += "    at ";
      out += (*fn && **fn) ? *fn : "<anonymous>";
      out += " (";
      out += *script ? *script : "<unknown>";
      out += line;
    }
    WriteAll(2, out);
    self->jsDumped_.store(true);
  }

  void DumpThreads() {
    std::string out;
    DIR* d = opendir("/proc/self/task");
    if (!d) return;
    while (dirent* e = readdir(d)) {
      if (e->d_name[0] == '.') continue;
      std::string base = std::string("/proc/self/task/") + e->d_name;
      std::string comm = ReadSmallFile(base + "/comm");
      if (!comm.empty() && comm.back() == '\n') comm.pop_back();
      std::string stat = ReadSmallFile(base + "/stat");
      size_t rp = stat.rfind(')');
      char state = rp != std::string::npos && rp + 2 < stat.size() ? stat[rp + 2] : '?';
      out += "leash-watcher: thread " + std::string(e->d_name) + " (" + comm + ") state " + state +
             " wchan " + ReadSmallFile(base + "/wchan") + " syscall " + ReadSmallFile(base + "/syscall");
      if (out.back() != '\n') out += "\n";
      std::string ks = ReadSmallFile(base + "/stack");
      if (!ks.empty()) out += ks;
    }
    closedir(d);
    WriteAll(2, out);
  }

  void Watchdog() {
    std::unique_lock<std::mutex> lk(dogMu_);
    while (!stop_.load()) {
      dogCv_.wait_for(lk, std::chrono::milliseconds(500));
      if (stop_.load()) break;
      int64_t now = NowMs();
      int64_t loopAge = loopDone_.load() ? 0 : now - loopBeat_.load();
      int64_t jsAge = now - jsBeat_.load();
      if (loopAge < watchdogMs_ && jsAge < watchdogMs_) continue;
      char head[256];
      snprintf(head, sizeof head,
               "leash-watcher: watchdog: %s stalled (loop %lld ms, js %lld ms); loop phase: %s, pid %d; "
               "dumping stacks and exiting\n",
               loopAge >= watchdogMs_ ? "the fanotify loop" : "the JavaScript side",
               static_cast<long long>(loopAge), static_cast<long long>(jsAge), kPhaseNames[phase_.load()],
               curPid_.load());
      WriteAll(2, head);
      DumpThreads();
      // The JS stack can only be read on the JS thread: ask V8 to interrupt it. A
      // busy loop or Atomics.wait runs the interrupt; a blocking syscall does not.
      if (isolate_) isolate_->RequestInterrupt(JsStackInterrupt, this);
      for (int i = 0; i < 30 && !jsDumped_.load(); i++) std::this_thread::sleep_for(std::chrono::milliseconds(50));
      if (!jsDumped_.load()) WriteAll(2, "leash-watcher: JavaScript stack unavailable (thread blocked outside V8)\n");
      // Exiting closes the group, which answers every pending event allow; the service respawns us.
      _exit(70);
    }
  }

  int fd_ = -1;
  int respFd_ = -1;
  int stopFd_ = -1;
  bool ownsFd_ = false;
  bool pidfd_ = false;
  bool started_ = false;
  int32_t selfPid_ = 0;
  int nice_ = 0;
  int64_t spinNs_ = 0;
  int64_t watchdogMs_ = 10000;
  size_t queueAllows_ = 4096;
  std::thread loop_, dog_;
  std::atomic<bool> stop_{false};
  std::atomic<bool> loopDone_{false};
  std::atomic<int> loopErrno_{0};
  std::atomic<bool> pidfdInfoOk_{true};
  enum Identity { kIdCache, kIdReport, kIdProc } identity_ = kIdCache;
  static constexpr size_t kPidfdCacheMax = 512;
  std::unordered_map<int32_t, int> pidfds_;  // loop thread only
  std::mutex mountMu_;
  std::unordered_map<dev_t, int> mountFds_;
  int mountinfoFd_ = -1;
  std::unordered_set<uint64_t> ourMounts_;
  std::unordered_set<uint64_t> ourUnique_;
  int64_t lastListNs_ = 0;
  bool listmountOk_ = true;
  std::atomic<uint64_t> foreignMount_{0};
  std::atomic<uint64_t> interpreterOf_{0}, execStateRefused_{0}, execStateDropped_{0};
  std::unordered_map<int32_t, ExecEntry> execs_;  // loop thread only
  std::string execProgram_;                       // loop thread only: the program of the current interpreter_of
  std::shared_ptr<const Snapshot> snap_;

  // Loop thread only: the current event's path, the line formatter's clock and refs.
  char path_[PATH_MAX + 1];
  size_t pathLen_ = 0;
  int procFd_ = -1;
  int64_t batchWallMs_ = 0;
  int64_t batchMonoNs_ = 0;
  IsoTime iso_;
  RefPool refs_;

  std::mutex qmu_;
  std::string q_;          // finished decision-log lines, in decision order
  std::string drainBuf_;   // JavaScript thread only (Drain)
  uint64_t qCount_ = 0, qDenies_ = 0;
  size_t qAllows_ = 0;
  uint64_t dropped_ = 0;
  bool wakePending_ = false;
  int64_t lastWakeNs_ = 0;
  Napi::ThreadSafeFunction tsfn_;
  bool haveTsfn_ = false;

  std::atomic<uint64_t> events_{0}, self_{0}, nonSubject_{0}, subjectAllow_{0}, subjectDeny_{0}, unknown_{0},
      procFallback_{0}, writeErrors_{0};

  std::mutex dogMu_;
  std::condition_variable dogCv_;
  std::atomic<int64_t> loopBeat_{0}, jsBeat_{0};
  std::atomic<int> phase_{kIdle};
  std::atomic<int32_t> curPid_{0};
  std::atomic<bool> jsDumped_{false};
  v8::Isolate* isolate_ = nullptr;
};

}  // namespace

void InitWatcher(Napi::Env env, Napi::Object exports) { exports.Set("Watcher", Watcher::Define(env)); }

}  // namespace leash
