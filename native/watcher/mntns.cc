// Namespaces an agent makes (see mntns.h).
//
// MountWatch: a second fanotify group, notification class with FAN_REPORT_MNT (a group that
// reports mount events reports nothing else), marked with FAN_MARK_MNTNS on each mount namespace
// the watcher found a subject in. A mount attached there wakes JavaScript (coalesced: the callback
// gets the number of mounts since the last call), which reads that namespace's mounts and marks the
// new filesystems. Its thread only reads and counts; it answers nothing, so it can never hold an
// opener up.
#include "mntns.h"

#include <fcntl.h>
#include <linux/bpf.h>
#include <poll.h>
#include <signal.h>
#include <sys/eventfd.h>
#include <sys/fanotify.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "errors.h"

#ifndef FAN_REPORT_MNT
#define FAN_REPORT_MNT 0x00004000
#endif
#ifndef FAN_MARK_MNTNS
#define FAN_MARK_MNTNS 0x00000110
#endif
#ifndef FAN_MNT_ATTACH
#define FAN_MNT_ATTACH 0x01000000
#endif
#ifndef FAN_MNT_DETACH
#define FAN_MNT_DETACH 0x02000000
#endif

namespace leash {

namespace {

class MountWatch : public Napi::ObjectWrap<MountWatch> {
 public:
  static Napi::Function Define(Napi::Env env) {
    return DefineClass(env, "MountWatch",
                       {
                           InstanceMethod("mark", &MountWatch::Mark),
                           InstanceMethod("close", &MountWatch::Close),
                           InstanceAccessor("supported", &MountWatch::Supported, nullptr),
                           InstanceAccessor("initErrno", &MountWatch::InitErrno, nullptr),
                       });
  }

  explicit MountWatch(const Napi::CallbackInfo& info) : Napi::ObjectWrap<MountWatch>(info) {
    Napi::Env env = info.Env();
    if (info.Length() < 1 || !info[0].IsFunction()) {
      Usage(env, "new MountWatch(onMounts: (count: number) => void)");
      return;
    }
    fd_ = fanotify_init(FAN_CLASS_NOTIF | FAN_REPORT_MNT | FAN_CLOEXEC | FAN_NONBLOCK, 0);
    if (fd_ < 0) {
      initErrno_ = errno;  // EINVAL before Linux 6.14: no mount events; the rescan alone finds new mounts
      return;
    }
    stopFd_ = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (stopFd_ < 0) {
      ErrnoError(env, errno, "eventfd").ThrowAsJavaScriptException();
      return;
    }
    tsfn_ = Napi::ThreadSafeFunction::New(env, info[0].As<Napi::Function>(), "leash-mount-watch", 0, 1);
    tsfn_.Unref(env);
    haveTsfn_ = true;
    thread_ = std::thread([this] { Loop(); });
  }

  ~MountWatch() override { Stop(); }

 private:
  /** mark(nsPath): FAN_MARK_MNTNS on a mount namespace (/proc/PID/ns/mnt) for attach and detach. */
  Napi::Value Mark(const Napi::CallbackInfo& info) {
    Napi::Env env = info.Env();
    if (info.Length() < 1 || !info[0].IsString()) return Usage(env, "mark(nsPath: string)");
    if (fd_ < 0) return Usage(env, "MountWatch: no mount events on this kernel (Linux 6.14+)");
    std::string p = info[0].As<Napi::String>().Utf8Value();
    if (fanotify_mark(fd_, FAN_MARK_ADD | FAN_MARK_MNTNS, FAN_MNT_ATTACH | FAN_MNT_DETACH, AT_FDCWD, p.c_str()) != 0)
      ErrnoError(env, errno, "fanotify_mark (FAN_MARK_MNTNS)").ThrowAsJavaScriptException();
    return env.Undefined();
  }

  Napi::Value Close(const Napi::CallbackInfo& info) {
    Stop();
    return info.Env().Undefined();
  }

  Napi::Value Supported(const Napi::CallbackInfo& info) { return Napi::Boolean::New(info.Env(), fd_ >= 0); }
  Napi::Value InitErrno(const Napi::CallbackInfo& info) { return Napi::Number::New(info.Env(), initErrno_); }

  void Loop() {
    std::vector<char> storage(8192 + alignof(fanotify_event_metadata));
    char* buf = storage.data();
    while (!stop_.load()) {
      pollfd p[2] = {{fd_, POLLIN, 0}, {stopFd_, POLLIN, 0}};
      int r = poll(p, 2, -1);
      if (r < 0 && errno == EINTR) continue;
      if (r < 0 || (p[1].revents & POLLIN)) break;
      ssize_t n = read(fd_, buf, 8192);
      if (n <= 0) continue;
      uint32_t count = 0;
      auto* m = reinterpret_cast<fanotify_event_metadata*>(buf);
      while (FAN_EVENT_OK(m, n)) {
        if (m->mask & FAN_MNT_ATTACH) count++;
        if (m->fd >= 0) close(m->fd);  // FAN_NOFD for mount events; closed in case
        m = FAN_EVENT_NEXT(m, n);
      }
      if (count == 0) continue;
      // Coalesced: one call in flight at a time carries every attach counted meanwhile.
      if (pending_.fetch_add(count) == 0) {
        tsfn_.NonBlockingCall([this](Napi::Env env, Napi::Function fn) {
          uint32_t c = pending_.exchange(0);
          fn.Call({Napi::Number::New(env, c)});
        });
      }
    }
  }

  void Stop() {
    stop_.store(true);
    if (stopFd_ >= 0) {
      uint64_t one = 1;
      ssize_t ignored = write(stopFd_, &one, sizeof one);
      (void)ignored;
    }
    if (thread_.joinable()) thread_.join();
    if (fd_ >= 0) close(fd_);
    fd_ = -1;
    if (stopFd_ >= 0) close(stopFd_);
    stopFd_ = -1;
    if (haveTsfn_) {
      tsfn_.Release();
      haveTsfn_ = false;
    }
  }

  int fd_ = -1;
  int stopFd_ = -1;
  int initErrno_ = 0;
  std::atomic<bool> stop_{false};
  std::atomic<uint32_t> pending_{0};
  std::thread thread_;
  Napi::ThreadSafeFunction tsfn_;
  bool haveTsfn_ = false;
};

/**
 * nsKill(pid, userNsIno) -> boolean: SIGKILL to `pid` if it is (still) in the user namespace of
 * that inode. The pidfd is taken first and the namespace checked after it, so a PID reused in
 * between is either checked (it is another process, in another namespace: not killed) or the
 * pidfd names the one that is gone (the signal fails with ESRCH).
 */
Napi::Value NsKill(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  if (info.Length() < 2 || !info[0].IsNumber() || !info[1].IsNumber())
    return Usage(env, "nsKill(pid: number, userNsIno: number)");
  int pid = info[0].As<Napi::Number>().Int32Value();
  uint64_t want = static_cast<uint64_t>(info[1].As<Napi::Number>().Int64Value());
  if (pid <= 0) return Usage(env, "nsKill: pid must be positive");
  int pfd = static_cast<int>(syscall(SYS_pidfd_open, pid, 0));
  if (pfd < 0) return Napi::Boolean::New(env, false);
  char path[64];
  snprintf(path, sizeof path, "/proc/%d/ns/user", pid);
  struct stat st;
  bool same = stat(path, &st) == 0 && static_cast<uint64_t>(st.st_ino) == want;
  bool killed = same && syscall(SYS_pidfd_send_signal, pfd, SIGKILL, nullptr, 0) == 0;
  close(pfd);
  return Napi::Boolean::New(env, killed);
}

// ---- the BPF LSM probe ----

struct BtfHeader {
  uint16_t magic;
  uint8_t version, flags;
  uint32_t hdr_len, type_off, type_len, str_off, str_len;
};

/** The BTF type id of the FUNC named `want` in the kernel's BTF, or 0. */
uint32_t KernelBtfFunc(const char* want) {
  int fd = open("/sys/kernel/btf/vmlinux", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return 0;
  std::string data;
  char chunk[65536];
  for (;;) {
    ssize_t n = read(fd, chunk, sizeof chunk);
    if (n <= 0) break;
    data.append(chunk, static_cast<size_t>(n));
  }
  close(fd);
  if (data.size() < sizeof(BtfHeader)) return 0;
  BtfHeader h;
  memcpy(&h, data.data(), sizeof h);
  if (h.magic != 0xeB9F) return 0;
  size_t t0 = h.hdr_len + h.type_off, t1 = t0 + h.type_len, s0 = h.hdr_len + h.str_off;
  if (t1 > data.size() || s0 + h.str_len > data.size()) return 0;
  size_t want_len = strlen(want);
  uint32_t id = 1;
  for (size_t p = t0; p + 12 <= t1; id++) {
    uint32_t name_off, inf;
    memcpy(&name_off, data.data() + p, 4);
    memcpy(&inf, data.data() + p + 4, 4);
    uint32_t kind = (inf >> 24) & 0x1f, vlen = inf & 0xffff;
    if (kind == 12 /* BTF_KIND_FUNC */ && name_off < h.str_len &&
        strncmp(data.data() + s0 + name_off, want, want_len + 1) == 0)
      return id;
    size_t extra = 0;
    switch (kind) {
      case 1: case 14: case 17: extra = 4; break;                   // INT, VAR, DECL_TAG
      case 3: extra = 12; break;                                    // ARRAY
      case 4: case 5: case 15: case 19: extra = 12u * vlen; break;  // STRUCT, UNION, DATASEC, ENUM64
      case 6: case 13: extra = 8u * vlen; break;                    // ENUM, FUNC_PROTO
      default: extra = 0;
    }
    p += 12 + extra;
  }
  return 0;
}

/** Loads `r0 = 0; exit` as a program of this type; the fd (closed at once) or -errno. */
int TryLoad(uint32_t type, uint32_t attachType, uint32_t btfId) {
  struct bpf_insn insns[2] = {};
  insns[0].code = BPF_ALU64 | BPF_MOV | BPF_K;  // r0 = 0
  insns[1].code = BPF_JMP | BPF_EXIT;
  static const char license[] = "GPL";
  union bpf_attr a;
  memset(&a, 0, sizeof a);
  a.prog_type = type;
  a.insn_cnt = 2;
  a.insns = reinterpret_cast<uint64_t>(insns);
  a.license = reinterpret_cast<uint64_t>(license);
  a.expected_attach_type = attachType;
  a.attach_btf_id = btfId;
  int fd = static_cast<int>(syscall(SYS_bpf, BPF_PROG_LOAD, &a, sizeof a));
  if (fd < 0) return -errno;
  close(fd);  // loaded, never attached: nothing on the host changes
  return fd;
}

Napi::String ErrName(Napi::Env env, int e) { return Napi::String::New(env, ErrnoName(e)); }

/**
 * probeBpfLsm() -> {hook, btfId, lsm: {loaded, code}, control: {loaded, code}}: whether an LSM
 * program (on the file_open hook, found in the kernel's BTF) loads, next to a socket filter (the
 * control: the loader itself works). Nothing is attached; a loaded program is closed at once.
 */
Napi::Value ProbeBpfLsm(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  Napi::Object o = Napi::Object::New(env);
  const char* hook = "bpf_lsm_file_open";
  uint32_t id = KernelBtfFunc(hook);
  o.Set("hook", Napi::String::New(env, hook));
  o.Set("btfId", Napi::Number::New(env, id));
  auto res = [&](int r) {
    Napi::Object x = Napi::Object::New(env);
    x.Set("loaded", Napi::Boolean::New(env, r >= 0));
    x.Set("code", r >= 0 ? env.Null() : static_cast<Napi::Value>(ErrName(env, -r)));
    return x;
  };
  o.Set("lsm", id ? res(TryLoad(BPF_PROG_TYPE_LSM, BPF_LSM_MAC, id)) : res(-ENOENT));
  o.Set("control", res(TryLoad(BPF_PROG_TYPE_SOCKET_FILTER, 0, 0)));
  return o;
}

}  // namespace

void InitMntns(Napi::Env env, Napi::Object exports) {
  exports.Set("MountWatch", MountWatch::Define(env));
  exports.Set("nsKill", Napi::Function::New(env, NsKill, "nsKill"));
  exports.Set("probeBpfLsm", Napi::Function::New(env, ProbeBpfLsm, "probeBpfLsm"));
}

}  // namespace leash
