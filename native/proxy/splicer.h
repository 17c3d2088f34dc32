// Internal to native/proxy: the Splicer class, whose parts are splice.cc (what JavaScript calls) and splice_loop.cc
// (the epoll loop over the pairs, inline on Node's loop or on a thread of its own).
#pragma once
#include <napi.h>
#include <sys/epoll.h>
#include <uv.h>

#include <atomic>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <thread>
#include <unordered_map>
#include <utility>
#include <vector>

#include "pump.h"

namespace leash {
namespace pump {

struct Done;

/**
 * A pair made by native code (the acceptor's verdict path, inline mode only): its end is reported to `fn` with
 * both descriptors instead of to JavaScript. `ctx` keeps what `fn` needs alive as long as the pair.
 */
struct NativeEnd {
  void (*fn)(void* ctx, const Done& d) = nullptr;
  std::shared_ptr<void> ctx;
};

struct Pair {
  uint32_t id = 0;
  // EPOLLOUT is armed on a socket only once a write to it would block: registered for it up front, every
  // new connection would wake the pump thread at once for sockets that are simply writable.
  bool outArmedA = false;
  bool outArmedB = false;
  // EPOLLIN and EPOLLPRI are dropped from a socket while the direction reading it waits to write (Dir::blocked):
  // each segment arriving meanwhile would wake the pump only to find `out` still full (about three wake-ups in four
  // during a bulk transfer, measured). The writable edge on `out` restarts that direction, which reads to EAGAIN.
  bool inOffA = false;
  bool inOffB = false;
  Dir ab;
  Dir ba;
  int err = 0;
  bool finished = false;
  // A pair made by connect(): the upstream (b) is still connecting; the client's bytes wait in its socket.
  bool connecting = false;
  bool connected = true;
  // connect(..., closeOnClean): a pair that ends cleanly has both descriptors closed here (no EPOLL_CTL_DEL,
  // no call back into JavaScript to do it); any other end leaves them to the caller, which may reset them.
  bool closeOnClean = false;
  // Inline mode: the connect's time limit, a timer on Node's loop (no setsockopt to set and clear it).
  uv_timer_t* timer = nullptr;
  class Splicer* owner = nullptr;
  NativeEnd hook;
};

struct Done {
  uint32_t id;
  int err;
  double ab;
  double ba;
  bool connected;
  bool closed;
  int a = -1;  // the pair's descriptors (native ends only)
  int b = -1;
};

// An event's data: the pair, and in the low bit which of its sockets (0: a, the client; 1: b, the upstream).
inline uint64_t Tag(const void* p, int side) { return reinterpret_cast<uintptr_t>(p) | static_cast<uint64_t>(side); }

class Splicer : public Napi::ObjectWrap<Splicer> {
 public:
  static Napi::Function Define(Napi::Env env) {
    return DefineClass(env, "Splicer",
                       {InstanceMethod("add", &Splicer::Add), InstanceMethod("connect", &Splicer::Connect),
                        InstanceMethod("abort", &Splicer::Abort),
                        InstanceMethod("close", &Splicer::Close)});
  }

  explicit Splicer(const Napi::CallbackInfo& info);
  ~Splicer() override;

  /** True for a Splicer made by this addon (its type tag), before Unwrap. */
  static bool IsSplicer(Napi::Object o);
  /** Inline on Node's loop: the only mode native callers may use (their hooks run on the loop's thread). */
  bool Inline() const { return inline_ && running_; }
  /**
   * connect() for native code: the pair's id, or 0 with *err set (no socket, connect refused at once). The pair's
   * end goes to `hook` (closeOnClean: a clean end closed both descriptors already).
   */
  uint32_t ConnectNative(int a, const sockaddr_storage& ss, socklen_t len, unsigned timeoutMs, NativeEnd hook,
                         int* err);
  /** abort(id) for native code. */
  void AbortId(uint32_t id);

 private:
  // splice.cc: what JavaScript calls
  Napi::Value Add(const Napi::CallbackInfo& info);
  Napi::Value Connect(const Napi::CallbackInfo& info);
  Napi::Value Register(Napi::Env env, int a, int b, bool connecting, bool closeOnClean, unsigned timeoutMs);
  uint32_t RegisterPair(int a, int b, bool connecting, bool closeOnClean, unsigned timeoutMs, NativeEnd hook, int* err);
  Napi::Value Abort(const Napi::CallbackInfo& info);
  Napi::Value Close(const Napi::CallbackInfo& info);
  void Stop();

  // splice_loop.cc: the loop over the pairs
  void OnInline();
  void Collect();
  void DeliverDone();
  void Wake();
  void StopTimer(Pair* p);
  void Finish(Pair* p, int err);
  void Rearm(Pair* p, int side, bool outArmed, bool inOff);
  void Sync(Pair* p, int side, bool waitOut);
  void Dispatch(const epoll_event& ev);
  void Run(Pair* p, int side, uint32_t events);
  void Loop();
  void TakeQueued();

  struct InlinePoll {
    uv_poll_t h;
    Splicer* self;
    int epfd;
    int wake;
  };

  int epfd_ = -1;
  int wake_ = -1;
  uv_loop_t* loop_ = nullptr;
  bool running_ = false;
  bool inline_ = false;
  bool finalizing_ = false;
  InlinePoll* poll_ = nullptr;
  Napi::FunctionReference onDone_;
  std::unique_ptr<Napi::AsyncContext> ctx_;
  std::vector<Done> pending_;
  std::vector<std::pair<Done, NativeEnd>> pendingNative_;  // with the pair's two descriptors in Done
  std::vector<char> copyBuf_ = std::vector<char>(kCopyMax);  // used by the one thread that pumps
  std::atomic<bool> stop_{false};
  std::thread thread_;
  Napi::ThreadSafeFunction tsfn_;
  std::mutex mu_;
  std::deque<uint32_t> aborts_;
  uint32_t nextId_ = 0;
  std::unordered_map<uint32_t, Pair*> live_;
  std::vector<Pair*> graveyard_;
};

}  // namespace pump
}  // namespace leash
