// Socket options JavaScript cannot read: SO_ORIGINAL_DST (where a redirected
// connection was going) and SO_PEERCRED (who is on the other end of a unix socket).
#include "sockopt.h"

#include <arpa/inet.h>
#include <linux/netfilter_ipv4.h>
#include <linux/netfilter_ipv6/ip6_tables.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/un.h>

#include <cerrno>

#include "errors.h"

namespace leash {

bool ParseSockaddr(const std::string& ip, int port, sockaddr_storage* ss, socklen_t* len) {
  *ss = sockaddr_storage{};
  auto* a4 = reinterpret_cast<sockaddr_in*>(ss);
  auto* a6 = reinterpret_cast<sockaddr_in6*>(ss);
  if (inet_pton(AF_INET, ip.c_str(), &a4->sin_addr) == 1) {
    a4->sin_family = AF_INET;
    a4->sin_port = htons(static_cast<uint16_t>(port));
    *len = sizeof *a4;
    return true;
  }
  if (inet_pton(AF_INET6, ip.c_str(), &a6->sin6_addr) == 1) {
    a6->sin6_family = AF_INET6;
    a6->sin6_port = htons(static_cast<uint16_t>(port));
    *len = sizeof *a6;
    return true;
  }
  return false;
}

namespace {

bool IsV4Mapped(const in6_addr& a) { return IN6_IS_ADDR_V4MAPPED(&a); }

Napi::Object Endpoint(Napi::Env env, const sockaddr_storage& ss) {
  Napi::Object o = Napi::Object::New(env);
  char buf[INET6_ADDRSTRLEN] = {0};
  if (ss.ss_family == AF_INET) {
    const auto* s4 = reinterpret_cast<const sockaddr_in*>(&ss);
    inet_ntop(AF_INET, &s4->sin_addr, buf, sizeof buf);
    o.Set("family", Napi::Number::New(env, 4));
    o.Set("address", Napi::String::New(env, buf));
    o.Set("port", Napi::Number::New(env, ntohs(s4->sin_port)));
  } else {
    const auto* s6 = reinterpret_cast<const sockaddr_in6*>(&ss);
    inet_ntop(AF_INET6, &s6->sin6_addr, buf, sizeof buf);
    o.Set("family", Napi::Number::New(env, 6));
    o.Set("address", Napi::String::New(env, buf));
    o.Set("port", Napi::Number::New(env, ntohs(s6->sin6_port)));
  }
  return o;
}

}  // namespace

/**
 * originalDst(fd) -> {family, address, port}
 * Reads the pre-NAT destination of an accepted TCP socket. The level follows the
 * socket: SOL_IP for IPv4 and for IPv4-mapped peers on a dual-stack socket,
 * SOL_IPV6 for native IPv6 (the kernel answers ENOENT at the wrong level).
 */
Napi::Value OriginalDst(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  if (info.Length() < 1 || !info[0].IsNumber()) return Usage(env, "originalDst(fd: number)");
  int fd = info[0].As<Napi::Number>().Int32Value();

  sockaddr_storage local{};
  socklen_t llen = sizeof local;
  if (getsockname(fd, reinterpret_cast<sockaddr*>(&local), &llen) != 0) {
    ErrnoError(env, errno, "getsockname").ThrowAsJavaScriptException();
    return env.Undefined();
  }
  bool v4 = local.ss_family == AF_INET;
  if (local.ss_family == AF_INET6) {
    v4 = IsV4Mapped(reinterpret_cast<sockaddr_in6*>(&local)->sin6_addr);
  } else if (local.ss_family != AF_INET) {
    ErrnoError(env, EAFNOSUPPORT, "getsockopt").ThrowAsJavaScriptException();
    return env.Undefined();
  }

  sockaddr_storage dst{};
  socklen_t dlen = sizeof dst;
  int rc = v4 ? getsockopt(fd, SOL_IP, SO_ORIGINAL_DST, &dst, &dlen)
              : getsockopt(fd, SOL_IPV6, IP6T_SO_ORIGINAL_DST, &dst, &dlen);
  if (rc != 0) {
    ErrnoError(env, errno, "getsockopt").ThrowAsJavaScriptException();
    return env.Undefined();
  }
  return Endpoint(env, dst);
}

/** peerCred(fd) -> {pid, uid, gid} of the process on the other end of a unix socket. */
Napi::Value PeerCred(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  if (info.Length() < 1 || !info[0].IsNumber()) return Usage(env, "peerCred(fd: number)");
  int fd = info[0].As<Napi::Number>().Int32Value();
  ucred cred{};
  socklen_t len = sizeof cred;
  if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0) {
    ErrnoError(env, errno, "getsockopt").ThrowAsJavaScriptException();
    return env.Undefined();
  }
  Napi::Object o = Napi::Object::New(env);
  o.Set("pid", Napi::Number::New(env, cred.pid));
  o.Set("uid", Napi::Number::New(env, cred.uid));
  o.Set("gid", Napi::Number::New(env, cred.gid));
  return o;
}

/**
 * setMark(fd, mark): SO_MARK on a socket Node opened (a DNS forwarder's UDP socket or TCP listener, a stream-way
 * proxy listener), so the input guard lets redirected traffic reach it. Needs CAP_NET_ADMIN (or CAP_NET_RAW): an
 * agent cannot mark a socket of its own.
 */
Napi::Value SetMark(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  if (info.Length() < 2 || !info[0].IsNumber() || !info[1].IsNumber())
    return Usage(env, "setMark(fd: number, mark: number)");
  int fd = info[0].As<Napi::Number>().Int32Value();
  uint32_t mark = info[1].As<Napi::Number>().Uint32Value();
  if (setsockopt(fd, SOL_SOCKET, SO_MARK, &mark, sizeof mark) != 0) {
    ErrnoError(env, errno, "setsockopt(SO_MARK)").ThrowAsJavaScriptException();
    return env.Undefined();
  }
  return env.Undefined();
}

}  // namespace leash
