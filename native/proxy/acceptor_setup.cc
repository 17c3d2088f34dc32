// The Acceptor's life and its listeners (acceptor_class.h): construction (its epoll set for connections being
// peeked, polled as one descriptor on Node's loop), listen/unlisten, close; and resetClose for descriptors JavaScript
// holds as numbers.
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
  if (logFd_ >= 0) close(logFd_);
  shared_->self = nullptr;
  // No libuv call from a finalizer: the poll handle (if close() was never called) only forgets this object.
  if (epPoll_ != nullptr) epPoll_->self = nullptr;
}

/**
 * listen(host, port, backlog, tag, mark?) -> listener id; throws an errno error (code EADDRINUSE, ...). `mark` is the
 * socket's SO_MARK, set before bind: Leash's input guard lets a redirected connection reach only a socket carrying it.
 */
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
  // Inherited by every accepted socket (Linux copies it at accept): one call per listener, none per connection.
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  if (info.Length() >= 5 && info[4].IsNumber()) {
    uint32_t mark = info[4].As<Napi::Number>().Uint32Value();
    if (setsockopt(fd, SOL_SOCKET, SO_MARK, &mark, sizeof mark) != 0) {
      int err = errno;
      close(fd);
      ErrnoError(env, err, "setsockopt(SO_MARK)").ThrowAsJavaScriptException();
      return env.Undefined();
    }
  }
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

void Acceptor::CloseListener(Listener* l) {
  if (l->closing) return;
  l->closing = true;
  listeners_.erase(l->id);
  auto done = [](uv_handle_t* h) {
    auto* l = static_cast<Listener*>(h->data);
    if (--l->open == 0) {
      close(l->fd);
      delete l;
    }
  };
  uv_close(reinterpret_cast<uv_handle_t*>(&l->poll), done);
  uv_close(reinterpret_cast<uv_handle_t*>(&l->backoff), done);
}

/** close(): every listener closed, every connection not yet released reset. */
Napi::Value Acceptor::Close(const Napi::CallbackInfo& info) {
  // Native pairs still spliced end without this object (OnPairEnd closes their descriptors).
  fastOn_ = false;
  shared_->self = nullptr;
  UseLogFd(-1);  // writes what is left
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
