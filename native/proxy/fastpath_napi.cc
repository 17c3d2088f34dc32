// Test hooks for the native verdict path (tests/native/fastpath-diff.test.ts): the ClientHello parser and the
// whole decision the acceptor makes (sni.h, fastpath.h) for generated cases, compared there with peek.ts and
// verdict.ts. Nothing here is on a connection's path.
#include "fastpath.h"

#include "errors.h"
#include "sni.h"

namespace leash {

namespace {

const napi_type_tag kPolicyTag = {0x6c6561736e65746dULL, 0x6e65746d61746368ULL};  // netmatch_napi.cc's handle

struct PolicyHandle {
  std::shared_ptr<const NetPolicy> policy;
};

/** sniParse(bytes) -> "more" | "other" | "tls|<name or \x01>|<ech 0/1>". */
Napi::Value SniParse(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  if (info.Length() < 1 || !info[0].IsBuffer()) return Usage(env, "sniParse(bytes: Buffer)");
  auto b = info[0].As<Napi::Buffer<uint8_t>>();
  sni::Hello h = sni::Parse(b.Data(), b.Length());
  if (h.kind == sni::Kind::kMore) return Napi::String::New(env, "more");
  if (h.kind == sni::Kind::kOther) return Napi::String::New(env, "other");
  std::string s = "tls|";
  s.append(h.hasName ? h.name : std::string("\x01")).append(h.ech ? "|1" : "|0");
  return Napi::String::New(env, s);
}

/**
 * fastVerdictBatch(handle, uid, hellos: Buffer[], ips: string[], ports: number[], answers: [name, v4[], v6[]][],
 * told) -> per case "more" | "arrival-js" | "js" | "refuse\t<tail>" | "relay\t<target>\t<tail>".
 */
Napi::Value FastVerdictBatch(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  const char* usage = "fastVerdictBatch(handle, uid, hellos[], ips[], ports[], answers[], told)";
  if (info.Length() < 7 || !info[0].IsExternal() || !info[2].IsArray() || !info[3].IsArray() || !info[4].IsArray() ||
      !info[5].IsArray())
    return Usage(env, usage);
  auto ext = info[0].As<Napi::External<PolicyHandle>>();
  if (!ext.CheckTypeTag(&kPolicyTag)) return Usage(env, usage);
  fast::Entry e;
  e.uid = info[1].ToNumber().Uint32Value();
  e.policy = ext.Data()->policy;
  fast::Names names;
  Napi::Array answers = info[5].As<Napi::Array>();
  for (uint32_t i = 0; i < answers.Length(); i++) {
    Napi::Array a = answers.Get(i).As<Napi::Array>();
    fast::Names::Answer ans;
    ans.expiresMs = INT64_MAX;
    for (int fam = 0; fam < 2; fam++) {
      Napi::Array list = a.Get(1 + fam).As<Napi::Array>();
      for (uint32_t k = 0; k < list.Length(); k++) {
        std::string s = list.Get(k).As<Napi::String>().Utf8Value();
        NetAddr addr;
        if (!ParseNetAddr(s, &addr, true)) continue;
        (fam == 0 ? ans.v4 : ans.v6).push_back(s);
        (fam == 0 ? ans.a4 : ans.a6).push_back(addr);
      }
    }
    names.Set(a.Get(0u).As<Napi::String>().Utf8Value(), std::move(ans));
  }
  const bool told = info[6].ToBoolean().Value();
  fast::OwnAddrs own;
  Napi::Array hellos = info[2].As<Napi::Array>(), ips = info[3].As<Napi::Array>(), ports = info[4].As<Napi::Array>();
  uint32_t n = hellos.Length();
  Napi::Array out = Napi::Array::New(env, n);
  for (uint32_t i = 0; i < n; i++) {
    fast::Dst d;
    d.ip = ips.Get(i).As<Napi::String>().Utf8Value();
    d.port = ports.Get(i).ToNumber().Int32Value();
    std::string r;
    if (!ParseNetAddr(d.ip, &d.addr, true)) {
      r = "arrival-js";
    } else if (fast::Arrival(e, d, &own, 0) != fast::Step::kPeek) {
      r = "arrival-js";
    } else {
      auto b = hellos.Get(i).As<Napi::Buffer<uint8_t>>();
      sni::Hello h = sni::Parse(b.Data(), b.Length());
      if (h.kind == sni::Kind::kMore) {
        r = "more";
      } else {
        fast::Plan p = fast::Decide(e, d, h, names, &own, 0, told);
        if (p.step == fast::Step::kRefuse) r = "refuse\t" + p.tail;
        else if (p.step == fast::Step::kRelay) r = "relay\t" + p.target + "\t" + p.tail;
        else r = "js";
      }
    }
    out.Set(i, Napi::String::New(env, r));
  }
  return out;
}

}  // namespace

void RegisterFastPathTests(Napi::Env env, Napi::Object exports) {
  exports.Set("sniParse", Napi::Function::New(env, SniParse, "sniParse"));
  exports.Set("fastVerdictBatch", Napi::Function::New(env, FastVerdictBatch, "fastVerdictBatch"));
}

}  // namespace leash
