// The connections being peeked (part of the Acceptor, acceptor_class.h): one epoll set of the acceptor's own,
// polled as one descriptor on Node's loop; MSG_PEEK leaves the bytes in the socket, SO_RCVLOWAT wakes it only when
// more than what was seen has arrived.
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

namespace leash {
namespace acceptor {

/** The peeked connections' events ready now. */
void Acceptor::OnConnEvents() {
  epoll_event events[64];
  int n = epoll_wait(ep_, events, 64, 0);
  for (int i = 0; i < n; i++) {
    auto it = conns_.find(static_cast<uint32_t>(events[i].data.u64));
    if (it == conns_.end() || !it->second->polling) continue;
    OnConnReadable(it->second, events[i].events);
  }
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

}  // namespace acceptor
}  // namespace leash
