// The MCP gate's native judge (gatejudge_core.h) as JavaScript makes and asks it: the configuration read from
// src/tools/judge/native.ts (literals, needs, tools with their argument rules in native form), `judge` and `add`.
#include "gatejudge.h"

#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "gatejudge_core.h"
#include "jsonscan.h"
#include "jsonscan_core.h"
#include "walkcache.h"

namespace leash {
namespace {

using gatejudge::Judge;
using gatejudge::kAny;
using gatejudge::kArray;
using gatejudge::kMaxLiterals;
using gatejudge::kMaxTools;
using gatejudge::Lower;
using gatejudge::Need;
using gatejudge::Ops;
using gatejudge::OpsGlob;
using gatejudge::OpsIndex;
using gatejudge::OpsRule;
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

// ---- rules over operations (opsjudge_core.h), as src/tools/judge/native.ts hands them ----

constexpr size_t kMaxTemplates = 4096;

bool ReadInts(Napi::Env env, Napi::Value v, size_t below, std::vector<int>* out) {
  if (!v.IsArray()) return Fail(env, "an index list is not an array");
  auto a = v.As<Napi::Array>();
  for (uint32_t k = 0; k < a.Length(); k++) {
    const int x = a.Get(k).ToNumber().Int32Value();
    if (x < 0 || static_cast<size_t>(x) >= below) return Fail(env, "a rule index out of range");
    out->push_back(x);
  }
  return true;
}

// The code points of a UTF-8 string (a glob literal; JavaScript's strings come out of Utf8Value well formed).
std::u32string CodePoints(const std::string& s) {
  std::u32string out;
  for (size_t i = 0; i < s.size();) {
    const uint8_t c = static_cast<uint8_t>(s[i]);
    const int len = c < 0x80 ? 1 : c < 0xe0 ? 2 : c < 0xf0 ? 3 : 4;
    char32_t cp = len == 1 ? c : len == 2 ? (c & 0x1f) : len == 3 ? (c & 0x0f) : (c & 0x07);
    for (int k = 1; k < len && i + k < s.size(); k++) cp = (cp << 6) | (static_cast<uint8_t>(s[i + k]) & 0x3f);
    out.push_back(cp);
    i += len;
  }
  return out;
}

// engine/path.ts GlobToken[] into the watcher's CompiledGlob (fsmatch.h): a literal one token per code point.
bool ReadGlob(Napi::Env env, Napi::Value v, OpsGlob* g) {
  using Tok = leash::GlobTok;
  if (!v.IsObject()) return Fail(env, "a resource is not an object");
  auto o = v.As<Napi::Object>();
  g->lit = o.Get("lit").ToString().Utf8Value();
  Napi::Value tv = o.Get("tokens");
  if (!tv.IsArray()) return Fail(env, "a resource's tokens are not an array");
  auto toks = tv.As<Napi::Array>();
  for (uint32_t k = 0; k < toks.Length(); k++) {
    Napi::Value e = toks.Get(k);
    if (!e.IsObject()) return Fail(env, "a glob token is not an object");
    auto to = e.As<Napi::Object>();
    const std::string t = to.Get("t").ToString().Utf8Value();
    if (t == "lit") {
      for (char32_t c : CodePoints(to.Get("s").ToString().Utf8Value())) g->glob.toks.push_back({Tok::kLit, c, -1});
    } else if (t == "one") {
      g->glob.toks.push_back({Tok::kQuestion, 0, -1});
    } else if (t == "star") {
      g->glob.toks.push_back({Tok::kStar, 0, -1});
    } else if (t == "any") {
      g->glob.toks.push_back({Tok::kAny, 0, -1});
    } else if (t == "segs") {
      g->glob.toks.push_back({Tok::kGlobstar, 0, -1});
    } else if (t == "class") {
      GlobClass cls{to.Get("negate").ToBoolean().Value(), {}};
      Napi::Value rv = to.Get("ranges");
      if (!rv.IsArray()) return Fail(env, "a class's ranges are not an array");
      auto r = rv.As<Napi::Array>();
      if (r.Length() % 2 != 0) return Fail(env, "a class's ranges are not pairs");
      for (uint32_t x = 0; x + 1 < r.Length(); x += 2)
        cls.ranges.emplace_back(r.Get(x).ToNumber().Uint32Value(), r.Get(x + 1).ToNumber().Uint32Value());
      g->glob.classes.push_back(std::move(cls));
      g->glob.toks.push_back({Tok::kClass, 0, static_cast<int>(g->glob.classes.size() - 1)});
    } else {
      return Fail(env, "an unknown glob token");
    }
  }
  return true;
}

// {default, rules: [{effect, never, resources}], index: [{always, tops: [[top, [k...]]]}], memory, span}
bool ReadOps(Napi::Env env, Napi::Object o, Ops* ops) {
  ops->def = o.Get("default").ToNumber().Int32Value();
  Napi::Value rv = o.Get("rules"), iv = o.Get("index");
  if (!rv.IsArray() || !iv.IsArray()) return Fail(env, "ops needs rules and index arrays");
  auto rules = rv.As<Napi::Array>();
  for (uint32_t k = 0; k < rules.Length(); k++) {
    Napi::Value e = rules.Get(k);
    if (!e.IsObject()) return Fail(env, "an operation rule is not an object");
    auto ro = e.As<Napi::Object>();
    OpsRule r;
    r.effect = ro.Get("effect").ToNumber().Int32Value();
    r.never = ro.Get("never").ToBoolean().Value();
    Napi::Value res = ro.Get("resources");
    r.anyResource = res.IsNull() || res.IsUndefined();
    if (!r.anyResource) {
      if (!res.IsArray()) return Fail(env, "a rule's resources are not an array");
      auto ra = res.As<Napi::Array>();
      for (uint32_t x = 0; x < ra.Length(); x++) {
        OpsGlob g;
        if (!ReadGlob(env, ra.Get(x), &g)) return false;
        r.resources.push_back(std::move(g));
      }
    }
    ops->rules.push_back(std::move(r));
  }
  auto index = iv.As<Napi::Array>();
  for (uint32_t k = 0; k < index.Length(); k++) {
    Napi::Value e = index.Get(k);
    if (!e.IsObject()) return Fail(env, "an operation's index is not an object");
    auto io = e.As<Napi::Object>();
    OpsIndex ix;
    if (!ReadInts(env, io.Get("always"), ops->rules.size(), &ix.always)) return false;
    Napi::Value tv = io.Get("tops");
    if (!tv.IsArray()) return Fail(env, "an index's tops are not an array");
    auto tops = tv.As<Napi::Array>();
    for (uint32_t t = 0; t < tops.Length(); t++) {
      Napi::Value pv = tops.Get(t);
      if (!pv.IsArray() || pv.As<Napi::Array>().Length() != 2) return Fail(env, "a top is not [name, rules]");
      auto pair = pv.As<Napi::Array>();
      std::vector<int> list;
      if (!ReadInts(env, pair.Get(1u), ops->rules.size(), &list)) return false;
      ix.withAlways.emplace(pair.Get(0u).ToString().Utf8Value(), std::move(list));
    }
    ops->byOp.push_back(std::move(ix));
  }
  ops->memory = PathMemoryOf(o.Get("memory"));
  if (ops->memory == nullptr) return Fail(env, "ops.memory is not a WalkCache");
  return true;
}

struct Holder {
  std::shared_ptr<Judge> j;
  // Kept alive with the judge: the walk it asks, and the array it writes the path's place into.
  std::shared_ptr<Napi::ObjectReference> memory;
  std::shared_ptr<Napi::Reference<Napi::Int32Array>> span;
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
  // Under rules over operations: {operation: code, arg: the path argument's name}.
  if (j.ops != nullptr) {
    if (info.Length() < 3 || !info[2].IsObject()) {
      Napi::TypeError::New(env, "add: a judge over operations takes {operation, arg}").ThrowAsJavaScriptException();
      return env.Undefined();
    }
    auto op = info[2].As<Napi::Object>();
    t.op = op.Get("operation").ToNumber().Int32Value();
    t.arg = op.Get("arg").ToString().Utf8Value();
    if (t.op < 0 || static_cast<size_t>(t.op) >= j.ops->byOp.size() || t.arg.empty()) {
      Napi::TypeError::New(env, "add: an operation code or argument out of range").ThrowAsJavaScriptException();
      return env.Undefined();
    }
  }
  j.names.push_back(std::move(name));
  const int idx = static_cast<int>(j.tools.size());
  j.tools.push_back(std::move(t));
  j.byName.emplace(std::string_view(j.names.back()), idx);
  return Napi::Number::New(env, idx);
}

// requests(chunk: Buffer, at: number) -> n, with `lines` (a Float64Array of 5 * K) given to createGateJudge: from
// byte `at` of a chunk from the client, the whole lines (each ending in LF) that are plain tools/calls this judge
// certainly allows: canonical (jsonscan_core.h), exactly the envelope members, jsonrpc "2.0", the method
// "tools/call", an integer id, params an object that Judge1 allows. For the k-th: lines[5k] the offset just after
// its LF, [5k+1] its id, [5k+2] what Judge1 answered, [5k+3..5k+4] the path's place in the chunk (rules over
// operations). Stops before the first other line, at the chunk's end, or after K lines. The gate still checks each
// id is not in use (src/tools/gate/client.ts); the line by line path (scan, then judge) answers the same.
struct Requests {
  Holder holder;
  Napi::Reference<Napi::Float64Array> keep;
  double* out = nullptr;
  size_t max = 0;
  jsonscan::Scanner scanner;
};

Napi::Value RequestsJs(const Napi::CallbackInfo& info) {
  auto* r = static_cast<Requests*>(info.Data());
  Judge& j = *r->holder.j;
  Napi::Env env = info.Env();
  const uint8_t* b;
  size_t n, at;
  if (!ChunkArgs(info, "requests(chunk: Buffer, at: number)", &b, &n, &at)) return env.Undefined();
  if (at == SIZE_MAX) return Napi::Number::New(env, 0);
  static constexpr uint32_t kNeed = jsonscan::kRequestNeed | jsonscan::kHasId | jsonscan::kIdInt |
                                    jsonscan::kHasParams | jsonscan::kParamsObject;
  static constexpr char kCall[] = "tools/call";
  const size_t k = jsonscan::ScanLines(r->scanner, b, n, at, r->max, [&](size_t i, size_t s, size_t e, double* top) {
    const uint32_t f = static_cast<uint32_t>(top[0]);
    if ((f & kNeed) != kNeed || (f & jsonscan::kRequestNot) != 0) return false;
    const size_t ms = s + static_cast<size_t>(top[4]), me = s + static_cast<size_t>(top[5]);
    if (me - ms != sizeof kCall - 1 || std::memcmp(b + ms, kCall, sizeof kCall - 1) != 0) return false;
    const int idx = j.Judge1(b, s + static_cast<size_t>(top[6]), s + static_cast<size_t>(top[7]));
    if (idx < 0) return false;
    double* o = r->out + 5 * i;
    o[0] = static_cast<double>(e + 1);
    o[1] = top[1];
    o[2] = idx;
    o[3] = j.span == nullptr ? 0 : j.span[0];
    o[4] = j.span == nullptr ? 0 : j.span[1];
    return true;
  });
  return Napi::Number::New(env, static_cast<double>(k));
}

// addTemplate(tool, rule) -> the index `judge` answers for a call to that tool allowed by that rule (-1: the
// default's allow), or -1 when no more are taken.
Napi::Value AddTemplateJs(const Napi::CallbackInfo& info) {
  Judge& j = *static_cast<Holder*>(info.Data())->j;
  Napi::Env env = info.Env();
  const int tool = info.Length() < 2 ? -1 : info[0].ToNumber().Int32Value();
  if (j.ops == nullptr || tool < 0 || static_cast<size_t>(tool) >= j.tools.size()) {
    Napi::TypeError::New(env, "addTemplate(tool, rule) on a judge over operations").ThrowAsJavaScriptException();
    return env.Undefined();
  }
  const int rule = info[1].ToNumber().Int32Value();
  if (rule < gatejudge::kDefaultRule || rule >= static_cast<int>(j.ops->rules.size())) {
    Napi::TypeError::New(env, "addTemplate: a rule index out of range").ThrowAsJavaScriptException();
    return env.Undefined();
  }
  auto& m = j.tools[tool].templates;
  auto found = m.find(rule);
  if (found != m.end()) return Napi::Number::New(env, found->second);
  if (j.ops->templates >= kMaxTemplates) return Napi::Number::New(env, -1);
  const int k = static_cast<int>(j.ops->templates++);
  m.emplace(rule, k);
  return Napi::Number::New(env, k);
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
    const uint8_t first = static_cast<uint8_t>(s[0]);
    if (s.size() == 1) {
      j->oneByte[first] |= uint64_t{1} << k;
    } else {
      j->byFirst[first].push_back(static_cast<uint8_t>(k));
      j->pairs.set((static_cast<size_t>(first) << 8) | static_cast<uint8_t>(s[1]));
    }
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
  Holder base{j, nullptr, nullptr};
  Napi::Value ov = cfg.Get("ops");
  if (ov.IsObject()) {
    j->ops = std::make_unique<Ops>();
    auto oo = ov.As<Napi::Object>();
    if (!ReadOps(env, oo, j->ops.get())) return env.Undefined();
    Napi::Value sv = oo.Get("span");
    if (!sv.IsTypedArray() || sv.As<Napi::TypedArray>().TypedArrayType() != napi_int32_array ||
        sv.As<Napi::Int32Array>().ElementLength() < 2)
      return Fail(env, "ops.span is not an Int32Array of 2"), env.Undefined();
    j->span = sv.As<Napi::Int32Array>().Data();
    base.memory = std::make_shared<Napi::ObjectReference>(Napi::Persistent(oo.Get("memory").As<Napi::Object>()));
    base.span = std::make_shared<Napi::Reference<Napi::Int32Array>>(Napi::Persistent(sv.As<Napi::Int32Array>()));
  } else if (!ov.IsUndefined() && !ov.IsNull()) {
    return Fail(env, "ops is an object when given"), env.Undefined();
  }
  auto* hj = new Holder(base);
  auto* ha = new Holder(base);
  Napi::Function judge = Napi::Function::New(env, JudgeJs, "judge", hj);
  judge.AddFinalizer([](Napi::Env, Holder* p) { delete p; }, hj);
  Napi::Function add = Napi::Function::New(env, AddJs, "add", ha);
  add.AddFinalizer([](Napi::Env, Holder* p) { delete p; }, ha);
  Napi::Object out = Napi::Object::New(env);
  out.Set("judge", judge);
  out.Set("add", add);
  Napi::Value linesv = cfg.Get("lines");
  if (linesv.IsTypedArray() && linesv.As<Napi::TypedArray>().TypedArrayType() == napi_float64_array &&
      linesv.As<Napi::Float64Array>().ElementLength() >= 5) {
    auto* rq = new Requests();
    rq->holder = base;
    rq->keep = Napi::Persistent(linesv.As<Napi::Float64Array>());
    rq->out = linesv.As<Napi::Float64Array>().Data();
    rq->max = linesv.As<Napi::Float64Array>().ElementLength() / 5;
    Napi::Function requests = Napi::Function::New(env, RequestsJs, "requests", rq);
    requests.AddFinalizer([](Napi::Env, Requests* p) { delete p; }, rq);
    out.Set("requests", requests);
  } else if (!linesv.IsUndefined()) {
    return Fail(env, "lines is a Float64Array of at least 5 when given"), env.Undefined();
  }
  if (j->ops != nullptr) {
    auto* ht = new Holder(base);
    Napi::Function addTemplate = Napi::Function::New(env, AddTemplateJs, "addTemplate", ht);
    addTemplate.AddFinalizer([](Napi::Env, Holder* p) { delete p; }, ht);
    out.Set("addTemplate", addTemplate);
  }
  return out;
}

}  // namespace leash
