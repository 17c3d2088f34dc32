// The native verdict path's decisions (see fastpath.h). Each step names the verdict.ts function it follows.
#include "fastpath.h"

#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>

#include <cstring>

#include "jsonline.h"

namespace leash {
namespace fast {

namespace {

constexpr size_t kMaxNames = 8192;

bool SameAddr(const NetAddr& a, const NetAddr& b) {
  return a.family == b.family && std::memcmp(a.w, b.w, sizeof a.w) == 0;
}

// isAddressRule: '[v6]...', an address or network (before a '/'), or IPv4:port. A rule it cannot read the way
// net.isIP would (a zone index) makes the caller hand the connection to JavaScript.
int IsAddressRule(const std::string& rule) {
  if (!rule.empty() && rule[0] == '[') return 1;
  if (rule.find('%') != std::string::npos) return -1;
  std::string_view host(rule);
  size_t slash = host.find('/');
  if (slash != std::string_view::npos) host = host.substr(0, slash);
  NetAddr a;
  if (ParseNetAddr(host, &a, true)) return 1;
  size_t colon = host.rfind(':');
  if (colon == std::string_view::npos || colon + 1 == host.size()) return 0;
  for (size_t i = colon + 1; i < host.size(); i++)
    if (host[i] < '0' || host[i] > '9') return 0;
  NetAddr v4;
  return ParseNetAddr(host.substr(0, colon), &v4, true) && v4.family == 4 && host.substr(0, colon).find(':') ==
                                                                                   std::string_view::npos
             ? 1
             : 0;
}

bool IsLocalhostName(const std::string& n) {
  static const char kSuffix[] = ".localhost";
  const size_t k = sizeof kSuffix - 1;
  return n == "localhost" || (n.size() > k && n.compare(n.size() - k, k, kSuffix) == 0);
}

void AppendInt(std::string* out, long v) { out->append(std::to_string(v)); }

// `{"domain":…,"ip":…,"port":…[,"upstream":…]}`: the peeked name is a normalised host name and the addresses
// inet_ntop's text, so neither needs escaping.
void AppendSubject(std::string* out, const sni::Hello& h, const Dst& d, const std::string* upstream) {
  out->append("{\"domain\":");
  if (h.hasName) out->append("\"").append(h.name).append("\"");
  else out->append("null");
  out->append(",\"ip\":\"").append(d.ip).append("\",\"port\":");
  AppendInt(out, d.port);
  if (upstream) out->append(",\"upstream\":\"").append(*upstream).append("\"");
  out->append("}");
}

// formatDecisionTail of a network line without severity, findings or approval.
std::string Tail(const Entry& e, bool allow, const NetVerdict& v, const sni::Hello& h, const Dst& d,
                 const std::string* upstream) {
  std::string t;
  t.reserve(192);
  t.append(",\"uid\":");
  AppendInt(&t, static_cast<long>(e.uid));
  t.append(",\"surface\":\"network\",\"action\":\"").append(allow ? "allow" : "block");
  t.append("\",\"reason\":\"").append(NetReasonName(v.reason)).append("\",\"subject\":");
  AppendSubject(&t, h, d, upstream);
  t.append(",\"rule\":");
  if (v.rule) AppendJsonString(&t, v.rule->data(), v.rule->size());
  else t.append("null");
  t.append("}\n");
  return t;
}

Plan Js() { return Plan{}; }

Plan Refuse(const Entry& e, const NetVerdict& v, const sni::Hello& h, const Dst& d, const std::string* upstream) {
  Plan p;
  p.step = Step::kRefuse;
  p.reason = NetReasonName(v.reason);
  p.tail = Tail(e, false, v, h, d, upstream);
  return p;
}

Plan Relay(const Entry& e, const NetVerdict& v, const sni::Hello& h, const Dst& d, const std::string& to) {
  Plan p;
  p.step = Step::kRelay;
  p.allowLine = true;
  p.reason = NetReasonName(v.reason);
  p.target = to;
  p.tail = Tail(e, true, v, h, d, to == d.ip ? nullptr : &to);
  return p;
}

bool Decided(const NetVerdict& v) {
  return v.action != NetAction::kUndecided && v.action != NetAction::kAsk && !v.wouldBlock;
}

}  // namespace

void Names::Set(const std::string& name, Answer a) {
  // Bounded: past the bound the table starts again (a miss only sends a connection to JavaScript).
  if (map_.size() >= kMaxNames && map_.find(name) == map_.end()) map_.clear();
  map_[name] = std::move(a);
}

const Names::Answer* Names::Get(const std::string& name, int64_t nowMs) const {
  auto it = map_.find(name);
  if (it == map_.end() || it->second.expiresMs <= nowMs) return nullptr;
  return &it->second;
}

void OwnAddrs::Read() {
  addrs_.clear();
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) != 0) return;
  for (ifaddrs* i = list; i; i = i->ifa_next) {
    // libuv's uv_interface_addresses (os.networkInterfaces): up and running, an address, IPv4 or IPv6.
    if (!i->ifa_addr || !(i->ifa_flags & IFF_UP) || !(i->ifa_flags & IFF_RUNNING)) continue;
    NetAddr a;
    if (i->ifa_addr->sa_family == AF_INET) {
      a.family = 4;
      a.w[3] = ntohl(reinterpret_cast<sockaddr_in*>(i->ifa_addr)->sin_addr.s_addr);
    } else if (i->ifa_addr->sa_family == AF_INET6) {
      a.family = 6;
      const uint8_t* b = reinterpret_cast<sockaddr_in6*>(i->ifa_addr)->sin6_addr.s6_addr;
      for (int k = 0; k < 4; k++)
        a.w[k] = (uint32_t(b[4 * k]) << 24) | (uint32_t(b[4 * k + 1]) << 16) | (uint32_t(b[4 * k + 2]) << 8) |
                 b[4 * k + 3];
    } else {
      continue;
    }
    addrs_.push_back(a);
  }
  freeifaddrs(list);
}

bool OwnAddrs::Has(const NetAddr& a, int64_t nowMs) {
  if (!read_ || nowMs - at_ > 5000 || nowMs < at_) {
    Read();
    read_ = true;
    at_ = nowMs;
  }
  for (const NetAddr& o : addrs_)
    if (SameAddr(o, a)) return true;
  return false;
}

bool IsLoopbackAddr(const NetAddr& a) {
  if (a.family == 4) return (a.w[3] >> 24) == 127 || a.w[3] == 0;
  if (a.family == 6) return a.w[0] == 0 && a.w[1] == 0 && a.w[2] == 0 && (a.w[3] == 0 || a.w[3] == 1);
  return true;
}

Step Arrival(const Entry& e, const Dst& d, OwnAddrs* own, int64_t nowMs) {
  // isLoopback (judged as localhost) and the listeners (not_redirected) are the JavaScript path's.
  if (IsLoopbackAddr(d.addr) || own->Has(d.addr, nowMs)) return Step::kJs;
  // An IPv4-mapped destination is spelled as IPv4 by JavaScript (plainIp): its line would differ.
  if (d.addr.family == 6 && d.addr.w[0] == 0 && d.addr.w[1] == 0 && d.addr.w[2] == 0xffff) return Step::kJs;
  NetQuery q;
  q.hasIp = true;
  q.ip = d.addr;
  q.port = d.port;
  NetVerdict v = MatchNetwork(*e.policy, q);
  if (v.action == NetAction::kUndecided || v.wouldBlock) return Step::kJs;
  // A refusal on the address alone (deny_entry, no_policy) and an early connect by address are JavaScript's.
  if (v.action == NetAction::kBlock && (v.reason == NetReason::kDenyEntry || v.reason == NetReason::kNoPolicy))
    return Step::kJs;
  if (v.action == NetAction::kAllow && (v.rule == nullptr || IsAddressRule(*v.rule) != 0)) return Step::kJs;
  return Step::kPeek;
}

Plan Decide(const Entry& e, const Dst& d, const sni::Hello& h, const Names& names, OwnAddrs* own, int64_t nowMs,
            bool told) {
  // peekVerdict: a ClientHello without ECH (ECH's refusal or its outer name is JavaScript's).
  if (h.kind != sni::Kind::kTls || h.ech) return Js();
  NetQuery q;
  q.hasName = h.hasName;
  q.name = h.name;
  q.hasIp = true;
  q.ip = d.addr;
  q.port = d.port;
  NetVerdict v = MatchNetwork(*e.policy, q);
  if (!Decided(v)) return Js();
  if (v.action == NetAction::kBlock) return Refuse(e, v, h, d, nullptr);
  // nameToResolve: an address entry or a mode default goes to the address asked for.
  if (!h.hasName || v.rule == nullptr) return Relay(e, v, h, d, d.ip);
  int addrRule = IsAddressRule(*v.rule);
  if (addrRule < 0) return Js();
  if (addrRule == 1) return Relay(e, v, h, d, d.ip);
  // destinationVerdict with resolveName's answer: localhost names and names not (freshly) resolved are JavaScript's.
  if (IsLocalhostName(h.name)) return Js();
  const Names::Answer* a = names.Get(h.name, nowMs);
  if (a == nullptr) return Js();
  const std::string* to = nullptr;
  const NetAddr* toAddr = nullptr;
  for (size_t i = 0; i < a->v4.size() && !to; i++)
    if (a->v4[i] == d.ip) to = &a->v4[i], toAddr = &a->a4[i];
  for (size_t i = 0; i < a->v6.size() && !to; i++)
    if (a->v6[i] == d.ip) to = &a->v6[i], toAddr = &a->a6[i];
  if (!to) {
    // The forwarder's answers (told) may name the address asked for: only JavaScript can read them.
    if (told) return Js();
    // pickAddress: the first of the address's family, else any.
    const bool v4 = d.addr.family == 4;
    const auto& fam = v4 ? a->v4 : a->v6;
    const auto& famA = v4 ? a->a4 : a->a6;
    if (!fam.empty()) to = &fam[0], toAddr = &famA[0];
    else if (!a->v4.empty()) to = &a->v4[0], toAddr = &a->a4[0];
    else if (!a->v6.empty()) to = &a->v6[0], toAddr = &a->a6[0];
    else return Js();
  }
  NetQuery r;
  r.hasName = true;
  r.name = h.name;
  r.hasIp = true;
  r.ip = *toAddr;
  r.port = d.port;
  r.resolved = own->Has(*toAddr, nowMs) ? 1 : 0;
  NetVerdict again = MatchNetwork(*e.policy, r);
  if (again.action == NetAction::kUndecided || again.wouldBlock) return Js();
  if (again.action == NetAction::kBlock) return Refuse(e, again, h, d, to);
  return Relay(e, v, h, d, *to);
}

}  // namespace fast
}  // namespace leash
