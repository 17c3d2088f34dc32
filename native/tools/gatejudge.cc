// The MCP gate's native judge (gatejudge_core.h) as JavaScript makes and asks it: the configuration read from
// src/tools/judge/native.ts (literals, needs, tools with their argument rules in native form), `judge` and `add`.
#include "gatejudge.h"

#include <memory>
#include <string>
#include <vector>

#include "gatejudge_core.h"

namespace leash {
namespace {

using gatejudge::Judge;
using gatejudge::kAny;
using gatejudge::kArray;
using gatejudge::kMaxLiterals;
using gatejudge::kMaxTools;
using gatejudge::Lower;
using gatejudge::Need;
using gatejudge::PathRules;
using gatejudge::Regex;
using gatejudge::Rule;
using gatejudge::Tool;

// ---- reading the configuration from JavaScript ----

bool Fail(Napi::Env env, const std::string& what) {
  Napi::TypeError::New(env, "createGateJudge: " + what).ThrowAsJavaScriptException();
  return false;
}

bool ReadRegex(Napi::Env env, Napi::Value v, Regex* out) {
  if (v.IsNull() || v.IsUndefined()) return true;
  if (!v.IsObject()) return Fail(env, "a rule's re is not an object");
  auto o = v.As<Napi::Object>();
  std::string kind = o.Get("kind").ToString().Utf8Value();
  out->end = o.Get("end").ToBoolean().Value();
  if (kind == "literal") {
    out->kind = Regex::kLiteral;
    out->lit = o.Get("lit").ToString().Utf8Value();
    out->start = o.Get("start").ToBoolean().Value();
    for (char c : out->lit)
      if (static_cast<uint8_t>(c) >= 0x80) return Fail(env, "a literal is not ASCII");
    return true;
  }
  if (kind != "atoms") return Fail(env, "a rule's re is neither literal nor atoms");
  out->kind = Regex::kAtoms;
  Napi::Value av = o.Get("atoms");
  if (!av.IsArray()) return Fail(env, "atoms is not an array");
  auto atoms = av.As<Napi::Array>();
  for (uint32_t k = 0; k < atoms.Length(); k++) {
    Napi::Value e = atoms.Get(k);
    if (!e.IsObject()) return Fail(env, "an atom is not an object");
    auto ao = e.As<Napi::Object>();
    Regex::Atom a;
    for (char c : ao.Get("chars").ToString().Utf8Value()) {
      if (static_cast<uint8_t>(c) >= 0x80) return Fail(env, "an atom's characters are not ASCII");
      a.set.set(static_cast<uint8_t>(c));
    }
    std::string q = ao.Get("q").ToString().Utf8Value();
    if (q.size() > 1 || (q.size() == 1 && q != "?" && q != "*" && q != "+")) return Fail(env, "an atom's q");
    a.q = q.empty() ? 0 : q[0];
    out->atoms.push_back(a);
  }
  return true;
}

bool ReadPaths(Napi::Env env, Napi::Value v, std::vector<PathRules>* out) {
  if (!v.IsArray()) return Fail(env, "allow/deny is not an array");
  auto arr = v.As<Napi::Array>();
  for (uint32_t k = 0; k < arr.Length(); k++) {
    Napi::Value e = arr.Get(k);
    if (!e.IsObject()) return Fail(env, "a path is not an object");
    auto po = e.As<Napi::Object>();
    PathRules p;
    Napi::Value segs = po.Get("segs"), rules = po.Get("rules");
    if (!segs.IsArray() || !rules.IsArray()) return Fail(env, "a path needs segs and rules");
    auto sa = segs.As<Napi::Array>();
    for (uint32_t s = 0; s < sa.Length(); s++) p.segs.push_back(sa.Get(s).ToString().Utf8Value());
    auto ra = rules.As<Napi::Array>();
    for (uint32_t r = 0; r < ra.Length(); r++) {
      Napi::Value rv = ra.Get(r);
      if (!rv.IsObject()) return Fail(env, "a rule is not an object");
      auto ro = rv.As<Napi::Object>();
      Rule rule;
      rule.type = ro.Get("type").ToNumber().Int32Value();
      if (rule.type < kAny || rule.type > kArray) return Fail(env, "a rule's type code");
      rule.admitsDotDot = ro.Get("admitsDotDot").ToBoolean().Value();
      if (!ReadRegex(env, ro.Get("re"), &rule.re)) return false;
      p.rules.push_back(std::move(rule));
    }
    out->push_back(std::move(p));
  }
  return true;
}

struct Holder {
  std::shared_ptr<Judge> j;
};

Napi::Value JudgeJs(const Napi::CallbackInfo& info) {
  Judge& j = *static_cast<Holder*>(info.Data())->j;
  Napi::Env env = info.Env();
  if (info.Length() < 3 || !info[0].IsBuffer()) {
    Napi::TypeError::New(env, "judge(line: Buffer, start, end)").ThrowAsJavaScriptException();
    return env.Undefined();
  }
  auto buf = info[0].As<Napi::Buffer<uint8_t>>();
  const double s = info[1].As<Napi::Number>().DoubleValue(), e = info[2].As<Napi::Number>().DoubleValue();
  if (!(s >= 0 && e >= s && e <= static_cast<double>(buf.Length()))) return Napi::Number::New(env, -1);
  return Napi::Number::New(env, j.Judge1(buf.Data(), static_cast<size_t>(s), static_cast<size_t>(e)));
}

Napi::Value AddJs(const Napi::CallbackInfo& info) {
  Judge& j = *static_cast<Holder*>(info.Data())->j;
  Napi::Env env = info.Env();
  if (info.Length() < 2 || !info[0].IsString()) {
    Napi::TypeError::New(env, "add(name: string, tool)").ThrowAsJavaScriptException();
    return env.Undefined();
  }
  std::string name = info[0].As<Napi::String>().Utf8Value();
  auto found = j.byName.find(name);
  if (found != j.byName.end()) return Napi::Number::New(env, found->second);
  if (j.tools.size() >= kMaxTools) return Napi::Number::New(env, -1);
  Tool t;
  if (info[1].IsObject()) {
    auto o = info[1].As<Napi::Object>();
    t.hasRules = true;
    t.allowAny = o.Get("allowAny").ToBoolean().Value();
    if (!ReadPaths(env, o.Get("allow"), &t.allow) || !ReadPaths(env, o.Get("deny"), &t.deny)) return env.Undefined();
  } else if (!info[1].IsNull()) {
    Napi::TypeError::New(env, "add: tool is an object or null").ThrowAsJavaScriptException();
    return env.Undefined();
  }
  j.names.push_back(std::move(name));
  const int idx = static_cast<int>(j.tools.size());
  j.tools.push_back(std::move(t));
  j.byName.emplace(std::string_view(j.names.back()), idx);
  return Napi::Number::New(env, idx);
}

}  // namespace

Napi::Value CreateGateJudge(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  if (info.Length() < 1 || !info[0].IsObject()) {
    Napi::TypeError::New(env, "createGateJudge({strictArgs, literals, needs})").ThrowAsJavaScriptException();
    return env.Undefined();
  }
  auto cfg = info[0].As<Napi::Object>();
  auto j = std::make_shared<Judge>();
  j->strictArgs = cfg.Get("strictArgs").ToBoolean().Value();
  Napi::Value lv = cfg.Get("literals"), nv = cfg.Get("needs");
  if (!lv.IsArray() || !nv.IsArray()) return Fail(env, "literals and needs must be arrays"), env.Undefined();
  auto lits = lv.As<Napi::Array>();
  if (lits.Length() > kMaxLiterals) return Fail(env, "at most 64 literals"), env.Undefined();
  for (uint32_t k = 0; k < lits.Length(); k++) {
    std::string s = lits.Get(k).ToString().Utf8Value();
    if (s.empty() || s.size() > 64) return Fail(env, "a literal is not 1 to 64 bytes"), env.Undefined();
    for (char& c : s) {
      if (static_cast<uint8_t>(c) >= 0x80) return Fail(env, "a literal is not ASCII"), env.Undefined();
      c = static_cast<char>(Lower(static_cast<uint8_t>(c)));
    }
    j->byFirst[static_cast<uint8_t>(s[0])].push_back(static_cast<uint8_t>(k));
    j->literals.push_back(std::move(s));
  }
  auto needs = nv.As<Napi::Array>();
  for (uint32_t k = 0; k < needs.Length(); k++) {
    Napi::Value e = needs.Get(k);
    if (!e.IsObject()) return Fail(env, "a need is not an object"), env.Undefined();
    auto o = e.As<Napi::Object>();
    Need need;
    need.digits = o.Get("digits").ToNumber().Int32Value();
    Napi::Value all = o.Get("all");
    if (!all.IsArray()) return Fail(env, "a need's all is not an array"), env.Undefined();
    auto groups = all.As<Napi::Array>();
    for (uint32_t g = 0; g < groups.Length(); g++) {
      Napi::Value gv = groups.Get(g);
      if (!gv.IsArray()) return Fail(env, "a need's group is not an array"), env.Undefined();
      auto idx = gv.As<Napi::Array>();
      uint64_t mask = 0;
      for (uint32_t x = 0; x < idx.Length(); x++) {
        const uint32_t li = idx.Get(x).ToNumber().Uint32Value();
        if (li >= j->literals.size()) return Fail(env, "a need names a literal out of range"), env.Undefined();
        mask |= uint64_t{1} << li;
      }
      need.all.push_back(mask);
    }
    j->needs.push_back(std::move(need));
  }
  auto* hj = new Holder{j};
  auto* ha = new Holder{j};
  Napi::Function judge = Napi::Function::New(env, JudgeJs, "judge", hj);
  judge.AddFinalizer([](Napi::Env, Holder* p) { delete p; }, hj);
  Napi::Function add = Napi::Function::New(env, AddJs, "add", ha);
  add.AddFinalizer([](Napi::Env, Holder* p) { delete p; }, ha);
  Napi::Object out = Napi::Object::New(env);
  out.Set("judge", judge);
  out.Set("add", add);
  return out;
}

}  // namespace leash
