// Reading Leash's nf_tables objects straight from the kernel, for the network surface's reconcile.
//
// Why: `nft` builds its whole cache for every command, map elements included, so reading one subject's chains at
// 1,000 subjects cost about 45 ms of nft (nine `list` commands of ~5 ms each, most of it the 1,000-element map
// fetched and parsed again each time) plus a process start from a large service. Here the same facts are a handful
// of targeted nfnetlink requests (a GET of the table, of each asked chain, a rule dump filtered to that chain, one
// element dump), well under a millisecond. nft stays the only writer: every change is still one `nft -f`
// transaction rendered from text.
//
// Hand-written on the kernel's uapi headers, like conntrack.cc: five read-only message types whose attributes are
// fixed; libnftnl + libmnl would add two build and package dependencies to parse them.
#include "nftread.h"

#include <arpa/inet.h>
#include <endian.h>
#include <fcntl.h>
#include <sched.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>
// After the libc headers: linux/netfilter.h pulls linux/in.h, which libc's netinet/in.h must come before.
#include <linux/netfilter.h>
#include <linux/netfilter/nf_tables.h>
#include <linux/netfilter/nfnetlink.h>
#include <linux/netlink.h>

#include <cerrno>
#include <cstring>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "errors.h"
#include "nlmsg.h"

namespace leash {

namespace {

int g_host_sock = -1;
uint32_t g_seq = 0;

/** Calls f(type, data, len) for each attribute in [p, p+len). */
template <typename F>
void ForAttrs(const char* p, size_t len, F f) {
  while (len >= NLA_HDRLEN) {
    const auto* a = reinterpret_cast<const nlattr*>(p);
    size_t l = a->nla_len;
    if (l < NLA_HDRLEN || l > len) return;
    f(static_cast<uint16_t>(a->nla_type & NLA_TYPE_MASK), p + NLA_HDRLEN, l - NLA_HDRLEN);
    size_t step = NLA_ALIGN(l);
    if (step >= len) return;
    p += step;
    len -= step;
  }
}

uint32_t Be32(const char* d, size_t n) {
  if (n < 4) return 0;
  uint32_t v;
  std::memcpy(&v, d, 4);
  return ntohl(v);
}

std::string Str(const char* d, size_t n) { return std::string(d, strnlen(d, n)); }

/** A netlink socket in the given network namespace (null: this process's), opened on a thread that joins it. */
int OpenSocket(const char* netns, int* err) {
  auto open = [](int* e) {
    int s = socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, NETLINK_NETFILTER);
    if (s < 0) {
      *e = errno;
      return -1;
    }
    // A read never waits for long: the kernel answers inside the request; a stuck answer is an error, not a hang.
    timeval tv{2, 0};
    setsockopt(s, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    int big = 1 << 20;
    setsockopt(s, SOL_SOCKET, SO_RCVBUF, &big, sizeof big);
    return s;
  };
  if (netns == nullptr) return open(err);
  int fd = ::open(netns, O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    *err = errno;
    return -1;
  }
  int s = -1;
  // A socket belongs to the namespace it was made in: the helper thread joins the namespace, makes it and ends;
  // the process's own threads never change namespace.
  std::thread t([&] {
    if (setns(fd, CLONE_NEWNET) != 0) {
      *err = errno;
      return;
    }
    s = open(err);
  });
  t.join();
  close(fd);
  return s;
}

/**
 * Sends one request and hands each answer message to `on`. Returns 0, or the errno the kernel (or the socket)
 * answered. A dump ends at NLMSG_DONE; a GET at its acknowledgement. Messages of other sequence numbers (a stale
 * answer) are skipped.
 */
int Request(int sock, NlMsg& m, bool dump, const std::function<void(const nlmsghdr*)>& on) {
  std::vector<char>& b = m.Done();
  auto* h = reinterpret_cast<nlmsghdr*>(b.data());
  h->nlmsg_flags |= NLM_F_REQUEST | (dump ? NLM_F_DUMP : NLM_F_ACK);
  uint32_t seq = h->nlmsg_seq = ++g_seq;
  sockaddr_nl k{};
  k.nl_family = AF_NETLINK;
  if (sendto(sock, b.data(), b.size(), 0, reinterpret_cast<sockaddr*>(&k), sizeof k) < 0) return errno;
  static thread_local std::vector<char> buf(1 << 17);
  for (;;) {
    ssize_t n = recv(sock, buf.data(), buf.size(), MSG_TRUNC);
    if (n < 0) {
      if (errno == EINTR) continue;
      return errno;
    }
    if (static_cast<size_t>(n) > buf.size()) return EMSGSIZE;
    int left = static_cast<int>(n);
    for (auto* r = reinterpret_cast<nlmsghdr*>(buf.data()); NLMSG_OK(r, static_cast<unsigned>(left));
         r = NLMSG_NEXT(r, left)) {
      if (r->nlmsg_seq != seq) continue;
      if (r->nlmsg_type == NLMSG_DONE) return 0;
      if (r->nlmsg_type == NLMSG_ERROR) {
        int err = -reinterpret_cast<nlmsgerr*>(NLMSG_DATA(r))->error;
        return err;  // 0: the acknowledgement that ends a GET
      }
      on(r);
    }
  }
}

/** The attributes of an nf_tables answer (after its nfgenmsg). */
template <typename F>
void Payload(const nlmsghdr* r, F f) {
  size_t off = NLMSG_LENGTH(sizeof(nfgenmsg));
  if (r->nlmsg_len < off) return;
  ForAttrs(reinterpret_cast<const char*>(r) + NLMSG_ALIGN(off), r->nlmsg_len - NLMSG_ALIGN(off), f);
}

uint16_t Type(uint16_t msg) { return static_cast<uint16_t>((NFNL_SUBSYS_NFTABLES << 8) | msg); }

struct Rule {
  std::string chain;
  uint64_t handle = 0;
  bool has_comment = false;
  std::string comment;
  bool dispatch = false;
};

/** One expression's name and attributes (type -> raw bytes). */
struct Expr {
  std::string name;
  std::vector<std::pair<uint16_t, std::string>> attrs;
  const std::string* Get(uint16_t t) const {
    for (auto& a : attrs)
      if (a.first == t) return &a.second;
    return nullptr;
  }
};

/** Exactly `meta skuid vmap @<map>`: a meta load of skuid and a lookup of that register in the map, to a verdict. */
bool IsDispatch(const std::vector<Expr>& ex, const std::string& map) {
  if (ex.size() != 2 || ex[0].name != "meta" || ex[1].name != "lookup") return false;
  const std::string* key = ex[0].Get(NFTA_META_KEY);
  const std::string* dreg = ex[0].Get(NFTA_META_DREG);
  if (!key || !dreg || ex[0].Get(NFTA_META_SREG) || Be32(key->data(), key->size()) != NFT_META_SKUID) return false;
  const std::string* set = ex[1].Get(NFTA_LOOKUP_SET);
  const std::string* sreg = ex[1].Get(NFTA_LOOKUP_SREG);
  const std::string* ldreg = ex[1].Get(NFTA_LOOKUP_DREG);
  const std::string* flags = ex[1].Get(NFTA_LOOKUP_FLAGS);
  if (!set || Str(set->data(), set->size()) != map || !sreg || !ldreg) return false;
  if (Be32(sreg->data(), sreg->size()) != Be32(dreg->data(), dreg->size())) return false;
  if (Be32(ldreg->data(), ldreg->size()) != NFT_REG_VERDICT) return false;
  return !flags || Be32(flags->data(), flags->size()) == 0;
}

Rule ParseRule(const nlmsghdr* r, const std::string& map) {
  Rule out;
  std::vector<Expr> ex;
  Payload(r, [&](uint16_t t, const char* d, size_t n) {
    if (t == NFTA_RULE_CHAIN) {
      out.chain = Str(d, n);
    } else if (t == NFTA_RULE_HANDLE && n >= 8) {
      uint64_t v;
      std::memcpy(&v, d, 8);
      out.handle = be64toh(v);
    } else if (t == NFTA_RULE_USERDATA) {
      // nft's user data: TLVs of a type byte and a length byte; type 0 is the comment, NUL-terminated.
      size_t i = 0;
      while (i + 2 <= n) {
        uint8_t ut = static_cast<uint8_t>(d[i]), ul = static_cast<uint8_t>(d[i + 1]);
        if (i + 2 + ul > n) break;
        if (ut == 0) {
          out.has_comment = true;
          out.comment = Str(d + i + 2, ul);
        }
        i += 2 + ul;
      }
    } else if (t == NFTA_RULE_EXPRESSIONS) {
      ForAttrs(d, n, [&](uint16_t lt, const char* ld, size_t ln) {
        if (lt != NFTA_LIST_ELEM) return;
        Expr e;
        ForAttrs(ld, ln, [&](uint16_t et, const char* ed, size_t en) {
          if (et == NFTA_EXPR_NAME) e.name = Str(ed, en);
          else if (et == NFTA_EXPR_DATA)
            ForAttrs(ed, en, [&](uint16_t at, const char* ad, size_t an) { e.attrs.emplace_back(at, std::string(ad, an)); });
        });
        ex.push_back(std::move(e));
      });
    }
  });
  out.dispatch = IsDispatch(ex, map);
  return out;
}

struct TableAsk {
  uint8_t family;
  std::string table;
  std::string map;
  bool all_chains;
  std::vector<std::string> chains;
};

struct TableRead {
  bool exists = false;
  std::vector<std::string> chains;
  std::vector<Rule> rules;
  std::vector<std::pair<uint32_t, std::string>> elements;
};

int ReadTable(int sock, const TableAsk& a, TableRead* out) {
  {
    NlMsg m(Type(NFT_MSG_GETTABLE), 0, a.family);
    m.Str(NFTA_TABLE_NAME, a.table);
    int e = Request(sock, m, false, [](const nlmsghdr*) {});
    if (e == ENOENT) return 0;
    if (e) return e;
    out->exists = true;
  }
  auto rulesOf = [&](const std::string* chain) {
    NlMsg m(Type(NFT_MSG_GETRULE), 0, a.family);
    m.Str(NFTA_RULE_TABLE, a.table);
    if (chain) m.Str(NFTA_RULE_CHAIN, *chain);
    return Request(sock, m, true, [&](const nlmsghdr* r) {
      if ((r->nlmsg_type & 0xff) == NFT_MSG_NEWRULE) out->rules.push_back(ParseRule(r, a.map));
    });
  };
  if (a.all_chains) {
    NlMsg m(Type(NFT_MSG_GETCHAIN), 0, a.family);
    int e = Request(sock, m, true, [&](const nlmsghdr* r) {
      std::string table, name;
      Payload(r, [&](uint16_t t, const char* d, size_t n) {
        if (t == NFTA_CHAIN_TABLE) table = Str(d, n);
        else if (t == NFTA_CHAIN_NAME) name = Str(d, n);
      });
      if (table == a.table) out->chains.push_back(name);
    });
    if (e) return e;
    if ((e = rulesOf(nullptr))) return e;
  } else {
    for (const std::string& c : a.chains) {
      NlMsg m(Type(NFT_MSG_GETCHAIN), 0, a.family);
      m.Str(NFTA_CHAIN_TABLE, a.table);
      m.Str(NFTA_CHAIN_NAME, c);
      int e = Request(sock, m, false, [](const nlmsghdr*) {});
      if (e == ENOENT) continue;
      if (e) return e;
      out->chains.push_back(c);
      if ((e = rulesOf(&c))) return e;
    }
  }
  NlMsg m(Type(NFT_MSG_GETSETELEM), 0, a.family);
  m.Str(NFTA_SET_ELEM_LIST_TABLE, a.table);
  m.Str(NFTA_SET_ELEM_LIST_SET, a.map);
  int e = Request(sock, m, true, [&](const nlmsghdr* r) {
    Payload(r, [&](uint16_t t, const char* d, size_t n) {
      if (t != NFTA_SET_ELEM_LIST_ELEMENTS) return;
      ForAttrs(d, n, [&](uint16_t lt, const char* ld, size_t ln) {
        if (lt != NFTA_LIST_ELEM) return;
        bool have_key = false, jump = false;
        uint32_t key = 0;
        std::string target;
        ForAttrs(ld, ln, [&](uint16_t et, const char* ed, size_t en) {
          if (et == NFTA_SET_ELEM_KEY) {
            ForAttrs(ed, en, [&](uint16_t kt, const char* kd, size_t kn) {
              if (kt == NFTA_DATA_VALUE && kn == 4) {
                std::memcpy(&key, kd, 4);  // meta skuid is in host order
                have_key = true;
              }
            });
          } else if (et == NFTA_SET_ELEM_DATA) {
            ForAttrs(ed, en, [&](uint16_t dt, const char* dd, size_t dn) {
              if (dt != NFTA_DATA_VERDICT) return;
              ForAttrs(dd, dn, [&](uint16_t vt, const char* vd, size_t vn) {
                if (vt == NFTA_VERDICT_CODE && static_cast<int32_t>(Be32(vd, vn)) == NFT_JUMP) jump = true;
                else if (vt == NFTA_VERDICT_CHAIN) target = Str(vd, vn);
              });
            });
          }
        });
        if (have_key && jump && !target.empty()) out->elements.emplace_back(key, target);
      });
    });
  });
  if (e == ENOENT) return 0;
  return e;
}

int GenId(int sock, uint32_t* id) {
  NlMsg m(Type(NFT_MSG_GETGEN), 0, AF_UNSPEC);
  return Request(sock, m, false, [&](const nlmsghdr* r) {
    Payload(r, [&](uint16_t t, const char* d, size_t n) {
      if (t == NFTA_GEN_ID) *id = Be32(d, n);
    });
  });
}

bool Family(const std::string& f, uint8_t* out) {
  if (f == "ip") *out = NFPROTO_IPV4;
  else if (f == "ip6") *out = NFPROTO_IPV6;
  else if (f == "inet") *out = NFPROTO_INET;
  else return false;
  return true;
}

const char* kUsage =
    "nftRead(netns: string | null, tables: {family: 'ip'|'ip6'|'inet', table: string, map: string, chains: string[] "
    "| null}[])";

}  // namespace

/**
 * nftRead(netns, tables) -> {exists, chains, rules: {chain, handle, comment, dispatch}[], elements: [uid, chain][]}[]
 * For each table: whether it exists, which of the asked chains exist (every chain of the table for `chains: null`)
 * with their rules in order, and the jump elements of its verdict map. All of it from one generation of the
 * ruleset: a read that saw the generation move is made again. An errno other than ENOENT (EPERM: not root) throws.
 */
Napi::Value NftRead(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  if (info.Length() < 2 || !(info[0].IsString() || info[0].IsNull()) || !info[1].IsArray()) return Usage(env, kUsage);
  std::string ns = info[0].IsString() ? info[0].As<Napi::String>().Utf8Value() : "";
  std::vector<TableAsk> asks;
  auto arr = info[1].As<Napi::Array>();
  for (uint32_t i = 0; i < arr.Length(); i++) {
    Napi::Value v = arr[i];
    if (!v.IsObject()) return Usage(env, kUsage);
    auto o = v.As<Napi::Object>();
    TableAsk a;
    if (!o.Get("family").IsString() || !Family(o.Get("family").As<Napi::String>().Utf8Value(), &a.family) ||
        !o.Get("table").IsString() || !o.Get("map").IsString())
      return Usage(env, kUsage);
    a.table = o.Get("table").As<Napi::String>().Utf8Value();
    a.map = o.Get("map").As<Napi::String>().Utf8Value();
    Napi::Value c = o.Get("chains");
    a.all_chains = c.IsNull();
    if (!a.all_chains) {
      if (!c.IsArray()) return Usage(env, kUsage);
      auto ca = c.As<Napi::Array>();
      for (uint32_t j = 0; j < ca.Length(); j++) {
        Napi::Value s = ca[j];
        if (!s.IsString()) return Usage(env, kUsage);
        a.chains.push_back(s.As<Napi::String>().Utf8Value());
      }
    }
    asks.push_back(std::move(a));
  }
  int err = 0;
  int sock = ns.empty() ? g_host_sock : -1;
  if (sock < 0) sock = OpenSocket(ns.empty() ? nullptr : ns.c_str(), &err);
  if (sock < 0) {
    ErrnoError(env, err, "nftRead socket").ThrowAsJavaScriptException();
    return env.Undefined();
  }
  if (ns.empty()) g_host_sock = sock;
  std::vector<TableRead> reads;
  for (int attempt = 0; attempt < 8; attempt++) {
    uint32_t before = 0, after = 0;
    reads.assign(asks.size(), TableRead{});
    if ((err = GenId(sock, &before))) break;
    for (size_t i = 0; i < asks.size() && !err; i++) err = ReadTable(sock, asks[i], &reads[i]);
    if (err || (err = GenId(sock, &after))) break;
    if (before == after) break;
    err = attempt == 7 ? EAGAIN : 0;  // the ruleset changed under the read: read again
  }
  if (!ns.empty()) close(sock);
  if (err) {
    if (ns.empty()) {
      close(g_host_sock);  // whatever is left queued on it goes with it
      g_host_sock = -1;
    }
    ErrnoError(env, err, "nftRead").ThrowAsJavaScriptException();
    return env.Undefined();
  }
  auto out = Napi::Array::New(env, reads.size());
  for (size_t i = 0; i < reads.size(); i++) {
    const TableRead& t = reads[i];
    auto o = Napi::Object::New(env);
    o.Set("exists", Napi::Boolean::New(env, t.exists));
    auto chains = Napi::Array::New(env, t.chains.size());
    for (size_t j = 0; j < t.chains.size(); j++) chains.Set(j, Napi::String::New(env, t.chains[j]));
    o.Set("chains", chains);
    auto rules = Napi::Array::New(env, t.rules.size());
    for (size_t j = 0; j < t.rules.size(); j++) {
      const Rule& r = t.rules[j];
      auto ro = Napi::Object::New(env);
      ro.Set("chain", Napi::String::New(env, r.chain));
      ro.Set("handle", Napi::Number::New(env, static_cast<double>(r.handle)));
      ro.Set("comment", r.has_comment ? Napi::Value(Napi::String::New(env, r.comment)) : env.Null());
      ro.Set("dispatch", Napi::Boolean::New(env, r.dispatch));
      rules.Set(j, ro);
    }
    o.Set("rules", rules);
    auto els = Napi::Array::New(env, t.elements.size());
    for (size_t j = 0; j < t.elements.size(); j++) {
      auto pair = Napi::Array::New(env, 2);
      pair.Set(0u, Napi::Number::New(env, t.elements[j].first));
      pair.Set(1u, Napi::String::New(env, t.elements[j].second));
      els.Set(j, pair);
    }
    o.Set("elements", els);
    out.Set(i, o);
  }
  return out;
}

}  // namespace leash
