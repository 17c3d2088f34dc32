// The proxy's listening sockets (part of the Acceptor, acceptor_class.h): accept4 in bounded batches on Node's loop,
// SO_ORIGINAL_DST read at once, a spare descriptor given up to refuse what waits when the process runs out.
#include <arpa/inet.h>
#include <linux/netfilter_ipv4.h>
#include <linux/netfilter_ipv6/ip6_tables.h>
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
  // A bounded batch per wake-up: the loop's other work (decisions, timers) is not starved by a burst.
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
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
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
    conns_[c->id] = c;
    uint32_t tag = l->tag;
    Call(onAccept_, {Napi::Number::New(env, tag), Napi::Number::New(env, c->id), Napi::Number::New(env, fd),
                     Napi::String::New(env, la), Napi::Number::New(env, lport), Napi::String::New(env, pa),
                     Napi::Number::New(env, pport),
                     Napi::Number::New(env, dstErr != 0 ? 0 : dst.ss_family == AF_INET ? 4 : 6),
                     Napi::String::New(env, da), Napi::Number::New(env, dport),
                     Napi::String::New(env, dstErr != 0 ? ErrnoName(dstErr) : "")});
    // `l` may have been closed by that call (unlisten): its memory lives until its handles close, and
    // `closing` stops this loop.
  }
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

}  // namespace acceptor
}  // namespace leash
