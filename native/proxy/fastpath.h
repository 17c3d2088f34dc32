// Internal to native/proxy: the proxy's verdict for a connection whose answer needs no JavaScript (issue 43). It is
// src/dataplane/network/proxy/verdict.ts (arrivalVerdict, peekVerdict, destinationVerdict, relayLine) narrowed to
// the cases it can answer exactly with the compiled matcher (netmatch.h), the names the proxy already resolved, and
// this host's addresses: a TLS ClientHello without ECH, to an address that is neither this host's nor a listener,
// judged allow or block by the subject's enforced (not shadowed) policy. Every other case is kJs: the connection
// goes to the JavaScript path as if this file did not exist, and that path decides it from the start.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "netmatch.h"
#include "sni.h"

namespace leash {
namespace fast {

/** A listener's subject as the native path sees it: an immutable snapshot, replaced whole on a policy change. */
struct Entry {
  uint32_t uid = 0;
  std::shared_ptr<const NetPolicy> policy;  // never null in a table (a subject without one has no entry)
  bool echAllow = false;
  uint32_t slot = 0;  // its cell in the shared connection counts
};

/** The names the proxy's resolver answered (src/dataplane/network/proxy/resolve.ts), with their expiry. */
class Names {
 public:
  struct Answer {
    std::vector<std::string> v4, v6;  // as the resolver wrote them (v6 lower case)
    std::vector<NetAddr> a4, a6;
    int64_t expiresMs = 0;
  };
  void Set(const std::string& name, Answer a);
  /** The answer while it is fresh, else null (the JavaScript path resolves again). */
  const Answer* Get(const std::string& name, int64_t nowMs) const;
  void Clear() { map_.clear(); }

 private:
  std::unordered_map<std::string, Answer> map_;
};

/** This host's interface addresses (what os.networkInterfaces lists: up and running), read again every 5 s. */
class OwnAddrs {
 public:
  bool Has(const NetAddr& a, int64_t nowMs);

 private:
  void Read();
  bool read_ = false;
  int64_t at_ = 0;
  std::vector<NetAddr> addrs_;
};

enum class Step { kJs, kPeek, kRefuse, kRelay };

/** What the native path does with a connection; `tail` is its decision line after the ref (formatDecisionTail). */
struct Plan {
  Step step = Step::kJs;
  std::string tail;
  std::string target;  // kRelay: the address to connect to
  bool allowLine = false;  // the line's action is allow (else block)
  const char* reason = "";  // the line's reason (NetReasonName)
};

/** What a connection arrived with: its original destination as text and parsed, and the listeners' own. */
struct Dst {
  std::string ip;  // inet_ntop's text (what the JavaScript path is given)
  NetAddr addr;
  int port = 0;
};

/** arrivalVerdict: kPeek when the verdict waits for the name (JavaScript would peek), else kJs. */
Step Arrival(const Entry& e, const Dst& d, OwnAddrs* own, int64_t nowMs);

/**
 * peekVerdict, then destinationVerdict: kRefuse or kRelay with the line, or kJs. `told`: the proxy has the DNS
 * forwarder's answers (ProxyOptions.seen), which only JavaScript can read.
 */
Plan Decide(const Entry& e, const Dst& d, const sni::Hello& h, const Names& names, OwnAddrs* own, int64_t nowMs,
            bool told);

/** The loopback and unspecified addresses (verdict.ts isLoopback without the host's own). */
bool IsLoopbackAddr(const NetAddr& a);

}  // namespace fast

/** The test hooks sniParse and fastVerdictBatch (fastpath_napi.cc). */
void RegisterFastPathTests(Napi::Env env, Napi::Object exports);

}  // namespace leash
