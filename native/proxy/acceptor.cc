// The proxy's listeners and its peek, in native code on Node's own event loop. A connection accepted through
// net.Server costs a Socket object, a TCPWrap, stream state and a read into JavaScript before anything is
// decided; measured in the lab that was most of the proxy's ~800 us of CPU per new TLS connection against nginx's
// ~200 us. Here a listening socket is a uv_poll on the main loop: accept4, then (when JavaScript asks) a
// MSG_PEEK of the first bytes, woken again only when more than what was seen has arrived (SO_RCVLOWAT), so the
// peeked bytes stay in the socket and the splice pump moves them upstream like any other. JavaScript is called
// synchronously twice per connection (accepted, peeked) and answers with calls back: peek, release (it takes the
// descriptor: a net.Socket for the cases it handles itself, or the splice pump), or reset.
#include <arpa/inet.h>
#include <linux/netfilter_ipv4.h>
#include <linux/netfilter_ipv6/ip6_tables.h>
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

namespace leash {
namespace acceptor {

std::string AddrString(const sockaddr_storage& ss, int* port) {
  char buf[INET6_ADDRSTRLEN] = {0};
  if (ss.ss_family == AF_INET) {
    const auto* a = reinterpret_cast<const sockaddr_in*>(&ss);
    inet_ntop(AF_INET, &a->sin_addr, buf, sizeof buf);
    *port = ntohs(a->sin_port);
  } else if (ss.ss_family == AF_INET6) {
    const auto* a = reinterpret_cast<const sockaddr_in6*>(&ss);
    inet_ntop(AF_INET6, &a->sin6_addr, buf, sizeof buf);
    *port = ntohs(a->sin6_port);
  } else {
    *port = 0;
  }
  return buf;
}

void ResetClose(int fd) {
  linger l{1, 0};
  setsockopt(fd, SOL_SOCKET, SO_LINGER, &l, sizeof l);
  close(fd);
}

void Acceptor::StartListening(Listener* l) {
  if (l->polling || l->closing) return;
  l->polling = true;
  uv_poll_start(&l->poll, UV_READABLE, [](uv_poll_t* h, int, int) {
    auto* l = static_cast<Listener*>(h->data);
    l->owner->OnListenReadable(l);
  });
}

void Acceptor::OnListenReadable(Listener* l) {
  Napi::Env env = Env();
  Napi::HandleScope scope(env);
  // A bounded batch per wake-up: the loop's other work (decisions, timers) is not starved by a burst. One per
  // wake-up (nginx's default) saves the accept4 that ends a batch with EAGAIN, but each connection still waiting
  // then costs a turn of the loop, and strace under bench/proxy counted more epoll calls than accept4 saved.
  for (int i = 0; i < 64 && !l->closing; i++) {
    sockaddr_storage peer{};
    socklen_t pl = sizeof peer;
    int fd = accept4(l->fd, reinterpret_cast<sockaddr*>(&peer), &pl, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) {
      int err = errno;
      if (err == EAGAIN || err == EINTR || err == ECONNABORTED) {
        if (err == EAGAIN) return;
        continue;
      }
      if ((err == EMFILE || err == ENFILE) && reserveFd_ >= 0) {
        // Out of descriptors: the spare one is given up to accept what waits and reset it, so each of those
        // clients is refused at once (as libuv does for net.Server) instead of hanging in the backlog.
        close(reserveFd_);
        reserveFd_ = -1;
        int refused = 0;
        for (;;) {
          int rfd = accept4(l->fd, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
          if (rfd < 0) break;
          ResetClose(rfd);
          refused++;
        }
        reserveFd_ = open("/dev/null", O_RDONLY | O_CLOEXEC);
        Call(onError_, {Napi::Number::New(env, l->tag), Napi::Number::New(env, err), Napi::Number::New(env, refused)});
        if (refused > 0) continue;
      } else {
        Call(onError_, {Napi::Number::New(env, l->tag), Napi::Number::New(env, err), Napi::Number::New(env, 0)});
      }
      // Out of memory (or no spare descriptor): this connection waits in the backlog (or is dropped by the
      // kernel), the listener pauses 100 ms instead of spinning on a readable socket it cannot accept from.
      if (l->closing) return;
      uv_poll_stop(&l->poll);
      l->polling = false;
      uv_timer_start(
          &l->backoff,
          [](uv_timer_t* t) {
            auto* l = static_cast<Listener*>(t->data);
            StartListening(l);
          },
          100, 0);
      return;
    }
    // TCP_NODELAY comes from the listener (an accepted socket inherits it): no call here.
    // The peer came with accept4; the local address is the listener's own unless it listens on a wildcard.
    int lport = l->localPort, pport = 0;
    std::string pa = AddrString(peer, &pport);
    std::string la;
    if (l->wildcard) {
      sockaddr_storage local{};
      socklen_t ll = sizeof local;
      getsockname(fd, reinterpret_cast<sockaddr*>(&local), &ll);
      la = AddrString(local, &lport);
    } else {
      la = l->local;
    }
    // Where it was going (SO_ORIGINAL_DST, at the listener's family: an IPV6_V6ONLY listener has no
    // v4-mapped peers), read here with the rest rather than by a call back from JavaScript.
    sockaddr_storage dst{};
    socklen_t dl = sizeof dst;
    int dstErr = 0;
    if ((l->family == AF_INET ? getsockopt(fd, SOL_IP, SO_ORIGINAL_DST, &dst, &dl)
                              : getsockopt(fd, SOL_IPV6, IP6T_SO_ORIGINAL_DST, &dst, &dl)) != 0)
      dstErr = errno;
    int dport = 0;
    std::string da = dstErr == 0 ? AddrString(dst, &dport) : std::string();
    auto* c = new Conn();
    c->owner = this;
    c->id = ++nextConn_;
    c->fd = fd;
    c->tag = l->tag;
    c->la = std::move(la);
    c->lport = lport;
    c->pa = std::move(pa);
    c->pport = pport;
    c->dstFamily = dstErr != 0 ? 0 : dst.ss_family == AF_INET ? 4 : 6;
    c->da = std::move(da);
    c->dport = dport;
    if (dstErr != 0) c->dstErr = ErrnoName(dstErr);
    conns_[c->id] = c;
    if (TryFast(c)) continue;
    CallAccept(c);
    // `l` may have been closed by that call (unlisten): its memory lives until its handles close, and
    // `closing` stops this loop.
  }
}

/** Hands an accepted connection to JavaScript (onAccept): it peeks, releases or resets it. */
void Acceptor::CallAccept(Conn* c) {
  Napi::Env env = Env();
  Napi::HandleScope scope(env);
  Call(onAccept_, {Napi::Number::New(env, c->tag), Napi::Number::New(env, c->id), Napi::Number::New(env, c->fd),
                   Napi::String::New(env, c->la), Napi::Number::New(env, c->lport), Napi::String::New(env, c->pa),
                   Napi::Number::New(env, c->pport), Napi::Number::New(env, c->dstFamily),
                   Napi::String::New(env, c->da), Napi::Number::New(env, c->dport), Napi::String::New(env, c->dstErr)});
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
  if (!StartPeek(c, max, static_cast<uint64_t>(info[2].As<Napi::Number>().Int64Value()))) {
    ErrnoError(env, errno, "epoll_ctl").ThrowAsJavaScriptException();
    return env.Undefined();
  }
  return Napi::Boolean::New(env, true);
}

/** Watches `c` for its first bytes (up to maxBytes) for at most timeoutMs; false with errno when epoll refuses. */
bool Acceptor::StartPeek(Conn* c, size_t max, uint64_t timeoutMs) {
  c->maxBytes = max < 1 ? 1 : (max > scratch_.size() ? scratch_.size() : max);
  if (!c->polling) {
    // Level-triggered, as a uv_poll is: data not taken stays reported. The id, not the pointer: an event may
    // still be in a batch after a callback dropped its connection.
    epoll_event ev{};
    ev.events = EPOLLIN | EPOLLRDHUP;
    ev.data.u64 = c->id;
    if (epoll_ctl(ep_, EPOLL_CTL_ADD, c->fd, &ev) != 0) return false;
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
      timeoutMs, 0);
  return true;
}

/** The peeked connections' events ready now. */
void Acceptor::OnConnEvents() {
  epoll_event events[64];
  int n = epoll_wait(ep_, events, 64, 0);
  for (int i = 0; i < n; i++) {
    auto it = conns_.find(static_cast<uint32_t>(events[i].data.u64));
    if (it == conns_.end() || !it->second->polling) continue;
    OnConnReadable(it->second, events[i].events);
  }
  FlushLines();
}

void Acceptor::OnConnReadable(Conn* c, uint32_t events) {
  const bool failed = events & EPOLLERR;
  const bool hangup = events & (EPOLLRDHUP | EPOLLHUP);
  ssize_t n = recv(c->fd, scratch_.data(), c->maxBytes, MSG_PEEK);
  if (n < 0 && (errno == EAGAIN || errno == EINTR) && !failed && !hangup) return;
  if (n <= 0 || failed || (static_cast<size_t>(n) == c->seen && hangup)) {
    // End of stream, or an error, before the bytes were enough: what there is is final.
    return PeekOver(c, "closed", n > 0 ? static_cast<size_t>(n) : c->seen);
  }
  c->seen = static_cast<size_t>(n);
  if (c->fast) return FastPeeked(c, c->seen);
  uint32_t id = c->id;
  Napi::Env env = Env();
  Napi::HandleScope scope(env);
  Napi::Value enough = Call(onPeek_, {Napi::Number::New(env, id), Napi::Buffer<char>::Copy(env, scratch_.data(), c->seen),
                                      Napi::String::New(env, "data")});
  // The callback may have released or reset the connection.
  auto it = conns_.find(id);
  if (it == conns_.end()) return;
  if (enough.IsBoolean() && enough.As<Napi::Boolean>().Value()) return StopPeek(c);
  if (c->seen >= c->maxBytes) return PeekOver(c, "limit", c->seen);
  // Not enough: woken again only once more than what was seen is there (a FIN or an error wakes it as well).
  int lowat = static_cast<int>(c->seen + 1);
  setsockopt(c->fd, SOL_SOCKET, SO_RCVLOWAT, &lowat, sizeof lowat);
  c->lowat = true;
}

void Acceptor::StopPeek(Conn* c) {
  if (c->polling) {
    epoll_ctl(ep_, EPOLL_CTL_DEL, c->fd, nullptr);
    c->polling = false;
  }
  if (c->timerInit) uv_timer_stop(&c->timer);
  if (c->lowat) {
    int one = 1;
    setsockopt(c->fd, SOL_SOCKET, SO_RCVLOWAT, &one, sizeof one);
    c->lowat = false;
  }
}

void Acceptor::PeekOver(Conn* c, const char* why, size_t have) {
  if (c->fast) return FastFallback(c, why, have);
  StopPeek(c);
  uint32_t id = c->id;
  if (have > 0) {
    ssize_t n = recv(c->fd, scratch_.data(), have, MSG_PEEK);
    have = n > 0 ? static_cast<size_t>(n) : 0;
  }
  Napi::Env env = Env();
  Napi::HandleScope scope(env);
  Call(onPeek_, {Napi::Number::New(env, id), Napi::Buffer<char>::Copy(env, scratch_.data(), have),
                 Napi::String::New(env, why)});
}

/** Frees a connection's native state; its descriptor is the caller's (closed, reset, or handed on). */
void Acceptor::Drop(Conn* c) {
  StopPeek(c);
  conns_.erase(c->id);
  if (c->open == 0) {
    delete c;
    return;
  }
  auto done = [](uv_handle_t* h) {
    auto* c = static_cast<Conn*>(h->data);
    if (--c->open == 0) delete c;
  };
  // StopPeek took the descriptor out of the acceptor's epoll set, before anything else (a net.Socket on the
  // same descriptor, the splice pump) registers it.
  if (c->timerInit) uv_close(reinterpret_cast<uv_handle_t*>(&c->timer), done);
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

}  // namespace acceptor
}  // namespace leash
