// The native twin of the engine's network verdict (src/engine/decide.ts for the network surface,
// with network.ts, domain.ts, ip.ts, port.ts and rebind.ts). The TypeScript engine is the
// definition; tests/native/netmatch-diff.test.ts holds this file to it on a fixed corpus and on
// generated cases. Entries arrive already parsed by the engine (src/dataplane/network/netmatch.ts),
// so the grammar has one definition; subjects (names, addresses) are parsed here.
#pragma once
#include <napi.h>

#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

namespace leash {

/** An address: family 0 (none), 4 (in w[3]) or 6 (four big-endian words). */
struct NetAddr {
  int family = 0;
  uint32_t w[4] = {0, 0, 0, 0};
};

/**
 * The engine's parseIpInto over s: strict dotted quads, RFC 4291 IPv6 with an IPv4 tail; an
 * IPv4-mapped address folds to IPv4 unless keepMapped. False when s is not an address.
 */
bool ParseNetAddr(std::string_view s, NetAddr* out, bool keepMapped = false);

/** PortRules.match's sentinel: an entry admitting some port matches. */
constexpr int kSomePort = -1;

/** The rules of one key: an entry without a port, and entries pinned to one port (the first of each wins). */
class NetPortRules {
 public:
  void Add(const std::string* rule, int port);  // port -1: none
  const std::string* Match(int port) const;

 private:
  const std::string* any_ = nullptr;
  const std::string* firstPinned_ = nullptr;
  std::unordered_map<int, const std::string*> byPort_;
};

/** DomainIndex: whole-label suffix matching, the most specific entry wins. */
class NetDomainIndex {
 public:
  void Add(const std::string& domain, bool wildcard, int port, const std::string* rule);
  /** The entry for `name` (any bytes: compared as they are) on `port`, or null. */
  const std::string* Match(std::string_view name, int port) const;
  bool empty() const { return nodes_.empty(); }

 private:
  struct Node {
    const std::string* selfAny = nullptr;
    const std::string* belowAny = nullptr;
    std::unique_ptr<NetPortRules> selfPorts, belowPorts;
  };
  std::deque<std::string> keys_;  // the suffixes nodes_ is keyed by (stable storage)
  std::unordered_map<std::string_view, Node> nodes_;
};

/** IpIndex: one map per prefix length, probed longest first. */
class NetIpIndex {
 public:
  void Add(const NetAddr& net, int len, int port, const std::string* rule);
  const std::string* Match(const NetAddr& a, int port) const;
  bool empty() const { return v4_.empty() && v6_.empty(); }

 private:
  struct Key6 {
    uint64_t hi, lo;
    bool operator==(const Key6& o) const { return hi == o.hi && lo == o.lo; }
  };
  struct Hash6 {
    size_t operator()(const Key6& k) const { return std::hash<uint64_t>()(k.hi * 0x9e3779b97f4a7c15ULL ^ k.lo); }
  };
  std::vector<std::pair<int, std::unordered_map<uint32_t, NetPortRules>>> v4_;  // by length, longest first
  std::vector<std::pair<int, std::unordered_map<Key6, NetPortRules, Hash6>>> v6_;
};

/** A subject as NetworkIndex.match sees it (PreparedNetwork). */
struct NetPrepared {
  bool hasName = false;
  std::string name;
  NetAddr literal, ip;
  int port = 0;
};

/** One network list (allow, deny, ask, internal, rebind_ok): NetworkIndex. */
struct NetList {
  NetDomainIndex domains;
  NetIpIndex ips;
  const std::string* Match(const NetPrepared& s) const;
};

/** A subject's compiled network policy; immutable once built, shared by snapshot. */
struct NetPolicy {
  bool failOpen = false;
  bool shadow = false;
  bool whitelist = true;
  NetList allow, deny, ask, internal, ok;
  std::deque<std::string> rules;  // every entry's text, pointed to by the lists
};

enum class NetAction : uint8_t { kAllow, kBlock, kAsk, kUndecided };
enum class NetReason : uint8_t { kAllowEntry, kModeAllow, kDenyEntry, kNotAllowed, kAskEntry, kNoPolicy, kEngineError, kRebind };
enum class NetSource : uint8_t { kAllow, kDeny, kAsk, kMode, kFailMode, kRebind };

/** The engine's Verdict; kUndecided: this matcher cannot give the engine's answer, JavaScript decides. */
struct NetVerdict {
  NetAction action;
  NetReason reason;
  NetSource source;
  const std::string* rule;
  bool wouldBlock;
};

/** What is judged: the SNI/Host name as received, the destination, and for a resolved name, whether it is ours. */
struct NetQuery {
  bool hasName = false;  // false: no name (null); true with an empty name: the engine's ''
  std::string_view name;
  bool hasIp = false;  // true with family 0: the engine's '' (no address)
  NetAddr ip;
  int port = 0;  // 0..65535
  int resolved = -1;  // -1: not a resolved destination; 0: resolved; 1: resolved, one of this host's addresses
};

/** decide('network', query, policy): never a different answer from the engine's, at worst kUndecided. */
NetVerdict MatchNetwork(const NetPolicy& p, const NetQuery& q);
/** The verdict without a policy (decideNoPolicy). */
NetVerdict NetNoPolicy(bool failOpen);
/** The engine's engine_error verdict for a malformed subject, shadowed as the engine does. */
NetVerdict NetEngineError(const NetPolicy& p);

const char* NetActionName(NetAction a);
const char* NetReasonName(NetReason r);
const char* NetSourceName(NetSource s);

/**
 * The proxy's per-subject policies: each subject's slot holds an immutable snapshot that a
 * policy change replaces with one atomic store, so a reader on any thread sees the old policy
 * or the new one whole, and keeps the one it loaded alive while it judges.
 */
class NetPolicyTable {
 public:
  struct Slot {
    std::shared_ptr<const NetPolicy> policy;  // null: the subject has no policy (fail mode decides)
    bool failOpen = false;
  };
  /** Sets (or replaces) a subject's snapshot. */
  void Set(uint32_t uid, std::shared_ptr<const NetPolicy> policy, bool failOpen);
  void Remove(uint32_t uid);
  /** The subject's current snapshot, or null when the subject is unknown. */
  std::shared_ptr<const Slot> Get(uint32_t uid) const;
  size_t Size() const;

 private:
  using Map = std::unordered_map<uint32_t, std::shared_ptr<const Slot>>;
  std::shared_ptr<const Map> map_ = std::make_shared<const Map>();
};

/** Puts compileNetPolicy, netMatch, netMatchBatch and NetPolicyTable on the module's exports. */
void RegisterNetMatch(Napi::Env env, Napi::Object exports);

}  // namespace leash
