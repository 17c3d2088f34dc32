// The proxy's data path. Copying each byte of an allowed connection through JavaScript halves bulk
// throughput (measured in the lab: a Node pipe reaches about half of a direct connection), so once a
// connection is decided, both directions are moved socket -> pipe -> socket with splice(2) by one
// native epoll thread shared by every connection. JavaScript keeps the two sockets open (reading
// stopped) and is told once, through a ThreadSafeFunction, when both directions have finished or one
// has failed; only then does it close them, so this thread never touches a descriptor that JS closed.
#include "splice.h"

#include <fcntl.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdint>
#include <deque>
#include <mutex>
#include <thread>
#include <unordered_map>
#include <vector>

#include "errors.h"

namespace leash {

namespace {

// Pipes start at the default 64 KiB and grow to 1 MiB once a direction has moved that much: growing
// every pipe up front cost ~190 us per connection (measured), which is most of a short connection's cost.
constexpr int kPipeSize = 1 << 20;
constexpr uint64_t kGrowAfter = 1 << 20;

/**
 * One direction: in -> pipe -> out. Half-close: EOF on `in` becomes shutdown(out, SHUT_WR). The pipe is held
 * only while it holds bytes (the out side would block): an idle direction holds none, so a spliced connection
 * costs its two sockets, not six descriptors, and the pipes in use are bounded by the directions in flight.
 */
struct Dir {
  int in = -1;
  int out = -1;
  int pipe[2] = {-1, -1};
  size_t cap = 65536;
  size_t inPipe = 0;
  bool eofIn = false;
  bool done = false;
  bool growTried = false;
  uint64_t bytes = 0;
};

struct Pair {
  uint32_t id = 0;
  // EPOLLOUT is armed on a socket only once a write to it would block: registered for it up front, every
  // new connection would wake the pump thread at once for sockets that are simply writable.
  bool outArmedA = false;
  bool outArmedB = false;
  Dir ab;
  Dir ba;
  int err = 0;
  bool finished = false;
};

struct Done {
  uint32_t id;
  int err;
  double ab;
  double ba;
};

enum class Step { kWaitIn, kWaitOut, kDone, kError };

// Empty pipes are shared: a direction takes one from the pool when it has bytes to move and gives it back
// as soon as it is empty again. The pool is bounded; pipe2() and close() per transfer would otherwise be a
// measurable part of a short connection's cost on this kind of VM.
constexpr size_t kPoolMax = 128;
struct PooledPipe {
  int fds[2];
  size_t cap;
};
std::mutex poolMu;
std::vector<PooledPipe> pool;

bool OpenPipe(Dir& d) {
  {
    std::lock_guard<std::mutex> lock(poolMu);
    if (!pool.empty()) {
      PooledPipe p = pool.back();
      pool.pop_back();
      d.pipe[0] = p.fds[0];
      d.pipe[1] = p.fds[1];
      d.cap = p.cap;
      return true;
    }
  }
  d.cap = 65536;
  return pipe2(d.pipe, O_CLOEXEC | O_NONBLOCK) == 0;
}

/** Returns an empty pipe to the pool (or closes it); a pipe holding bytes is never reused. */
void ReleasePipe(Dir& d) {
  if (d.pipe[0] >= 0 && d.inPipe == 0) {
    std::lock_guard<std::mutex> lock(poolMu);
    if (pool.size() < kPoolMax) {
      pool.push_back({{d.pipe[0], d.pipe[1]}, d.cap});
      d.pipe[0] = d.pipe[1] = -1;
      return;
    }
  }
  for (int& fd : d.pipe) {
    if (fd >= 0) close(fd);
    fd = -1;
  }
}

void MaybeGrow(Dir& d) {
  if (d.growTried || d.bytes < kGrowAfter || d.cap >= static_cast<size_t>(kPipeSize)) return;
  int got = fcntl(d.pipe[1], F_SETPIPE_SZ, kPipeSize);
  if (got > 0) d.cap = static_cast<size_t>(got);
  else d.growTried = true;  // over the user's pipe-buffer limit: keep the size it has
}


/** Moves what can be moved now; kWaitIn/kWaitOut when a socket would block, kDone at EOF (after shutdown). */
Step Pump(Dir& d, int* err) {
  if (d.done) return Step::kDone;
  for (;;) {
    while (d.inPipe > 0) {
      ssize_t n = splice(d.pipe[0], nullptr, d.out, nullptr, d.inPipe, SPLICE_F_MOVE | SPLICE_F_NONBLOCK);
      if (n > 0) {
        d.inPipe -= static_cast<size_t>(n);
        d.bytes += static_cast<uint64_t>(n);
        continue;
      }
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && errno == EAGAIN) return Step::kWaitOut;
      *err = n < 0 ? errno : EPIPE;
      return Step::kError;
    }
    if (d.eofIn) {
      shutdown(d.out, SHUT_WR);
      d.done = true;
      ReleasePipe(d);
      return Step::kDone;
    }
    // Out of descriptors (EMFILE/ENFILE) or memory: this connection fails, the pump and the others go on.
    if (d.pipe[0] < 0 && !OpenPipe(d)) {
      *err = errno;
      return Step::kError;
    }
    MaybeGrow(d);
    ssize_t n = splice(d.in, nullptr, d.pipe[1], nullptr, d.cap, SPLICE_F_MOVE | SPLICE_F_NONBLOCK);
    if (n > 0) {
      d.inPipe += static_cast<size_t>(n);
    } else if (n == 0) {
      d.eofIn = true;
    } else if (errno == EINTR) {
      continue;
    } else if (errno == EAGAIN) {
      ReleasePipe(d);  // empty here: it is the socket that has nothing; the pipe goes back to the pool
      return Step::kWaitIn;
    } else {
      *err = errno;
      return Step::kError;
    }
  }
}

class Splicer : public Napi::ObjectWrap<Splicer> {
 public:
  static Napi::Function Define(Napi::Env env) {
    return DefineClass(env, "Splicer",
                       {InstanceMethod("add", &Splicer::Add), InstanceMethod("abort", &Splicer::Abort),
                        InstanceMethod("close", &Splicer::Close)});
  }

  /** new Splicer(onDone(id, errno, bytesAtoB, bytesBtoA)) starts the pump thread. */
  explicit Splicer(const Napi::CallbackInfo& info) : Napi::ObjectWrap<Splicer>(info) {
    Napi::Env env = info.Env();
    if (info.Length() < 1 || !info[0].IsFunction()) {
      Usage(env, "new Splicer(onDone: (id, errno, ab, ba) => void)");
      return;
    }
    epfd_ = epoll_create1(EPOLL_CLOEXEC);
    wake_ = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (epfd_ < 0 || wake_ < 0) {
      ErrnoError(env, errno, epfd_ < 0 ? "epoll_create1" : "eventfd").ThrowAsJavaScriptException();
      return;
    }
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.ptr = nullptr;  // nullptr = the wake-up eventfd
    epoll_ctl(epfd_, EPOLL_CTL_ADD, wake_, &ev);
    tsfn_ = Napi::ThreadSafeFunction::New(env, info[0].As<Napi::Function>(), "leash-splice", 0, 1);
    // The sockets being spliced and the proxy's listeners keep the loop alive; this must not.
    tsfn_.Unref(env);
    thread_ = std::thread([this] { Loop(); });
    running_ = true;
  }

  ~Splicer() override { Stop(); }

 private:
  /** add(fdA, fdB) -> id. Both must be connected, non-blocking sockets that JS no longer reads. */
  Napi::Value Add(const Napi::CallbackInfo& info) {
    Napi::Env env = info.Env();
    if (info.Length() < 2 || !info[0].IsNumber() || !info[1].IsNumber()) return Usage(env, "add(fdA: number, fdB: number)");
    if (!running_) return Usage(env, "splicer is closed");
    int a = info[0].As<Napi::Number>().Int32Value();
    int b = info[1].As<Napi::Number>().Int32Value();
    auto* p = new Pair();
    p->ab.in = a;
    p->ab.out = b;
    p->ba.in = b;
    p->ba.out = a;
    // No pipe yet: a direction takes one from the shared pool when it first has bytes to move.
    {
      std::lock_guard<std::mutex> lock(mu_);
      p->id = ++nextId_;
      live_[p->id] = p;
    }
    const uint32_t id = p->id;
    // Registered from this thread (epoll_ctl is thread-safe): no wake-up of the pump thread per
    // connection. EPOLLET + ADD reports data already waiting, so nothing is missed.
    epoll_event ev{};
    ev.events = EPOLLIN | EPOLLRDHUP | EPOLLET;
    ev.data.ptr = p;
    if (epoll_ctl(epfd_, EPOLL_CTL_ADD, a, &ev) != 0) {
      int e = errno;
      {
        std::lock_guard<std::mutex> lock(mu_);
        live_.erase(id);
      }
      ReleasePipe(p->ab);
      ReleasePipe(p->ba);
      delete p;
      ErrnoError(env, e, "epoll_ctl").ThrowAsJavaScriptException();
      return env.Undefined();
    }
    // From here the pump thread may already be running (and finishing) this pair: never touch `p`
    // again on this thread. A failure now is handed to the pump as an abort.
    if (epoll_ctl(epfd_, EPOLL_CTL_ADD, b, &ev) != 0) {
      {
        std::lock_guard<std::mutex> lock(mu_);
        aborts_.push_back(id);
      }
      Wake();
    }
    return Napi::Number::New(env, id);
  }

  /** abort(id): finish that pair now with ECANCELED (its onDone still fires). */
  Napi::Value Abort(const Napi::CallbackInfo& info) {
    Napi::Env env = info.Env();
    if (info.Length() < 1 || !info[0].IsNumber()) return Usage(env, "abort(id: number)");
    {
      std::lock_guard<std::mutex> lock(mu_);
      aborts_.push_back(info[0].As<Napi::Number>().Uint32Value());
    }
    Wake();
    return env.Undefined();
  }

  /** close(): every live pair finishes with ECANCELED, then the thread exits. */
  Napi::Value Close(const Napi::CallbackInfo& info) {
    Stop();
    return info.Env().Undefined();
  }

  void Stop() {
    if (!running_) return;
    running_ = false;
    stop_.store(true);
    Wake();
    if (thread_.joinable()) thread_.join();
    tsfn_.Release();
    close(epfd_);
    close(wake_);
  }

  void Wake() {
    uint64_t one = 1;
    ssize_t r = write(wake_, &one, sizeof one);
    (void)r;
  }

  void Finish(Pair* p, int err) {
    if (p->finished) return;
    p->finished = true;
    epoll_ctl(epfd_, EPOLL_CTL_DEL, p->ab.in, nullptr);
    epoll_ctl(epfd_, EPOLL_CTL_DEL, p->ba.in, nullptr);
    ReleasePipe(p->ab);
    ReleasePipe(p->ba);
    {
      std::lock_guard<std::mutex> lock(mu_);
      live_.erase(p->id);
    }
    auto* d = new Done{p->id, err, static_cast<double>(p->ab.bytes), static_cast<double>(p->ba.bytes)};
    napi_status st = tsfn_.BlockingCall(d, [](Napi::Env env, Napi::Function fn, Done* done) {
      fn.Call({Napi::Number::New(env, done->id), Napi::Number::New(env, done->err), Napi::Number::New(env, done->ab),
               Napi::Number::New(env, done->ba)});
      delete done;
    });
    if (st != napi_ok) delete d;
    graveyard_.push_back(p);
  }

  void ArmOut(Pair* p, int fd, bool& armed) {
    if (armed) return;
    armed = true;
    epoll_event ev{};
    ev.events = EPOLLIN | EPOLLOUT | EPOLLRDHUP | EPOLLET;
    ev.data.ptr = p;
    // MOD re-checks readiness: a socket that became writable in between still reports.
    epoll_ctl(epfd_, EPOLL_CTL_MOD, fd, &ev);
  }

  void Run(Pair* p) {
    if (p->finished) return;
    int err = 0;
    Step a = Pump(p->ab, &err);
    if (a == Step::kError) return Finish(p, err);
    Step b = Pump(p->ba, &err);
    if (b == Step::kError) return Finish(p, err);
    if (a == Step::kWaitOut) ArmOut(p, p->ab.out, p->outArmedB);
    if (b == Step::kWaitOut) ArmOut(p, p->ba.out, p->outArmedA);
    if (a == Step::kDone && b == Step::kDone) Finish(p, 0);
  }

  void Loop() {
    epoll_event events[128];
    while (!stop_.load()) {
      int n = epoll_wait(epfd_, events, 128, -1);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) break;
      for (int i = 0; i < n; i++) {
        auto* p = static_cast<Pair*>(events[i].data.ptr);
        if (p == nullptr) {
          uint64_t v;
          while (read(wake_, &v, sizeof v) > 0) {
          }
          TakeQueued();
        } else {
          Run(p);
        }
      }
      // A pair finished in this batch may still have an event further down the same batch:
      // free it only after the batch.
      for (Pair* p : graveyard_) delete p;
      graveyard_.clear();
    }
    std::vector<Pair*> rest;
    {
      std::lock_guard<std::mutex> lock(mu_);
      for (auto& kv : live_) rest.push_back(kv.second);
    }
    for (Pair* p : rest) Finish(p, ECANCELED);
    for (Pair* p : graveyard_) delete p;
    graveyard_.clear();
  }

  void TakeQueued() {
    std::deque<uint32_t> aborts;
    {
      std::lock_guard<std::mutex> lock(mu_);
      aborts.swap(aborts_);
    }
    for (uint32_t id : aborts) {
      Pair* p = nullptr;
      {
        std::lock_guard<std::mutex> lock(mu_);
        auto it = live_.find(id);
        if (it != live_.end()) p = it->second;
      }
      if (p) Finish(p, ECANCELED);
    }
  }

  int epfd_ = -1;
  int wake_ = -1;
  bool running_ = false;
  std::atomic<bool> stop_{false};
  std::thread thread_;
  Napi::ThreadSafeFunction tsfn_;
  std::mutex mu_;
  std::deque<uint32_t> aborts_;
  uint32_t nextId_ = 0;
  std::unordered_map<uint32_t, Pair*> live_;
  std::vector<Pair*> graveyard_;
};

}  // namespace

void InitSplice(Napi::Env env, Napi::Object exports) { exports.Set("Splicer", Splicer::Define(env)); }

}  // namespace leash
