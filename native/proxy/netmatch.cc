// Native network matching with the engine's semantics (see netmatch.h). Each function names the
// engine function it follows; where the engine's order of checks matters, this keeps it.
#include "netmatch.h"

#include <algorithm>
#include <atomic>
#include <mutex>

namespace leash {

namespace {

// parseV4: four decimal parts, no leading zeros (inet_aton would read them as octal).
int64_t ParseV4(std::string_view s, size_t start, size_t end) {
  int parts = 0;
  uint32_t value = 0;
  size_t i = start;
  for (;;) {
    size_t partStart = i;
    uint32_t v = 0;
    while (i < end) {
      char c = s[i];
      if (c < '0' || c > '9') break;
      v = v * 10 + static_cast<uint32_t>(c - '0');
      i++;
      if (i - partStart > 3) return -1;
    }
    size_t len = i - partStart;
    if (len == 0 || v > 255) return -1;
    if (len > 1 && s[partStart] == '0') return -1;
    value = value * 256 + v;
    parts++;
    if (i == end) break;
    if (s[i] != '.' || parts == 4) return -1;
    i++;
  }
  return parts == 4 ? static_cast<int64_t>(value) : -1;
}

int HexVal(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// parseV6, step for step (its group-length and '::' rules decide which spellings are addresses).
bool ParseV6(std::string_view s, size_t start, size_t end, uint16_t groups[8]) {
  int gi = 0;
  int dbl = -1;
  size_t i = start;
  if (i == end) return false;
  if (s[i] == ':') {
    if (i + 1 >= end || s[i + 1] != ':') return false;
    dbl = 0;
    i += 2;
  }
  while (i < end) {
    size_t j = i;
    uint32_t v = 0;
    while (j < end && j - i < 5) {
      int h = HexVal(s[j]);
      if (h < 0) break;
      v = v * 16 + static_cast<uint32_t>(h);
      j++;
    }
    if (j < end && s[j] == '.') {
      if (gi > 6) return false;
      int64_t v4 = ParseV4(s, i, end);
      if (v4 < 0) return false;
      groups[gi++] = static_cast<uint16_t>(v4 >> 16);
      groups[gi++] = static_cast<uint16_t>(v4 & 0xffff);
      break;
    }
    if (j == i || j - i > 4 || gi >= 8) return false;
    groups[gi++] = static_cast<uint16_t>(v);
    if (j == end) break;
    if (s[j] != ':') return false;
    if (j + 1 < end && s[j + 1] == ':') {
      if (dbl >= 0) return false;
      dbl = gi;
      i = j + 2;
    } else {
      i = j + 1;
      if (i == end) return false;
    }
  }
  if (dbl < 0) return gi == 8;
  if (gi >= 8) return false;
  int tail = gi - dbl;
  for (int k = 0; k < tail; k++) groups[7 - k] = groups[gi - 1 - k];
  for (int k = dbl; k < 8 - tail; k++) groups[k] = 0;
  return true;
}

bool IsMapped(const NetAddr& a) { return a.w[0] == 0 && a.w[1] == 0 && a.w[2] == 0xffff; }

uint32_t WordMask(int bits) {
  if (bits <= 0) return 0;
  if (bits >= 32) return 0xffffffffu;
  return 0xffffffffu << (32 - bits);
}

// parsePort: 1..65535 in at most five digits (leading zeros allowed).
bool ParsePort(std::string_view s) {
  if (s.empty() || s.size() > 5) return false;
  int v = 0;
  for (char c : s) {
    if (c < '0' || c > '9') return false;
    v = v * 10 + (c - '0');
  }
  return v >= 1 && v <= 65535;
}

// normalizeDomainSubject: ASCII lowercase, one trailing dot dropped; false when no entry can match it.
bool NormalizeDomain(std::string_view name, std::string* out) {
  size_t end = name.size();
  if (end > 0 && name[end - 1] == '.') end--;
  if (end == 0 || end > 253) return false;
  int labelLen = 0;
  for (size_t i = 0; i < end; i++) {
    unsigned char c = static_cast<unsigned char>(name[i]);
    if (c == '.') {
      if (labelLen == 0) return false;
      labelLen = 0;
      continue;
    }
    if (++labelLen > 63) return false;
    bool ok = (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' || c == '_' || (c >= 'A' && c <= 'Z');
    if (!ok) return false;
  }
  if (labelLen == 0) return false;
  out->assign(name.substr(0, end));
  for (char& c : *out)
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c + 32);
  return true;
}

// stripPort: drops the `:port` a Host header carries, as the engine does.
std::string_view StripPort(std::string_view d) {
  size_t colon = d.rfind(':');
  if (colon == std::string_view::npos) return d;
  if (d[0] == '[') {
    size_t close = d.find(']');
    bool strip = close != std::string_view::npos && close > 0 && colon == close + 1 && ParsePort(d.substr(colon + 1));
    return strip ? d.substr(0, close + 1) : d;
  }
  if (d.find(':') != colon) return d;
  return ParsePort(d.substr(colon + 1)) ? d.substr(0, colon) : d;
}

// rebind.ts LOCAL and LOOPBACK: fixed lists, built once.
struct FixedLists {
  std::deque<std::string> rules;
  NetList local, loopback;
  void Add(NetList* l, const char* text) {
    rules.emplace_back(text);
    std::string_view t = rules.back();
    size_t slash = t.find('/');
    NetAddr a;
    ParseNetAddr(t.substr(0, slash), &a);
    int len = slash == std::string_view::npos ? (a.family == 4 ? 32 : 128) : std::stoi(std::string(t.substr(slash + 1)));
    l->ips.Add(a, len, -1, &rules.back());
  }
  FixedLists() {
    for (const char* r : {"0.0.0.0/8", "127.0.0.0/8", "169.254.0.0/16", "224.0.0.0/4", "255.255.255.255", "::/96",
                          "::1/128", "fe80::/10", "ff00::/8"})
      Add(&local, r);
    for (const char* r : {"127.0.0.0/8", "0.0.0.0", "::1/128", "::"}) Add(&loopback, r);
  }
};

const FixedLists& Fixed() {
  static const FixedLists f;
  return f;
}

NetPrepared AddressOnly(const NetAddr& ip, int port, bool localhost) {
  NetPrepared s;
  s.ip = ip;
  s.port = port;
  s.hasName = localhost;
  if (localhost) s.name = "localhost";
  return s;
}

enum class Refusal { kNone, kLocal, kInternal, kUndecided };

// rebindRefusal: whether a name-decided connection may go to `ip`.
Refusal RebindRefusal(const NetPolicy& p, std::string_view name, const NetAddr& ip, int port, bool own) {
  const FixedLists& f = Fixed();
  bool loopback = own || (ip.family != 0 && f.loopback.Match(AddressOnly(ip, kSomePort, false)) != nullptr);
  Refusal kind = Refusal::kNone;
  if (own) {
    kind = Refusal::kLocal;
  } else if (ip.family != 0) {
    NetPrepared s = AddressOnly(ip, kSomePort, false);
    if (f.local.Match(s) != nullptr) kind = Refusal::kLocal;
    else if (p.internal.Match(s) != nullptr) kind = Refusal::kInternal;
  }
  if (kind == Refusal::kNone) return kind;
  if (kind == Refusal::kInternal && !p.ok.domains.empty()) {
    // The engine lowercases this name with Unicode's rules (U+212A becomes `k`): only ASCII is judged here.
    if (std::any_of(name.begin(), name.end(), [](char c) { return static_cast<unsigned char>(c) >= 0x80; }))
      return Refusal::kUndecided;
    NetPrepared n;
    n.hasName = true;
    n.name.assign(name);
    for (char& c : n.name)
      if (c >= 'A' && c <= 'Z') c = static_cast<char>(c + 32);
    if (!n.name.empty() && n.name.back() == '.') n.name.pop_back();
    n.port = kSomePort;
    if (p.ok.Match(n) != nullptr) return Refusal::kNone;
  }
  if (ip.family != 0 && p.allow.Match(AddressOnly(ip, port, loopback)) != nullptr) return Refusal::kNone;
  return kind;
}

NetVerdict V(NetAction a, NetReason r, NetSource s, const std::string* rule) { return {a, r, s, rule, false}; }

// byLists: deny first; whitelist: allow, then ask, then block; blacklist: ask, then allow.
NetVerdict ByLists(const NetPolicy& p, const NetPrepared& s) {
  if (const std::string* d = p.deny.Match(s)) return V(NetAction::kBlock, NetReason::kDenyEntry, NetSource::kDeny, d);
  if (p.whitelist) {
    if (const std::string* a = p.allow.Match(s))
      return V(NetAction::kAllow, NetReason::kAllowEntry, NetSource::kAllow, a);
  }
  if (const std::string* k = p.ask.Match(s)) return V(NetAction::kAsk, NetReason::kAskEntry, NetSource::kAsk, k);
  if (!p.whitelist) return V(NetAction::kAllow, NetReason::kModeAllow, NetSource::kMode, nullptr);
  return V(NetAction::kBlock, NetReason::kNotAllowed, NetSource::kMode, nullptr);
}

NetVerdict Shadowed(const NetPolicy& p, NetVerdict v) {
  if (p.shadow && v.action == NetAction::kBlock) {
    v.action = NetAction::kAllow;
    v.wouldBlock = true;
  }
  return v;
}

}  // namespace

bool ParseNetAddr(std::string_view s, NetAddr* out, bool keepMapped) {
  if (s.find(':') == std::string_view::npos) {
    int64_t v4 = ParseV4(s, 0, s.size());
    if (v4 < 0) return false;
    *out = NetAddr{4, {0, 0, 0, static_cast<uint32_t>(v4)}};
    return true;
  }
  uint16_t g[8];
  if (!ParseV6(s, 0, s.size(), g)) return false;
  out->family = 6;
  for (int k = 0; k < 4; k++) out->w[k] = (static_cast<uint32_t>(g[2 * k]) << 16) | g[2 * k + 1];
  if (!keepMapped && IsMapped(*out)) {
    out->w[2] = 0;
    out->family = 4;
  }
  return true;
}

void NetPortRules::Add(const std::string* rule, int port) {
  if (port < 0) {
    if (!any_) any_ = rule;
    return;
  }
  if (byPort_.emplace(port, rule).second && !firstPinned_) firstPinned_ = rule;
}

const std::string* NetPortRules::Match(int port) const {
  if (port == kSomePort) return any_ ? any_ : firstPinned_;
  if (!byPort_.empty()) {
    auto it = byPort_.find(port);
    if (it != byPort_.end()) return it->second;
  }
  return any_;
}

void NetDomainIndex::Add(const std::string& domain, bool wildcard, int port, const std::string* rule) {
  // Every label suffix is a node (the engine's trie path), so a lookup stops where the engine's does.
  Node* node = nullptr;
  size_t start = domain.size();
  while (start > 0) {
    size_t dot = domain.rfind('.', start - 1);
    start = dot == std::string::npos ? 0 : dot + 1;
    std::string_view suffix(domain.data() + start, domain.size() - start);
    auto it = nodes_.find(suffix);
    if (it == nodes_.end()) {
      keys_.emplace_back(suffix);
      it = nodes_.emplace(std::string_view(keys_.back()), Node{}).first;
    }
    node = &it->second;
    if (dot == std::string::npos) break;
    start = dot;
  }
  if (!node) return;
  if (port < 0) {
    if (!wildcard && !node->selfAny) node->selfAny = rule;
    if (!node->belowAny) node->belowAny = rule;
    return;
  }
  if (!wildcard) {
    if (!node->selfPorts) node->selfPorts = std::make_unique<NetPortRules>();
    node->selfPorts->Add(rule, port);
  }
  if (!node->belowPorts) node->belowPorts = std::make_unique<NetPortRules>();
  node->belowPorts->Add(rule, port);
}

const std::string* NetDomainIndex::Match(std::string_view name, int port) const {
  const std::string* best = nullptr;
  size_t end = name.size();
  while (end > 0) {
    size_t dot = name.rfind('.', end - 1);
    size_t start = dot == std::string_view::npos ? 0 : dot + 1;
    auto it = nodes_.find(name.substr(start));
    if (it == nodes_.end()) break;
    const Node& n = it->second;
    const NetPortRules* ports = start == 0 ? n.selfPorts.get() : n.belowPorts.get();
    const std::string* r = ports ? ports->Match(port) : nullptr;
    if (!r) r = start == 0 ? n.selfAny : n.belowAny;
    if (r) best = r;
    if (dot == std::string_view::npos) break;
    end = dot;
  }
  return best;
}

void NetIpIndex::Add(const NetAddr& net, int len, int port, const std::string* rule) {
  if (net.family == 4) {
    auto it = std::find_if(v4_.begin(), v4_.end(), [len](const auto& l) { return l.first == len; });
    if (it == v4_.end()) {
      v4_.emplace_back(len, std::unordered_map<uint32_t, NetPortRules>{});
      std::sort(v4_.begin(), v4_.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
      it = std::find_if(v4_.begin(), v4_.end(), [len](const auto& l) { return l.first == len; });
    }
    it->second[net.w[3] & WordMask(len)].Add(rule, port);
    return;
  }
  auto it = std::find_if(v6_.begin(), v6_.end(), [len](const auto& l) { return l.first == len; });
  if (it == v6_.end()) {
    v6_.emplace_back(len, std::unordered_map<Key6, NetPortRules, Hash6>{});
    std::sort(v6_.begin(), v6_.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
    it = std::find_if(v6_.begin(), v6_.end(), [len](const auto& l) { return l.first == len; });
  }
  uint32_t m[4];
  for (int k = 0; k < 4; k++) m[k] = net.w[k] & WordMask(len - 32 * k);
  Key6 key{(uint64_t{m[0]} << 32) | m[1], (uint64_t{m[2]} << 32) | m[3]};
  it->second[key].Add(rule, port);
}

const std::string* NetIpIndex::Match(const NetAddr& a, int port) const {
  if (a.family == 4) {
    for (const auto& [len, m] : v4_) {
      auto it = m.find(a.w[3] & WordMask(len));
      if (it == m.end()) continue;
      if (const std::string* r = it->second.Match(port)) return r;
    }
    return nullptr;
  }
  for (const auto& [len, m] : v6_) {
    uint32_t w[4];
    for (int k = 0; k < 4; k++) w[k] = a.w[k] & WordMask(len - 32 * k);
    auto it = m.find(Key6{(uint64_t{w[0]} << 32) | w[1], (uint64_t{w[2]} << 32) | w[3]});
    if (it == m.end()) continue;
    if (const std::string* r = it->second.Match(port)) return r;
  }
  return nullptr;
}

// NetworkIndex.match: domain entries against the name, then IP entries against a literal name, then the address.
const std::string* NetList::Match(const NetPrepared& s) const {
  if (s.hasName && !domains.empty()) {
    if (const std::string* r = domains.Match(s.name, s.port)) return r;
  }
  if (ips.empty()) return nullptr;
  if (s.literal.family != 0) {
    if (const std::string* r = ips.Match(s.literal, s.port)) return r;
  }
  if (s.ip.family != 0) return ips.Match(s.ip, s.port);
  return nullptr;
}

NetVerdict NetNoPolicy(bool failOpen) {
  return V(failOpen ? NetAction::kAllow : NetAction::kBlock, NetReason::kNoPolicy, NetSource::kFailMode, nullptr);
}

NetVerdict NetEngineError(const NetPolicy& p) {
  NetAction a = p.failOpen ? NetAction::kAllow : NetAction::kBlock;
  return Shadowed(p, V(a, NetReason::kEngineError, NetSource::kFailMode, nullptr));
}

NetVerdict MatchNetwork(const NetPolicy& p, const NetQuery& q) {
  if (q.port < 0 || q.port > 65535) return NetEngineError(p);
  // prepareNetworkSubject
  NetPrepared s;
  s.port = q.port;
  if (q.hasName && !q.name.empty()) {
    std::string_view d = StripPort(q.name);
    s.hasName = NormalizeDomain(d, &s.name);
    bool bracketed = !d.empty() && d.front() == '[' && d.back() == ']';
    bool digitLast = !d.empty() && d.back() >= '0' && d.back() <= '9';
    if (digitLast || bracketed || d.find(':') != std::string_view::npos) {
      std::string_view lit = bracketed ? d.substr(1, d.size() - 2) : d;
      if (ParseNetAddr(lit, &s.literal)) s.hasName = false;
    }
  }
  if (q.hasIp) s.ip = q.ip;
  NetVerdict v = ByLists(p, s);
  if (q.resolved >= 0 && v.action != NetAction::kBlock) {
    // resolvedVerdict: a name-decided destination must not be local or internal.
    if (!q.hasName || !q.hasIp) return NetEngineError(p);
    Refusal r = RebindRefusal(p, q.name, q.ip, q.port, q.resolved == 1);
    if (r == Refusal::kUndecided) return V(NetAction::kUndecided, NetReason::kEngineError, NetSource::kFailMode, nullptr);
    if (r != Refusal::kNone) v = V(NetAction::kBlock, NetReason::kRebind, NetSource::kRebind, v.rule);
  }
  return Shadowed(p, v);
}

const char* NetActionName(NetAction a) {
  static const char* const names[] = {"allow", "block", "ask", "undecided"};
  return names[static_cast<int>(a)];
}

const char* NetReasonName(NetReason r) {
  static const char* const names[] = {"allow_entry", "mode_allow",   "deny_entry", "not_allowed",
                                      "ask_entry",   "no_policy", "engine_error", "rebind"};
  return names[static_cast<int>(r)];
}

const char* NetSourceName(NetSource s) {
  static const char* const names[] = {"allow", "deny", "ask", "mode", "fail_mode", "rebind"};
  return names[static_cast<int>(s)];
}

namespace {
std::mutex tableWriters;  // one writer at a time; readers never lock
}  // namespace

void NetPolicyTable::Set(uint32_t uid, std::shared_ptr<const NetPolicy> policy, bool failOpen) {
  std::lock_guard<std::mutex> lock(tableWriters);
  auto next = std::make_shared<Map>(*std::atomic_load(&map_));
  (*next)[uid] = std::make_shared<const Slot>(Slot{std::move(policy), failOpen});
  std::atomic_store(&map_, std::shared_ptr<const Map>(std::move(next)));
}

void NetPolicyTable::Remove(uint32_t uid) {
  std::lock_guard<std::mutex> lock(tableWriters);
  auto next = std::make_shared<Map>(*std::atomic_load(&map_));
  next->erase(uid);
  std::atomic_store(&map_, std::shared_ptr<const Map>(std::move(next)));
}

std::shared_ptr<const NetPolicyTable::Slot> NetPolicyTable::Get(uint32_t uid) const {
  std::shared_ptr<const Map> m = std::atomic_load(&map_);
  auto it = m->find(uid);
  return it == m->end() ? nullptr : it->second;
}

size_t NetPolicyTable::Size() const { return std::atomic_load(&map_)->size(); }

}  // namespace leash
