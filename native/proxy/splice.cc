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

#include <cerrno>

#include "errors.h"
#include "sockopt.h"
#include "splicer.h"

namespace leash {
namespace pump {

/**
 * new Splicer(onDone(id, errno, bytesAtoB, bytesBtoA, connected)) starts the pump thread. `connected` is false
 * for a connect() pair whose upstream never connected (errno then says why: ECONNREFUSED, ETIMEDOUT, ...).
 */
namespace {
const napi_type_tag kSplicerTag = {0x6c6561736873706cULL, 0x7370696365727331ULL};
}  // namespace

bool Splicer::IsSplicer(Napi::Object o) { return o.CheckTypeTag(&kSplicerTag); }

Splicer::Splicer(const Napi::CallbackInfo& info) : Napi::ObjectWrap<Splicer>(info) {
  Napi::Env env = info.Env();
  info.This().As<Napi::Object>().TypeTag(&kSplicerTag);
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

Splicer::~Splicer() {
  // Collected by the GC: no JavaScript may run from here.
  finalizing_ = true;
  Stop();
}

/** add(fdA, fdB) -> id. Both must be connected, non-blocking sockets that JS no longer reads. */
Napi::Value Splicer::Add(const Napi::CallbackInfo& info) {
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
Napi::Value Splicer::Connect(const Napi::CallbackInfo& info) {
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

Napi::Value Splicer::Register(Napi::Env env, int a, int b, bool connecting, bool closeOnClean, unsigned timeoutMs) {
  int err = 0;
  uint32_t id = RegisterPair(a, b, connecting, closeOnClean, timeoutMs, NativeEnd{}, &err);
  if (id == 0) {
    ErrnoError(env, err, "epoll_ctl").ThrowAsJavaScriptException();
    return env.Undefined();
  }
  return Napi::Number::New(env, id);
}

uint32_t Splicer::RegisterPair(int a, int b, bool connecting, bool closeOnClean, unsigned timeoutMs, NativeEnd hook,
                               int* err) {
  auto* p = new Pair();
  p->connecting = connecting;
  p->connected = !connecting;
  p->closeOnClean = closeOnClean;
  p->hook = std::move(hook);
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
    if (p->id == 0) p->id = ++nextId_;  // 0 means failure to native callers
    live_[p->id] = p;
  }
  const uint32_t id = p->id;
  // Registered from this thread (epoll_ctl is thread-safe): no wake-up of the pump thread per
  // connection. EPOLLET + ADD reports data already waiting, so nothing is missed.
  epoll_event ev{};
  ev.events = EPOLLIN | EPOLLPRI | EPOLLRDHUP | EPOLLET;
  ev.data.u64 = Tag(p, 0);
  if (epoll_ctl(epfd_, EPOLL_CTL_ADD, a, &ev) != 0) {
    *err = errno;
    {
      std::lock_guard<std::mutex> lock(mu_);
      live_.erase(id);
    }
    ReleasePipe(p->ab);
    ReleasePipe(p->ba);
    delete p;
    return 0;
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
  return id;
}

uint32_t Splicer::ConnectNative(int a, const sockaddr_storage& ss, socklen_t len, unsigned timeoutMs, NativeEnd hook,
                                int* err) {
  if (!Inline()) {
    *err = EINVAL;
    return 0;
  }
  int b = socket(ss.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (b < 0) {
    *err = errno;
    return 0;
  }
  int one = 1;
  setsockopt(b, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  if (connect(b, reinterpret_cast<const sockaddr*>(&ss), len) != 0 && errno != EINPROGRESS) {
    *err = errno;
    close(b);
    return 0;
  }
  uint32_t id = RegisterPair(a, b, true, true, timeoutMs, std::move(hook), err);
  if (id == 0) close(b);
  return id;
}

void Splicer::AbortId(uint32_t id) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    aborts_.push_back(id);
  }
  Wake();
}

Napi::Value Splicer::Abort(const Napi::CallbackInfo& info) {
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
Napi::Value Splicer::Close(const Napi::CallbackInfo& info) {
  Stop();
  return info.Env().Undefined();
}

void Splicer::Stop() {
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

}  // namespace pump

void InitSplice(Napi::Env env, Napi::Object exports) { exports.Set("Splicer", pump::Splicer::Define(env)); }

}  // namespace leash
