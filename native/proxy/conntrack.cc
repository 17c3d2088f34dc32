// Forgetting one TCP connection's conntrack entry, so that a reset connection leaves no translation behind.
//
// Why: the kernel keeps a connection's conntrack entry 10 s after a reset. A new SYN with the same addresses and
// ports joins that entry instead of making a new one, and so keeps the old entry's translation: the proxy's own
// upstream connection, on the source port of a subject's connection it has just refused, was redirected back to
// the subject's listener. The proxy therefore deletes the entry of each connection it resets.
//
// One fixed ctnetlink message (IPCTNL_MSG_CT_DELETE by tuple) on one NETLINK_NETFILTER socket: libnetfilter_conntrack
// would add a build and package dependency for these forty lines.
#include "conntrack.h"

#include <arpa/inet.h>
#include <linux/netfilter/nfnetlink.h>
#include <linux/netfilter/nfnetlink_conntrack.h>
#include <linux/netlink.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <vector>

#include "errors.h"
#include "nlmsg.h"

namespace leash {

namespace {

int g_sock = -1;
uint32_t g_seq = 0;

/** The endpoint as an address family and raw bytes; an IPv4-mapped IPv6 address is IPv4 (so is its entry). */
bool Raw(const sockaddr_storage& ss, int* family, unsigned char addr[16], uint16_t* port) {
  if (ss.ss_family == AF_INET) {
    const auto* s = reinterpret_cast<const sockaddr_in*>(&ss);
    *family = AF_INET;
    std::memcpy(addr, &s->sin_addr, 4);
    *port = s->sin_port;
    return true;
  }
  if (ss.ss_family == AF_INET6) {
    const auto* s = reinterpret_cast<const sockaddr_in6*>(&ss);
    *port = s->sin6_port;
    if (IN6_IS_ADDR_V4MAPPED(&s->sin6_addr)) {
      *family = AF_INET;
      std::memcpy(addr, s->sin6_addr.s6_addr + 12, 4);
    } else {
      *family = AF_INET6;
      std::memcpy(addr, &s->sin6_addr, 16);
    }
    return true;
  }
  return false;
}

}  // namespace

/**
 * conntrackRequest(fd, direction) -> Buffer
 * The delete request for the entry of a connected TCP socket's connection, by the tuple of the packets the socket
 * sends (local -> peer): that is the entry's original tuple for a connection this process made ("orig") and its
 * reply tuple for one redirected to this process ("reply"). Built while the socket is open; sent after it is reset.
 */
Napi::Value ConntrackRequest(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  if (info.Length() < 2 || !info[0].IsNumber() || !info[1].IsString())
    return Usage(env, "conntrackRequest(fd: number, direction: 'orig' | 'reply')");
  int fd = info[0].As<Napi::Number>().Int32Value();
  std::string dir = info[1].As<Napi::String>().Utf8Value();
  if (dir != "orig" && dir != "reply") return Usage(env, "conntrackRequest(fd: number, direction: 'orig' | 'reply')");
  sockaddr_storage l{}, p{};
  socklen_t ll = sizeof l, pl = sizeof p;
  if (getsockname(fd, reinterpret_cast<sockaddr*>(&l), &ll) != 0) {
    ErrnoError(env, errno, "getsockname").ThrowAsJavaScriptException();
    return env.Undefined();
  }
  if (getpeername(fd, reinterpret_cast<sockaddr*>(&p), &pl) != 0) {
    ErrnoError(env, errno, "getpeername").ThrowAsJavaScriptException();
    return env.Undefined();
  }
  int lf = 0, pf = 0;
  unsigned char la[16], pa[16];
  uint16_t lp = 0, pp = 0;
  if (!Raw(l, &lf, la, &lp) || !Raw(p, &pf, pa, &pp) || lf != pf) {
    ErrnoError(env, EAFNOSUPPORT, "conntrackRequest").ThrowAsJavaScriptException();
    return env.Undefined();
  }
  NlMsg m((NFNL_SUBSYS_CTNETLINK << 8) | IPCTNL_MSG_CT_DELETE, NLM_F_REQUEST | NLM_F_ACK, lf);
  size_t tuple = m.Open(dir == "orig" ? CTA_TUPLE_ORIG : CTA_TUPLE_REPLY);
  size_t ip = m.Open(CTA_TUPLE_IP);
  size_t alen = lf == AF_INET ? 4 : 16;
  m.Attr(lf == AF_INET ? CTA_IP_V4_SRC : CTA_IP_V6_SRC, la, alen);
  m.Attr(lf == AF_INET ? CTA_IP_V4_DST : CTA_IP_V6_DST, pa, alen);
  m.Close(ip);
  size_t proto = m.Open(CTA_TUPLE_PROTO);
  uint8_t tcp = IPPROTO_TCP;
  m.Attr(CTA_PROTO_NUM, &tcp, 1);
  m.Attr(CTA_PROTO_SRC_PORT, &lp, 2);
  m.Attr(CTA_PROTO_DST_PORT, &pp, 2);
  m.Close(proto);
  m.Close(tuple);
  std::vector<char>& b = m.Done();
  return Napi::Buffer<char>::Copy(env, b.data(), b.size());
}

/**
 * conntrackDelete(request) -> 0 | errno name
 * Sends one request from conntrackRequest and reads the kernel's answer: 0 when the entry was deleted, "ENOENT"
 * when there was none (it had expired, or conntrack does not track this namespace), another errno name otherwise.
 */
Napi::Value ConntrackDelete(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  if (info.Length() < 1 || !info[0].IsBuffer()) return Usage(env, "conntrackDelete(request: Buffer)");
  auto req = info[0].As<Napi::Buffer<char>>();
  if (req.Length() < NLMSG_HDRLEN) return Usage(env, "conntrackDelete(request: Buffer)");
  if (g_sock < 0) {
    g_sock = socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, NETLINK_NETFILTER);
    if (g_sock < 0) return Napi::String::New(env, ErrnoName(errno));
  }
  auto* h = reinterpret_cast<nlmsghdr*>(req.Data());
  h->nlmsg_seq = ++g_seq;
  sockaddr_nl k{};
  k.nl_family = AF_NETLINK;
  if (sendto(g_sock, req.Data(), req.Length(), 0, reinterpret_cast<sockaddr*>(&k), sizeof k) < 0)
    return Napi::String::New(env, ErrnoName(errno));
  // The kernel answers inside sendto; a stale answer (an earlier request's, after an error) is skipped by seq.
  alignas(nlmsghdr) char ans[512];
  for (;;) {
    ssize_t n = recv(g_sock, ans, sizeof ans, MSG_DONTWAIT);
    if (n < 0) {
      if (errno == EINTR) continue;
      return Napi::String::New(env, ErrnoName(errno));
    }
    for (auto* r = reinterpret_cast<nlmsghdr*>(ans); NLMSG_OK(r, static_cast<unsigned>(n)); r = NLMSG_NEXT(r, n)) {
      if (r->nlmsg_seq != g_seq || r->nlmsg_type != NLMSG_ERROR) continue;
      int err = -reinterpret_cast<nlmsgerr*>(NLMSG_DATA(r))->error;
      if (err == 0) return Napi::Number::New(env, 0);
      return Napi::String::New(env, ErrnoName(err));
    }
  }
}

}  // namespace leash
