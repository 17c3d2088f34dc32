// The proxy's listeners and its peek, in native code on Node's own event loop. A connection accepted through
// net.Server costs a Socket object, a TCPWrap, stream state and a read into JavaScript before anything is
// decided; measured in the lab that was most of the proxy's ~800 us of CPU per new TLS connection against nginx's
// ~200 us. Here a listening socket is a uv_poll on the main loop: accept4, then (when JavaScript asks) a
// MSG_PEEK of the first bytes, woken again only when more than what was seen has arrived (SO_RCVLOWAT), so the
// peeked bytes stay in the socket and the splice pump moves them upstream like any other. JavaScript is called
// synchronously twice per connection (accepted, peeked) and answers with calls back: peek, release (it takes the
// descriptor: a net.Socket for the cases it handles itself, or the splice pump), or reset.
#include "acceptor.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>
#include <uv.h>

#include <cerrno>
#include <cstring>

#include "acceptor_class.h"
#include "errors.h"
#include "sockopt.h"

namespace leash {
namespace acceptor {

/**
 * new Acceptor({onAccept(tag, id, fd, localAddr, localPort, peerAddr, peerPort, dstFamily, dstAddr, dstPort,
 * dstError), onPeek(id, bytes, why) -> bool,
 * onError(tag, errno, refused)}). onPeek's `why` is "data" (return true when the bytes are enough, false to wait
 * for more), "closed" (the client ended or failed first), "timeout" or "limit"; after any but a "data" false, the peek is over.
 * onError's `refused` is how many waiting connections were reset for want of descriptors.
 */
Acceptor::Acceptor(const Napi::CallbackInfo& info) : Napi::ObjectWrap<Acceptor>(info) {
  Napi::Env env = info.Env();
  const char* usage = "new Acceptor({onAccept, onPeek, onError})";
  if (info.Length() < 1 || !info[0].IsObject()) {
    Usage(env, usage);
    return;
  }
  Napi::Object o = info[0].As<Napi::Object>();
  Napi::Value a = o.Get("onAccept"), p = o.Get("onPeek"), e = o.Get("onError");
  if (!a.IsFunction() || !p.IsFunction() || !e.IsFunction()) {
    Usage(env, usage);
    return;
  }
  onAccept_ = Napi::Persistent(a.As<Napi::Function>());
  onPeek_ = Napi::Persistent(p.As<Napi::Function>());
  onError_ = Napi::Persistent(e.As<Napi::Function>());
  if (napi_get_uv_event_loop(env, &loop_) != napi_ok || loop_ == nullptr) {
    Napi::Error::New(env, "no event loop").ThrowAsJavaScriptException();
    return;
  }
  ctx_ = std::make_unique<Napi::AsyncContext>(env, "leash-acceptor");
  scratch_.resize(64 * 1024);
  reserveFd_ = open("/dev/null", O_RDONLY | O_CLOEXEC);
  // Connections being peeked are watched in an epoll set of the acceptor's own, polled as one descriptor on
  // Node's loop: a uv_poll per connection cost seven calls (libuv probes, re-adds and removes it twice), this
  // one costs two (EPOLL_CTL_ADD, EPOLL_CTL_DEL).
  ep_ = epoll_create1(EPOLL_CLOEXEC);
  if (ep_ < 0) {
    ErrnoError(env, errno, "epoll_create1").ThrowAsJavaScriptException();
    return;
  }
  epPoll_ = new EpPoll();
  epPoll_->self = this;
  epPoll_->ep = ep_;
  uv_poll_init(loop_, &epPoll_->h, ep_);
  epPoll_->h.data = epPoll_;
  uv_poll_start(&epPoll_->h, UV_READABLE, [](uv_poll_t* h, int, int) {
    auto* ep = static_cast<EpPoll*>(h->data);
    if (ep->self) ep->self->OnConnEvents();
  });
  // A connection being peeked keeps the loop alive by its timer, not by this.
  uv_unref(reinterpret_cast<uv_handle_t*>(&epPoll_->h));
}

Acceptor::~Acceptor() {
  // Handles still open reference this object: the JS side closes before dropping it (close()).
  if (reserveFd_ >= 0) close(reserveFd_);
  // No libuv call from a finalizer: the poll handle (if close() was never called) only forgets this object.
  if (epPoll_ != nullptr) epPoll_->self = nullptr;
}

/** listen(host, port, backlog, tag) -> listener id; throws an errno error (code EADDRINUSE, ...). */
Napi::Value Acceptor::Listen(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  if (info.Length() < 4 || !info[0].IsString() || !info[1].IsNumber() || !info[2].IsNumber() || !info[3].IsNumber())
    return Usage(env, "listen(host: string, port: number, backlog: number, tag: number)");
  std::string host = info[0].As<Napi::String>().Utf8Value();
  int port = info[1].As<Napi::Number>().Int32Value();
  int backlog = info[2].As<Napi::Number>().Int32Value();
  sockaddr_storage ss{};
  socklen_t len = 0;
  if (!ParseSockaddr(host, port, &ss, &len)) return Usage(env, "listen(host): an IPv4 or IPv6 literal");
  int fd = socket(ss.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    ErrnoError(env, errno, "socket").ThrowAsJavaScriptException();
    return env.Undefined();
  }
  int one = 1;
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  if (ss.ss_family == AF_INET6) setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof one);
  if (bind(fd, reinterpret_cast<sockaddr*>(&ss), len) != 0 || listen(fd, backlog) != 0) {
    int err = errno;
    close(fd);
    ErrnoError(env, err, "listen").ThrowAsJavaScriptException();
    return env.Undefined();
  }
  auto* l = new Listener();
  l->owner = this;
  l->id = ++nextListener_;
  l->tag = info[3].As<Napi::Number>().Uint32Value();
  l->fd = fd;
  sockaddr_storage bound{};
  socklen_t bl = sizeof bound;
  getsockname(fd, reinterpret_cast<sockaddr*>(&bound), &bl);
  l->local = AddrString(bound, &l->localPort);
  l->wildcard = ss.ss_family == AF_INET
                    ? reinterpret_cast<const sockaddr_in*>(&ss)->sin_addr.s_addr == htonl(INADDR_ANY)
                    : IN6_IS_ADDR_UNSPECIFIED(&reinterpret_cast<const sockaddr_in6*>(&ss)->sin6_addr);
  l->family = ss.ss_family;
  uv_poll_init(loop_, &l->poll, fd);
  uv_timer_init(loop_, &l->backoff);
  l->poll.data = l;
  l->backoff.data = l;
  l->open = 2;
  listeners_[l->id] = l;
  StartListening(l);
  return Napi::Number::New(env, l->id);
}

Napi::Value Acceptor::Unlisten(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  if (info.Length() < 1 || !info[0].IsNumber()) return Usage(env, "unlisten(id: number)");
  auto it = listeners_.find(info[0].As<Napi::Number>().Uint32Value());
  if (it != listeners_.end()) CloseListener(it->second);
  return env.Undefined();
}

Conn* Acceptor::Find(const Napi::CallbackInfo& info) {
  if (info.Length() < 1 || !info[0].IsNumber()) return nullptr;
  auto it = conns_.find(info[0].As<Napi::Number>().Uint32Value());
  return it == conns_.end() ? nullptr : it->second;
}

/** peek(id, maxBytes, timeoutMs): onPeek is called when bytes arrive, the client closes, or the time is up. */
Napi::Value Acceptor::Peek(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  if (info.Length() < 3 || !info[1].IsNumber() || !info[2].IsNumber())
    return Usage(env, "peek(id: number, maxBytes: number, timeoutMs: number)");
  Conn* c = Find(info);
  if (!c || ep_ < 0) return Napi::Boolean::New(env, false);
  size_t max = static_cast<size_t>(info[1].As<Napi::Number>().Int64Value());
  c->maxBytes = max < 1 ? 1 : (max > scratch_.size() ? scratch_.size() : max);
  if (!c->polling) {
    // Level-triggered, as a uv_poll is: data not taken stays reported. The id, not the pointer: an event may
    // still be in a batch after a callback dropped its connection.
    epoll_event ev{};
    ev.events = EPOLLIN | EPOLLRDHUP;
    ev.data.u64 = c->id;
    if (epoll_ctl(ep_, EPOLL_CTL_ADD, c->fd, &ev) != 0) {
      ErrnoError(env, errno, "epoll_ctl").ThrowAsJavaScriptException();
      return env.Undefined();
    }
    c->polling = true;
  }
  if (!c->timerInit) {
    uv_timer_init(loop_, &c->timer);
    c->timer.data = c;
    c->timerInit = true;
    c->open++;
  }
  uv_timer_start(
      &c->timer,
      [](uv_timer_t* t) {
        auto* c = static_cast<Conn*>(t->data);
        c->owner->PeekOver(c, "timeout", c->seen);
      },
      static_cast<uint64_t>(info[2].As<Napi::Number>().Int64Value()), 0);
  return Napi::Boolean::New(env, true);
}

/**
 * release(id, consume) -> fd: the descriptor is the caller's from here. `consume` bytes (already peeked) are read
 * off first, for a caller that writes them upstream itself; 0 leaves them in the socket (the splice pump sends them).
 */
Napi::Value Acceptor::Release(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  if (info.Length() < 2 || !info[1].IsNumber()) return Usage(env, "release(id: number, consume: number)");
  Conn* c = Find(info);
  if (!c) return Napi::Number::New(env, -1);
  int fd = c->fd;
  size_t want = static_cast<size_t>(info[1].As<Napi::Number>().Int64Value());
  while (want > 0) {
    ssize_t n = recv(fd, scratch_.data(), want > scratch_.size() ? scratch_.size() : want, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    want -= static_cast<size_t>(n);
  }
  Drop(c);
  return Napi::Number::New(env, fd);
}

/** reset(id): the connection is refused with a TCP reset (SO_LINGER 0) and closed. */
Napi::Value Acceptor::Reset(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  Conn* c = Find(info);
  if (!c) return Napi::Boolean::New(env, false);
  int fd = c->fd;
  Drop(c);
  ResetClose(fd);
  return Napi::Boolean::New(env, true);
}

/** close(): every listener closed, every connection not yet released reset. */
Napi::Value Acceptor::Close(const Napi::CallbackInfo& info) {
  std::vector<Listener*> ls;
  for (auto& kv : listeners_) ls.push_back(kv.second);
  for (Listener* l : ls) CloseListener(l);
  std::vector<Conn*> cs;
  for (auto& kv : conns_) cs.push_back(kv.second);
  for (Conn* c : cs) {
    int fd = c->fd;
    Drop(c);
    ResetClose(fd);
  }
  CloseEp();
  return info.Env().Undefined();
}

void Acceptor::CloseEp() {
  if (epPoll_ == nullptr) return;
  // The epoll descriptor closes with its poll handle (libuv must not watch a closed descriptor).
  epPoll_->self = nullptr;
  ep_ = -1;
  uv_close(reinterpret_cast<uv_handle_t*>(&epPoll_->h), [](uv_handle_t* h) {
    auto* ep = static_cast<EpPoll*>(h->data);
    close(ep->ep);
    delete ep;
  });
  epPoll_ = nullptr;
}

/** Calls into JavaScript from a libuv callback, with Node's callback scope (microtasks run after it). */
Napi::Value Acceptor::Call(Napi::FunctionReference& fn, const std::initializer_list<napi_value>& args) {
  Napi::Env env = Env();
  Napi::Value r = fn.MakeCallback(env.Global(), args, *ctx_);
  if (env.IsExceptionPending()) {
    // An exception in a callback is the proxy's bug; it must not unwind through libuv.
    Napi::Error e = env.GetAndClearPendingException();
    fprintf(stderr, "leash acceptor: callback threw: %s\n", e.Message().c_str());
    return env.Undefined();
  }
  return r;
}

namespace {

/** resetClose(fd): SO_LINGER 0 and close, so the peer gets a reset (a descriptor JavaScript holds as a number). */
Napi::Value ResetCloseJs(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  if (info.Length() < 1 || !info[0].IsNumber()) return Usage(env, "resetClose(fd: number)");
  int fd = info[0].As<Napi::Number>().Int32Value();
  if (fd >= 0) ResetClose(fd);
  return env.Undefined();
}

}  // namespace

}  // namespace acceptor

void InitAcceptor(Napi::Env env, Napi::Object exports) {
  exports.Set("Acceptor", acceptor::Acceptor::Define(env));
  exports.Set("resetClose", Napi::Function::New(env, acceptor::ResetCloseJs, "resetClose"));
}

}  // namespace leash
