// JavaScript's side of the network matcher (netmatch.h): compile a policy from the entries the
// engine parsed, judge one subject or a batch (the differential test), and the per-subject table.
#include <cmath>

#include "errors.h"
#include "netmatch.h"

namespace leash {

namespace {

// Tags the handle, so another addon External (a filesystem policy) is never read as a network one.
const napi_type_tag kPolicyTag = {0x6c6561736e65746dULL, 0x6e65746d61746368ULL};

struct Handle {
  std::shared_ptr<const NetPolicy> policy;
};

bool IsHandle(Napi::Value v) { return v.IsExternal() && v.As<Napi::External<Handle>>().CheckTypeTag(&kPolicyTag); }

const NetPolicy* PolicyArg(Napi::Value v) {
  return IsHandle(v) ? v.As<Napi::External<Handle>>().Data()->policy.get() : nullptr;
}

bool FailOpenArg(const Napi::CallbackInfo& info, size_t i) {
  return info.Length() > i && info[i].IsString() && info[i].As<Napi::String>().Utf8Value() == "open";
}

// One entry as src/dataplane/network/netmatch.ts passes it (the engine's NetworkEntry with its text).
bool AddEntry(NetPolicy* p, NetList* list, Napi::Object e) {
  Napi::Value rule = e.Get("rule");
  Napi::Value port = e.Get("port");
  if (!rule.IsString()) return false;
  int portNum = -1;
  if (port.IsNumber()) portNum = port.As<Napi::Number>().Int32Value();
  if (portNum < -1 || portNum > 65535) return false;
  p->rules.push_back(rule.As<Napi::String>().Utf8Value());
  const std::string* text = &p->rules.back();
  if (e.Get("kind").StrictEquals(Napi::String::New(e.Env(), "domain"))) {
    Napi::Value domain = e.Get("domain");
    if (!domain.IsString()) return false;
    list->domains.Add(domain.As<Napi::String>().Utf8Value(), e.Get("wildcard").ToBoolean().Value(), portNum, text);
    return true;
  }
  Napi::Value w = e.Get("w");
  Napi::Value len = e.Get("len");
  Napi::Value family = e.Get("family");
  if (!w.IsTypedArray() || !len.IsNumber() || !family.IsNumber()) return false;
  Napi::Uint32Array words = w.As<Napi::Uint32Array>();
  if (words.TypedArrayType() != napi_uint32_array || words.ElementLength() != 4) return false;
  NetAddr net;
  net.family = family.As<Napi::Number>().Int32Value();
  int bits = len.As<Napi::Number>().Int32Value();
  if ((net.family != 4 && net.family != 6) || bits < 0 || bits > (net.family == 4 ? 32 : 128)) return false;
  for (int k = 0; k < 4; k++) net.w[k] = words[k];
  list->ips.Add(net, bits, portNum, text);
  // A wider IPv6 network containing the mapped range covers all of IPv4 (the engine's coversAllV4).
  if (e.Get("coversAllV4").ToBoolean().Value()) list->ips.Add(NetAddr{4, {0, 0, 0, 0}}, 0, portNum, text);
  return true;
}

bool AddList(NetPolicy* p, NetList* list, Napi::Value v) {
  if (!v.IsArray()) return false;
  Napi::Array a = v.As<Napi::Array>();
  for (uint32_t i = 0; i < a.Length(); i++) {
    Napi::Value e = a.Get(i);
    if (!e.IsObject() || !AddEntry(p, list, e.As<Napi::Object>())) return false;
  }
  return true;
}

// The subject as decide() validates it; false where prepareNetworkSubject would throw (engine_error).
bool QueryFromJs(Napi::Value name, Napi::Value ip, Napi::Value port, Napi::Value own, NetQuery* q,
                 std::string* nameBuf) {
  if (!port.IsNumber()) return false;
  double pd = port.As<Napi::Number>().DoubleValue();
  if (!std::isfinite(pd) || pd != std::floor(pd) || pd < 0 || pd > 65535) return false;
  q->port = static_cast<int>(pd);
  if (name.IsString()) {
    *nameBuf = name.As<Napi::String>().Utf8Value();
    q->hasName = true;
    q->name = *nameBuf;
  } else if (!name.IsNull() && !name.IsUndefined()) {
    return false;
  }
  if (ip.IsString()) {
    std::string s = ip.As<Napi::String>().Utf8Value();
    q->hasIp = true;
    if (!s.empty()) {
      size_t pct = s.find('%');  // a zone index says nothing about the destination
      if (!ParseNetAddr(std::string_view(s).substr(0, pct), &q->ip)) return false;
    }
  } else if (!ip.IsNull() && !ip.IsUndefined()) {
    return false;
  }
  if (own.IsBoolean()) q->resolved = own.As<Napi::Boolean>().Value() ? 1 : 0;
  return true;
}

NetVerdict Judge(const NetPolicy* p, bool failOpen, Napi::Value name, Napi::Value ip, Napi::Value port,
                 Napi::Value own) {
  if (!p) return NetNoPolicy(failOpen);
  NetQuery q;
  std::string nameBuf;
  if (!QueryFromJs(name, ip, port, own, &q, &nameBuf)) return NetEngineError(*p);
  return MatchNetwork(*p, q);
}

Napi::Value VerdictObject(Napi::Env env, const NetVerdict& v) {
  if (v.action == NetAction::kUndecided) return env.Null();
  Napi::Object o = Napi::Object::New(env);
  o.Set("action", NetActionName(v.action));
  o.Set("reason", NetReasonName(v.reason));
  o.Set("source", NetSourceName(v.source));
  o.Set("rule", v.rule ? Napi::Value(Napi::String::New(env, *v.rule)) : env.Null());
  if (v.wouldBlock) o.Set("wouldBlock", true);
  return o;
}

Napi::Value CompileNetPolicy(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  const char* usage = "compileNetPolicy({failOpen, shadow, whitelist, allow, deny, ask, internal, ok})";
  if (info.Length() < 1 || !info[0].IsObject()) return Usage(env, usage);
  Napi::Object o = info[0].As<Napi::Object>();
  auto p = std::make_shared<NetPolicy>();
  p->failOpen = o.Get("failOpen").ToBoolean().Value();
  p->shadow = o.Get("shadow").ToBoolean().Value();
  p->whitelist = o.Get("whitelist").ToBoolean().Value();
  bool ok = AddList(p.get(), &p->allow, o.Get("allow")) && AddList(p.get(), &p->deny, o.Get("deny")) &&
            AddList(p.get(), &p->ask, o.Get("ask")) && AddList(p.get(), &p->internal, o.Get("internal")) &&
            AddList(p.get(), &p->ok, o.Get("ok"));
  if (!ok) return Usage(env, usage);
  auto ext = Napi::External<Handle>::New(env, new Handle{std::move(p)}, [](Napi::Env, Handle* h) { delete h; });
  ext.TypeTag(&kPolicyTag);
  return ext;
}

Napi::Value NetMatchJs(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  if (info.Length() < 4 || !(info[0].IsNull() || IsHandle(info[0])))
    return Usage(env, "netMatch(handle|null, name|null, ip|null, port, own?, failMode?)");
  return VerdictObject(env, Judge(PolicyArg(info[0]), FailOpenArg(info, 5), info[1], info[2], info[3], info[4]));
}

Napi::Value NetMatchBatch(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  if (info.Length() < 5 || !(info[0].IsNull() || IsHandle(info[0])) || !info[1].IsArray() || !info[2].IsArray() || !info[3].IsArray() || !info[4].IsArray())
    return Usage(env, "netMatchBatch(handle|null, names[], ips[], ports[], owns[], failMode?)");
  const NetPolicy* p = PolicyArg(info[0]);
  bool failOpen = FailOpenArg(info, 5);
  Napi::Array names = info[1].As<Napi::Array>(), ips = info[2].As<Napi::Array>();
  Napi::Array ports = info[3].As<Napi::Array>(), owns = info[4].As<Napi::Array>();
  uint32_t n = names.Length();
  Napi::Array out = Napi::Array::New(env, n);
  std::string s;
  for (uint32_t i = 0; i < n; i++) {
    NetVerdict v = Judge(p, failOpen, names.Get(i), ips.Get(i), ports.Get(i), owns.Get(i));
    if (v.action == NetAction::kUndecided) {
      s = "undecided";
    } else {
      s.assign(NetActionName(v.action)).append("|").append(NetReasonName(v.reason)).append("|");
      s.append(NetSourceName(v.source)).append("|").append(v.rule ? *v.rule : std::string("\x01null"));
      s.append(v.wouldBlock ? "|1" : "|0");
    }
    out.Set(i, Napi::String::New(env, s));
  }
  return out;
}

// new NetPolicyTable(): set(uid, handle|null, failMode), remove(uid), match(uid, name, ip, port, own?), size().
class NetPolicyTableJs : public Napi::ObjectWrap<NetPolicyTableJs> {
 public:
  static Napi::Function Define(Napi::Env env) {
    return DefineClass(env, "NetPolicyTable",
                       {InstanceMethod("set", &NetPolicyTableJs::Set), InstanceMethod("remove", &NetPolicyTableJs::Remove),
                        InstanceMethod("match", &NetPolicyTableJs::Match), InstanceMethod("size", &NetPolicyTableJs::Size)});
  }
  explicit NetPolicyTableJs(const Napi::CallbackInfo& info) : Napi::ObjectWrap<NetPolicyTableJs>(info) {}

 private:
  Napi::Value Set(const Napi::CallbackInfo& info) {
    Napi::Env env = info.Env();
    if (info.Length() < 2 || !info[0].IsNumber() || !(info[1].IsNull() || IsHandle(info[1])))
      return Usage(env, "set(uid, handle|null, failMode?)");
    std::shared_ptr<const NetPolicy> p;
    if (!info[1].IsNull()) p = info[1].As<Napi::External<Handle>>().Data()->policy;
    table_.Set(info[0].As<Napi::Number>().Uint32Value(), std::move(p), FailOpenArg(info, 2));
    return env.Undefined();
  }
  Napi::Value Remove(const Napi::CallbackInfo& info) {
    if (info.Length() < 1 || !info[0].IsNumber()) return Usage(info.Env(), "remove(uid)");
    table_.Remove(info[0].As<Napi::Number>().Uint32Value());
    return info.Env().Undefined();
  }
  Napi::Value Match(const Napi::CallbackInfo& info) {
    Napi::Env env = info.Env();
    if (info.Length() < 4 || !info[0].IsNumber()) return Usage(env, "match(uid, name|null, ip|null, port, own?)");
    std::shared_ptr<const NetPolicyTable::Slot> slot = table_.Get(info[0].As<Napi::Number>().Uint32Value());
    if (!slot) return env.Null();
    return VerdictObject(env, Judge(slot->policy.get(), slot->failOpen, info[1], info[2], info[3], info[4]));
  }
  Napi::Value Size(const Napi::CallbackInfo& info) {
    return Napi::Number::New(info.Env(), static_cast<double>(table_.Size()));
  }
  NetPolicyTable table_;
};

}  // namespace

void RegisterNetMatch(Napi::Env env, Napi::Object exports) {
  exports.Set("compileNetPolicy", Napi::Function::New(env, CompileNetPolicy, "compileNetPolicy"));
  exports.Set("netMatch", Napi::Function::New(env, NetMatchJs, "netMatch"));
  exports.Set("netMatchBatch", Napi::Function::New(env, NetMatchBatch, "netMatchBatch"));
  exports.Set("NetPolicyTable", NetPolicyTableJs::Define(env));
}

}  // namespace leash
