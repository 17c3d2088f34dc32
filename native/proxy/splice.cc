// The proxy's data path. Copying each byte of an allowed connection through JavaScript halves bulk
// throughput (measured in the lab: a Node pipe reaches about half of a direct connection), so once a
// connection is decided, both directions are moved by one native epoll loop shared by every connection:
// a connection's first small messages by recv/send through one buffer, and from the first read that fills
// it on, socket -> pipe -> socket with splice(2). JavaScript keeps the two sockets open (reading
// stopped) and is told once, through a ThreadSafeFunction, when both directions have finished or one
// has failed; only then does it close them, so this thread never touches a descriptor that JS closed.
#include "splice.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>
#include <uv.h>

#include <atomic>
#include <cstdio>
#include <cstring>
#include <memory>
#include <cerrno>
#include <cstdint>
#include <deque>
#include <mutex>
#include <thread>
#include <unordered_map>
#include <vector>

#include "errors.h"
#include "sockopt.h"

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
  // A direction starts by copying (recv/send through a buffer of the pump's) and turns to splice(2) once a read
  // fills that buffer: a connection's first messages (a TLS handshake) are small, and for them a copy costs two
  // calls where splice costs three (in, out, and the read that finds the socket empty). A short recv() means the
  // socket was emptied, so no read to EAGAIN follows: with EPOLLET the next arrival is a new edge. Only a FIN that
  // came with the data (EPOLLRDHUP) has no edge of its own, so once one is seen the direction reads on to EOF.
  bool copy = true;
  bool finSeen = false;
  // TCP urgent data waits in `in` (EPOLLPRI). Reads stop at its mark: recv() returns the bytes before it (a short
  // read that has not emptied the socket) and skips the urgent byte on the next call, while splice(2) never reads
  // past the mark at all (tcp_read_sock stops there and says EAGAIN for good). So from EPOLLPRI on, the direction
  // copies and reads on to EAGAIN, which means the mark was passed; then it may turn to splice again. The urgent
  // byte itself is not relayed (it is out of band; nginx drops it too), the bytes around it are.
  bool urgent = false;
  // The last Pump returned kWaitOut: a writable event on `out` is news for this direction only then.
  bool blocked = false;
  // Bytes read but not yet accepted by `out` (it would block): at most one buffer, held only while `out` is full.
  std::unique_ptr<char[]> pend;
  size_t pendOff = 0;
  size_t pendLen = 0;
};

// The copy buffer: a full read of it means bulk, and the direction turns to splice.
constexpr size_t kCopyMax = 16 * 1024;

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
  // A pair made by connect(): the upstream (b) is still connecting; the client's bytes wait in its socket.
  bool connecting = false;
  bool connected = true;
  // connect(..., closeOnClean): a pair that ends cleanly has both descriptors closed here (no EPOLL_CTL_DEL,
  // no call back into JavaScript to do it); any other end leaves them to the caller, which may reset them.
  bool closeOnClean = false;
  // Inline mode: the connect's time limit, a timer on Node's loop (no setsockopt to set and clear it).
  uv_timer_t* timer = nullptr;
  class Splicer* owner = nullptr;
};

struct Done {
  uint32_t id;
  int err;
  double ab;
  double ba;
  bool connected;
  bool closed;
};

// kBulk (PumpCopy only): a read filled the copy buffer; the direction goes on by splice.
enum class Step { kWaitIn, kWaitOut, kDone, kError, kBulk };

// An event's data: the pair, and in the low bit which of its sockets (0: a, the client; 1: b, the upstream).
inline uint64_t Tag(const void* p, int side) { return reinterpret_cast<uintptr_t>(p) | static_cast<uint64_t>(side); }

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


/** send() until `len` bytes are out or `out` would block; the count sent, or -1 with errno for a failure. */
ssize_t SendSome(int out, const char* buf, size_t len) {
  size_t off = 0;
  while (off < len) {
    ssize_t n = send(out, buf + off, len - off, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n > 0) {
      off += static_cast<size_t>(n);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno == EAGAIN) break;
    if (n == 0) errno = EPIPE;
    return -1;
  }
  return static_cast<ssize_t>(off);
}

/** The copy mode of Pump (see Dir). `buf` is the pump's kCopyMax buffer. */
Step PumpCopy(Dir& d, char* buf, int* err) {
  if (d.pendLen > 0) {
    ssize_t w = SendSome(d.out, d.pend.get() + d.pendOff, d.pendLen);
    if (w < 0) {
      *err = errno;
      return Step::kError;
    }
    d.bytes += static_cast<uint64_t>(w);
    d.pendOff += static_cast<size_t>(w);
    d.pendLen -= static_cast<size_t>(w);
    if (d.pendLen > 0) return Step::kWaitOut;
    d.pend.reset();
    d.pendOff = 0;
  }
  for (;;) {
    if (d.eofIn) {
      shutdown(d.out, SHUT_WR);
      d.done = true;
      return Step::kDone;
    }
    ssize_t n = recv(d.in, buf, kCopyMax, MSG_DONTWAIT);
    if (n == 0) {
      d.eofIn = true;
      continue;
    }
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN) {
        d.urgent = false;  // everything, the urgent mark included, has been read
        return Step::kWaitIn;
      }
      *err = errno;
      return Step::kError;
    }
    ssize_t w = SendSome(d.out, buf, static_cast<size_t>(n));
    if (w < 0) {
      *err = errno;
      return Step::kError;
    }
    d.bytes += static_cast<uint64_t>(w);
    if (w < n) {
      // `out` is full: the rest waits here (at most one buffer) and nothing more is read until it is gone.
      d.pendLen = static_cast<size_t>(n - w);
      d.pend.reset(new char[d.pendLen]);
      memcpy(d.pend.get(), buf + w, d.pendLen);
      d.pendOff = 0;
      return Step::kWaitOut;
    }
    if (static_cast<size_t>(n) == kCopyMax && !d.urgent) {
      d.copy = false;
      return Step::kBulk;
    }
    // A short read emptied the socket: the next bytes are a new edge. A FIN that came with them is not, and a short
    // read at an urgent mark did not empty it.
    if (!d.finSeen && !d.urgent) return Step::kWaitIn;
  }
}

/** Sends what the pipe holds: true once it is empty, else false with `*step` kWaitOut or kError. */
bool DrainPipe(Dir& d, Step* step, int* err) {
  while (d.inPipe > 0) {
    ssize_t n = splice(d.pipe[0], nullptr, d.out, nullptr, d.inPipe, SPLICE_F_MOVE | SPLICE_F_NONBLOCK);
    if (n > 0) {
      d.inPipe -= static_cast<size_t>(n);
      d.bytes += static_cast<uint64_t>(n);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno == EAGAIN) {
      *step = Step::kWaitOut;
      return false;
    }
    *err = n < 0 ? errno : EPIPE;
    *step = Step::kError;
    return false;
  }
  return true;
}

/** Moves what can be moved now; kWaitIn/kWaitOut when a socket would block, kDone at EOF (after shutdown). */
Step Pump(Dir& d, char* buf, int* err) {
  if (d.done) return Step::kDone;
  Step step = Step::kWaitOut;
  if (d.urgent && !d.copy) {
    // What the pipe holds goes first; then the copy reads past the mark (see Dir::urgent).
    if (!DrainPipe(d, &step, err)) return step;
    ReleasePipe(d);
  }
  if (d.copy || d.urgent) {
    Step s = PumpCopy(d, buf, err);
    if (s != Step::kBulk) return s;
  }
  for (;;) {
    if (!DrainPipe(d, &step, err)) return step;
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
                       {InstanceMethod("add", &Splicer::Add), InstanceMethod("connect", &Splicer::Connect),
                        InstanceMethod("abort", &Splicer::Abort),
                        InstanceMethod("close", &Splicer::Close)});
  }

  /**
   * new Splicer(onDone(id, errno, bytesAtoB, bytesBtoA, connected)) starts the pump thread. `connected` is false
   * for a connect() pair whose upstream never connected (errno then says why: ECONNREFUSED, ETIMEDOUT, ...).
   */
  explicit Splicer(const Napi::CallbackInfo& info) : Napi::ObjectWrap<Splicer>(info) {
    Napi::Env env = info.Env();
    if (info.Length() < 1 || !info[0].IsFunction()) {
      Usage(env, "new Splicer(onDone: (id, errno, ab, ba, connected) => void, options?: {inline?: boolean})");
      return;
    }
    if (info.Length() > 1 && info[1].IsObject()) {
      Napi::Value v = info[1].As<Napi::Object>().Get("inline");
      inline_ = v.IsBoolean() && v.As<Napi::Boolean>().Value();
    }
    epfd_ = epoll_create1(EPOLL_CLOEXEC);
    wake_ = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (epfd_ < 0 || wake_ < 0) {
      ErrnoError(env, errno, epfd_ < 0 ? "epoll_create1" : "eventfd").ThrowAsJavaScriptException();
      return;
    }
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.u64 = 0;  // 0 = the wake-up eventfd
    epoll_ctl(epfd_, EPOLL_CTL_ADD, wake_, &ev);
    if (inline_) {
      // On Node's own loop: the pump's epoll descriptor is polled like a socket, and onDone is called directly.
      // One thread does accept, decide and splice, as nginx's worker does: no cross-thread wake-up per event
      // (each one a VM exit on this kind of machine).
      uv_loop_t*& loop = loop_;
      if (napi_get_uv_event_loop(env, &loop) != napi_ok || loop == nullptr) {
        Napi::Error::New(env, "no event loop").ThrowAsJavaScriptException();
        return;
      }
      onDone_ = Napi::Persistent(info[0].As<Napi::Function>());
      ctx_ = std::make_unique<Napi::AsyncContext>(env, "leash-splice");
      poll_ = new InlinePoll();
      poll_->self = this;
      poll_->epfd = epfd_;
      poll_->wake = wake_;
      uv_poll_init(loop, &poll_->h, epfd_);
      poll_->h.data = poll_;
      uv_poll_start(&poll_->h, UV_READABLE, [](uv_poll_t* h, int, int) {
        auto* ip = static_cast<InlinePoll*>(h->data);
        if (ip->self) ip->self->OnInline();
      });
      // The sockets being spliced and the proxy's listeners keep the loop alive; this must not.
      uv_unref(reinterpret_cast<uv_handle_t*>(&poll_->h));
      running_ = true;
      return;
    }
    tsfn_ = Napi::ThreadSafeFunction::New(env, info[0].As<Napi::Function>(), "leash-splice", 0, 1);
    // The sockets being spliced and the proxy's listeners keep the loop alive; this must not.
    tsfn_.Unref(env);
    thread_ = std::thread([this] { Loop(); });
    running_ = true;
  }

  ~Splicer() override {
    // Collected by the GC: no JavaScript may run from here.
    finalizing_ = true;
    Stop();
  }

 private:
  /** add(fdA, fdB) -> id. Both must be connected, non-blocking sockets that JS no longer reads. */
  Napi::Value Add(const Napi::CallbackInfo& info) {
    Napi::Env env = info.Env();
    if (info.Length() < 2 || !info[0].IsNumber() || !info[1].IsNumber()) return Usage(env, "add(fdA: number, fdB: number)");
    if (!running_) return Usage(env, "splicer is closed");
    return Register(env, info[0].As<Napi::Number>().Int32Value(), info[1].As<Napi::Number>().Int32Value(), false, false,
                    0);
  }

  /**
   * connect(fdA, ip, port, timeoutMs, closeOnClean?) -> [id, fdB]: opens a non-blocking TCP connection to ip:port
   * and splices fdA with it as soon as it is connected (what fdA already holds waits in its socket until then). The
   * connect is bounded by a timer on the loop (inline) or TCP_USER_TIMEOUT (cleared once connected); past it the
   * pair ends with ETIMEDOUT, never connected. The caller closes both descriptors after onDone, unless
   * closeOnClean is set and the pair ended cleanly (onDone's `closed`): then the pump closed them.
   */
  Napi::Value Connect(const Napi::CallbackInfo& info) {
    Napi::Env env = info.Env();
    if (info.Length() < 4 || !info[0].IsNumber() || !info[1].IsString() || !info[2].IsNumber() || !info[3].IsNumber())
      return Usage(env, "connect(fdA: number, ip: string, port: number, timeoutMs: number, closeOnClean?: boolean)");
    const bool closeOnClean = info.Length() > 4 && info[4].IsBoolean() && info[4].As<Napi::Boolean>().Value();
    if (!running_) return Usage(env, "splicer is closed");
    std::string ip = info[1].As<Napi::String>().Utf8Value();
    int port = info[2].As<Napi::Number>().Int32Value();
    unsigned timeout = info[3].As<Napi::Number>().Uint32Value();
    sockaddr_storage ss{};
    socklen_t len = 0;
    if (!ParseSockaddr(ip, port, &ss, &len)) return Usage(env, "connect(ip): an IPv4 or IPv6 literal");
    int b = socket(ss.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (b < 0) {
      ErrnoError(env, errno, "socket").ThrowAsJavaScriptException();
      return env.Undefined();
    }
    int one = 1;
    setsockopt(b, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    // On a thread of its own the limit is the kernel's (cleared once connected); inline, a timer on the loop.
    if (!inline_) setsockopt(b, IPPROTO_TCP, TCP_USER_TIMEOUT, &timeout, sizeof timeout);
    if (connect(b, reinterpret_cast<sockaddr*>(&ss), len) != 0 && errno != EINPROGRESS) {
      int err = errno;
      close(b);
      ErrnoError(env, err, "connect").ThrowAsJavaScriptException();
      return env.Undefined();
    }
    Napi::Value id = Register(env, info[0].As<Napi::Number>().Int32Value(), b, true, closeOnClean, timeout);
    if (env.IsExceptionPending()) {
      close(b);
      return env.Undefined();
    }
    Napi::Array r = Napi::Array::New(env, 2);
    r.Set(0u, id);
    r.Set(1u, Napi::Number::New(env, b));
    return r;
  }

  Napi::Value Register(Napi::Env env, int a, int b, bool connecting, bool closeOnClean, unsigned timeoutMs) {
    auto* p = new Pair();
    p->connecting = connecting;
    p->connected = !connecting;
    p->closeOnClean = closeOnClean;
    // A connecting upstream is registered for EPOLLOUT from the start: that edge is its connect completing.
    p->outArmedB = connecting;
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
    ev.events = EPOLLIN | EPOLLPRI | EPOLLRDHUP | EPOLLET;
    ev.data.u64 = Tag(p, 0);
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
    if (connecting && inline_) {
      // Inline, this is the pump's own thread: `p` is still safe to touch.
      p->owner = this;
      p->timer = new uv_timer_t;
      uv_timer_init(loop_, p->timer);
      p->timer->data = p;
      uv_timer_start(
          p->timer,
          [](uv_timer_t* t) {
            auto* p = static_cast<Pair*>(t->data);
            Splicer* self = p->owner;
            self->Finish(p, ETIMEDOUT);
            self->Collect();
          },
          timeoutMs, 0);
      uv_unref(reinterpret_cast<uv_handle_t*>(p->timer));
    }
    // From here the pump thread may already be running (and finishing) this pair: never touch `p`
    // again on this thread. A failure now is handed to the pump as an abort.
    if (connecting) ev.events |= EPOLLOUT;
    ev.data.u64 = Tag(p, 1);
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
    if (inline_) {
      std::vector<Pair*> rest;
      for (auto& kv : live_) rest.push_back(kv.second);
      for (Pair* p : rest) Finish(p, ECANCELED);
      for (Pair* p : graveyard_) delete p;
      graveyard_.clear();
      DeliverDone();
      // The descriptors close with the poll handle (it must not watch a closed descriptor).
      poll_->self = nullptr;
      uv_close(reinterpret_cast<uv_handle_t*>(&poll_->h), [](uv_handle_t* h) {
        auto* ip = static_cast<InlinePoll*>(h->data);
        close(ip->epfd);
        close(ip->wake);
        delete ip;
      });
      poll_ = nullptr;
      return;
    }
    stop_.store(true);
    Wake();
    if (thread_.joinable()) thread_.join();
    tsfn_.Release();
    close(epfd_);
    close(wake_);
  }

  /** Inline mode: the events ready now, then the onDone calls of the pairs they finished. */
  void OnInline() {
    epoll_event events[128];
    int n = epoll_wait(epfd_, events, 128, 0);
    for (int i = 0; i < n; i++) Dispatch(events[i]);
    Collect();
  }

  /** Inline mode: frees the pairs finished (after the batch that may still name them) and reports them. */
  void Collect() {
    for (Pair* p : graveyard_) delete p;
    graveyard_.clear();
    DeliverDone();
  }

  void DeliverDone() {
    if (pending_.empty() || finalizing_) {
      pending_.clear();
      return;
    }
    Napi::Env env = Env();
    Napi::HandleScope scope(env);
    std::vector<Done> batch;
    batch.swap(pending_);
    for (const Done& d : batch) {
      onDone_.MakeCallback(env.Global(),
                           {Napi::Number::New(env, d.id), Napi::Number::New(env, d.err), Napi::Number::New(env, d.ab),
                            Napi::Number::New(env, d.ba), Napi::Boolean::New(env, d.connected),
                            Napi::Boolean::New(env, d.closed)},
                           *ctx_);
      if (env.IsExceptionPending()) {
        Napi::Error e = env.GetAndClearPendingException();
        fprintf(stderr, "leash splice: onDone threw: %s\n", e.Message().c_str());
      }
    }
  }

  void Wake() {
    uint64_t one = 1;
    ssize_t r = write(wake_, &one, sizeof one);
    (void)r;
  }

  void StopTimer(Pair* p) {
    if (p->timer == nullptr) return;
    uv_timer_stop(p->timer);
    uv_close(reinterpret_cast<uv_handle_t*>(p->timer), [](uv_handle_t* h) { delete reinterpret_cast<uv_timer_t*>(h); });
    p->timer = nullptr;
  }

  void Finish(Pair* p, int err) {
    if (p->finished) return;
    p->finished = true;
    StopTimer(p);
    const bool closed = p->closeOnClean && err == 0 && p->connected;
    if (closed) {
      // The last references: closing them takes them out of the epoll set as well.
      close(p->ab.in);
      close(p->ba.in);
    } else {
      epoll_ctl(epfd_, EPOLL_CTL_DEL, p->ab.in, nullptr);
      epoll_ctl(epfd_, EPOLL_CTL_DEL, p->ba.in, nullptr);
    }
    ReleasePipe(p->ab);
    ReleasePipe(p->ba);
    {
      std::lock_guard<std::mutex> lock(mu_);
      live_.erase(p->id);
    }
    const Done done{p->id, err, static_cast<double>(p->ab.bytes), static_cast<double>(p->ba.bytes), p->connected,
                    closed};
    if (inline_) {
      pending_.push_back(done);
      graveyard_.push_back(p);
      return;
    }
    auto* d = new Done(done);
    napi_status st = tsfn_.BlockingCall(d, [](Napi::Env env, Napi::Function fn, Done* done) {
      fn.Call({Napi::Number::New(env, done->id), Napi::Number::New(env, done->err), Napi::Number::New(env, done->ab),
               Napi::Number::New(env, done->ba), Napi::Boolean::New(env, done->connected),
               Napi::Boolean::New(env, done->closed)});
      delete done;
    });
    if (st != napi_ok) delete d;
    graveyard_.push_back(p);
  }

  void ArmOut(Pair* p, int side, bool& armed) {
    if (armed) return;
    armed = true;
    epoll_event ev{};
    ev.events = EPOLLIN | EPOLLPRI | EPOLLOUT | EPOLLRDHUP | EPOLLET;
    ev.data.u64 = Tag(p, side);
    // MOD re-checks readiness: a socket that became writable in between still reports.
    epoll_ctl(epfd_, EPOLL_CTL_MOD, side == 0 ? p->ab.in : p->ba.in, &ev);
  }

  void Dispatch(const epoll_event& ev) {
    if (ev.data.u64 == 0) {
      uint64_t v;
      while (read(wake_, &v, sizeof v) > 0) {
      }
      TakeQueued();
      return;
    }
    Run(reinterpret_cast<Pair*>(ev.data.u64 & ~uint64_t{1}), static_cast<int>(ev.data.u64 & 1), ev.events);
  }

  /**
   * An event on one socket of a pair: readable moves the direction that reads it, writable the one that writes
   * it (an error or hang-up both). Each direction runs only when its own socket has news, so a small exchange
   * costs no reads of a socket that has nothing.
   */
  void Run(Pair* p, int side, uint32_t events) {
    if (p->finished) return;
    Dir& from = side == 0 ? p->ab : p->ba;  // reads this socket
    Dir& to = side == 0 ? p->ba : p->ab;    // writes to it
    const bool bad = events & (EPOLLHUP | EPOLLERR);
    if (events & (EPOLLRDHUP | EPOLLHUP)) from.finSeen = true;
    if (events & EPOLLPRI) from.urgent = true;
    bool runFrom = bad || (events & (EPOLLIN | EPOLLPRI | EPOLLRDHUP));
    // A socket armed for EPOLLOUT reports it with every event: news only for a direction that waits to write.
    bool runTo = bad || ((events & EPOLLOUT) && to.blocked);
    if (p->connecting) {
      // What the client sends waits in its socket until the upstream is connected.
      if (side == 0) return;
      if (!(events & (EPOLLOUT | EPOLLHUP | EPOLLERR))) return;
      // Connected, refused or timed out: SO_ERROR says which (and is cleared by reading it).
      int soerr = 0;
      socklen_t sl = sizeof soerr;
      getsockopt(p->ab.out, SOL_SOCKET, SO_ERROR, &soerr, &sl);
      if (soerr != 0) return Finish(p, soerr);
      if (bad && !(events & EPOLLOUT)) return Finish(p, ECONNREFUSED);
      p->connecting = false;
      p->connected = true;
      if (p->timer != nullptr) {
        StopTimer(p);
      } else {
        unsigned zero = 0;
        setsockopt(p->ab.out, IPPROTO_TCP, TCP_USER_TIMEOUT, &zero, sizeof zero);
      }
      // What the client sent meanwhile (its events were passed over), and the server's bytes if they are here
      // already (later ones are an edge of their own).
      runTo = true;
    }
    int err = 0;
    if (runFrom) {
      Step s = Pump(from, copyBuf_.data(), &err);
      if (s == Step::kError) return Finish(p, err);
      from.blocked = s == Step::kWaitOut;
      if (from.blocked) ArmOut(p, 1 - side, side == 0 ? p->outArmedB : p->outArmedA);
    }
    if (runTo) {
      Step s = Pump(to, copyBuf_.data(), &err);
      if (s == Step::kError) return Finish(p, err);
      to.blocked = s == Step::kWaitOut;
      if (to.blocked) ArmOut(p, side, side == 0 ? p->outArmedA : p->outArmedB);
    }
    if (p->ab.done && p->ba.done) Finish(p, 0);
  }

  void Loop() {
    epoll_event events[128];
    while (!stop_.load()) {
      int n = epoll_wait(epfd_, events, 128, -1);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) break;
      for (int i = 0; i < n; i++) Dispatch(events[i]);
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

}  // namespace

void InitSplice(Napi::Env env, Napi::Object exports) { exports.Set("Splicer", Splicer::Define(env)); }

}  // namespace leash
