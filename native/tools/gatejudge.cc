// The MCP gate's native judge of a plain tools/call (src/tools/judge/native.ts builds it).
//
// The gate's JavaScript judge stays the definition: it judges every call this code does not answer,
// and it alone ever denies. This code answers only "certainly allowed" for a call whose every step it
// can take exactly as JavaScript does, and -1 ("not sure") for anything else:
//   - params is an object of `name` (a string without escapes), optionally `arguments` (an object), and
//     members the judge ignores (`_meta`); no selector or other spelling of one;
//   - the name was registered by JavaScript after it judged the name allowed (the registry's verdict
//     depends on the name alone), with the tool's argument rules in native form;
//   - no detector's need (src/engine/inspect.ts DETECTOR_NEEDS) is met anywhere in the arguments'
//     bytes: keys and values, so inspection would find nothing;
//   - the arguments hold no escape, no number other than an integer, nest at most 64 deep, no array of more
//     than 1,024 elements;
//   - the argument rules admit them as decide.ts checkArgs does (deny on every value, then allow at
//     exactly its path, `..` only where the pattern spells it out, strict_args), with patterns that are
//     a literal or deterministic atoms (src/tools/judge/linear-regex.ts NativeRegex).
// The line was accepted by the JSON scanner first (jsonscan.cc): canonical, ASCII, no duplicate key;
// this code still checks every byte it reads and answers -1 on anything unexpected.
// tests/native/gatejudge-diff.test.ts compares it with the JavaScript judge on generated calls.
#include "gatejudge.h"

#include <array>
#include <bitset>
#include <cstdint>
#include <cstring>
#include <deque>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace leash {
namespace {

constexpr size_t kMaxLiterals = 64;
constexpr size_t kMaxTools = 4096;
constexpr int kMaxDepth = 64;

// decide.ts jsonType, as codes (an empty object is a leaf; arrays are never read here).
enum Type : int { kAny = -1, kString = 0, kNumber = 1, kBoolean = 2, kNull = 3, kObject = 4, kArray = 5 };

inline uint8_t Lower(uint8_t c) { return (c >= 'A' && c <= 'Z') ? static_cast<uint8_t>(c | 0x20) : c; }

struct Regex {
  enum Kind { kNone, kLiteral, kAtoms } kind = kNone;
  std::string lit;
  bool start = false, end = false;
  struct Atom {
    std::bitset<128> set;
    char q;  // 0, '?', '*', '+'
  };
  std::vector<Atom> atoms;

  bool Test(std::string_view t) const {
    switch (kind) {
      case kNone:
        return true;
      case kLiteral:
        if (start && end) return t == lit;
        if (start) return t.size() >= lit.size() && t.compare(0, lit.size(), lit) == 0;
        if (end) return t.size() >= lit.size() && t.compare(t.size() - lit.size(), lit.size(), lit) == 0;
        return t.find(lit) != std::string_view::npos;
      case kAtoms: {
        // Anchored at the start; greedy, which is exact: no repeated atom's characters can start
        // what follows it (linear-regex.ts deterministicOf), so no other choice could succeed.
        size_t i = 0;
        for (const Atom& a : atoms) {
          auto in = [&](size_t k) { return k < t.size() && static_cast<uint8_t>(t[k]) < 128 && a.set.test(t[k]); };
          if (a.q == 0 || a.q == '+') {
            if (!in(i)) return false;
            i++;
          }
          if (a.q == '?') {
            if (in(i)) i++;
          } else if (a.q == '*' || a.q == '+') {
            while (in(i)) i++;
          }
        }
        return !end || i == t.size();
      }
    }
    return false;
  }
};

struct Rule {
  int type = kAny;
  Regex re;
  bool admitsDotDot = false;
};

struct PathRules {
  std::vector<std::string> segs;
  std::vector<Rule> rules;
};

struct Tool {
  bool hasRules = false;
  bool allowAny = false;
  std::vector<PathRules> allow, deny;
};

struct Need {
  std::vector<uint64_t> all;  // each: a mask of literal indices, one of which must occur
  int digits = 0;
};

struct Leaf {
  uint32_t pathAt, pathLen;  // into Judge::pool
  int type;
  std::string_view text;
  // An array of scalars read as its elements joined by spaces (checked by deny rules only).
  bool joined = false;
  // The place kept for an array's joined leaf when one of its elements is not a scalar.
  bool skip = false;
};

// An array element's path segment, as JavaScript's String(k).
constexpr size_t kMaxElements = 1024;
const std::vector<std::string>& IndexNames() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> v;
    for (size_t k = 0; k < kMaxElements; k++) v.push_back(std::to_string(k));
    return v;
  }();
  return names;
}

// decide.ts segsMatch: glob segments (`*` one, `**` any number) against path[ti, len), exactly;
// `fold` compares the path's ASCII letters lower-cased (deny patterns are stored lower case).
bool SegsMatch(const std::vector<std::string>& pat, size_t pi, const std::string_view* path, size_t ti, size_t len,
               bool fold) {
  if (pi == pat.size()) return ti == len;
  const std::string& p = pat[pi];
  if (p == "**") {
    for (size_t k = ti; k <= len; k++)
      if (SegsMatch(pat, pi + 1, path, k, len, fold)) return true;
    return false;
  }
  if (ti == len) return false;
  bool same = p == "*";
  if (!same) {
    std::string_view s = path[ti];
    same = s.size() == p.size();
    for (size_t k = 0; same && k < s.size(); k++)
      same = (fold ? Lower(static_cast<uint8_t>(s[k])) : static_cast<uint8_t>(s[k])) == static_cast<uint8_t>(p[k]);
  }
  return same && SegsMatch(pat, pi + 1, path, ti + 1, len, fold);
}

// decide.ts DOTDOT: a `..` segment between the ends or `/` (`\` cannot occur: escapes are not read).
bool HasDotDotSegment(std::string_view t) {
  for (size_t i = t.find(".."); i != std::string_view::npos; i = t.find("..", i + 1)) {
    bool before = i == 0 || t[i - 1] == '/';
    bool after = i + 2 == t.size() || t[i + 2] == '/';
    if (before && after) return true;
  }
  return false;
}

struct Judge {
  bool strictArgs = false;
  std::vector<std::string> literals;  // lower case
  std::array<std::vector<uint8_t>, 256> byFirst;  // literal indices by first byte
  std::vector<Need> needs;
  std::deque<std::string> names;  // owns the bytes the map's keys view
  std::unordered_map<std::string_view, int> byName;
  std::vector<Tool> tools;

  // Per call (kept to reuse their storage).
  std::vector<std::string_view> path;
  std::vector<std::string_view> pool;
  std::vector<Leaf> leaves;
  std::deque<std::string> joinedTexts;
  const uint8_t* b = nullptr;
  size_t i = 0, n = 0;

  // ---- reading (canonical JSON: no whitespace) ----
  bool Str(std::string_view* out) {
    if (i >= n || b[i] != '"') return false;
    size_t s = ++i;
    for (; i < n; i++) {
      uint8_t c = b[i];
      if (c == '"') {
        *out = std::string_view(reinterpret_cast<const char*>(b + s), i - s);
        i++;
        return true;
      }
      if (c == '\\' || c < 0x20 || c >= 0x7f) return false;
    }
    return false;
  }
  bool Word(const char* w, size_t len) {
    if (n - i < len || std::memcmp(b + i, w, len) != 0) return false;
    i += len;
    return true;
  }
  void AddLeaf(int type, std::string_view text) {
    leaves.push_back({static_cast<uint32_t>(pool.size()), static_cast<uint32_t>(path.size()), type, text});
    pool.insert(pool.end(), path.begin(), path.end());
  }
  // decide.ts leaves(): an empty array is a leaf; an array of scalars is also a joined leaf; every element is
  // read at its index.
  bool Array(int depth) {
    i++;
    if (i < n && b[i] == ']') {
      i++;
      AddLeaf(kArray, "[]");
      return true;
    }
    const size_t at = leaves.size();
    AddLeaf(kArray, "");
    bool scalars = true;
    std::string joined;
    const std::vector<std::string>& names = IndexNames();
    for (size_t k = 0;; k++) {
      if (k >= kMaxElements || i >= n) return false;
      if (b[i] == '{' || b[i] == '[') scalars = false;
      path.push_back(names[k]);
      const size_t before = leaves.size();
      if (!Value(depth + 1)) return false;
      path.pop_back();
      if (scalars) {
        if (k > 0) joined += ' ';
        joined.append(leaves[before].text);
      }
      if (i >= n) return false;
      if (b[i] == ',') {
        i++;
        continue;
      }
      if (b[i] != ']') return false;
      i++;
      break;
    }
    if (scalars) {
      joinedTexts.push_back(std::move(joined));
      leaves[at].text = joinedTexts.back();
      leaves[at].joined = true;
    } else {
      leaves[at].skip = true;
    }
    return true;
  }
  bool Value(int depth) {
    if (i >= n || depth > kMaxDepth) return false;
    uint8_t c = b[i];
    if (c == '"') {
      std::string_view s;
      if (!Str(&s)) return false;
      AddLeaf(kString, s);
      return true;
    }
    if (c == '{') return Object(depth, false);
    if (c == '[') return Array(depth);
    if (c == 't') return Word("true", 4) && (AddLeaf(kBoolean, "true"), true);
    if (c == 'f') return Word("false", 5) && (AddLeaf(kBoolean, "false"), true);
    if (c == 'n') return Word("null", 4) && (AddLeaf(kNull, "null"), true);
    if (c == '-' || (c >= '0' && c <= '9')) {
      size_t s = i;
      if (c == '-') i++;
      size_t d = i;
      while (i < n && b[i] >= '0' && b[i] <= '9') i++;
      if (i == d || i - d > 15) return false;
      if (i < n && (b[i] == '.' || b[i] == 'e' || b[i] == 'E')) return false;  // integers only
      AddLeaf(kNumber, std::string_view(reinterpret_cast<const char*>(b + s), i - s));
      return true;
    }
    return false;  // anything unexpected
  }
  // An object at b[i]; `top`: the arguments themselves (an empty one is no leaf, as in checkArgs).
  bool Object(int depth, bool top) {
    if (i >= n || b[i] != '{') return false;
    i++;
    if (i < n && b[i] == '}') {
      i++;
      if (!top) AddLeaf(kObject, "{}");
      return true;
    }
    for (;;) {
      std::string_view k;
      if (!Str(&k) || i >= n || b[i] != ':') return false;
      i++;
      path.push_back(k);
      if (!Value(depth + 1)) return false;
      path.pop_back();
      if (i >= n) return false;
      if (b[i] == ',') {
        i++;
        continue;
      }
      if (b[i] == '}') {
        i++;
        return true;
      }
      return false;
    }
  }

  // A canonical value of any kind, skipped (strings may hold escapes: nothing in them is read).
  bool Skip(int depth) {
    if (i >= n || depth > kMaxDepth) return false;
    const uint8_t c = b[i];
    if (c == '"') {
      for (i++; i < n; i++) {
        if (b[i] == '\\') i++;
        else if (b[i] == '"') {
          i++;
          return true;
        }
      }
      return false;
    }
    if (c == '{' || c == '[') {
      const uint8_t close = c == '{' ? '}' : ']';
      i++;
      if (i < n && b[i] == close) {
        i++;
        return true;
      }
      for (;;) {
        if (c == '{') {
          if (!Skip(depth + 1) || i >= n || b[i] != ':') return false;
          i++;
        }
        if (!Skip(depth + 1) || i >= n) return false;
        if (b[i] == ',') {
          i++;
          continue;
        }
        if (b[i] != close) return false;
        i++;
        return true;
      }
    }
    if (c == 't') return Word("true", 4);
    if (c == 'f') return Word("false", 5);
    if (c == 'n') return Word("null", 4);
    const size_t s = i;
    while (i < n && ((b[i] >= '0' && b[i] <= '9') || b[i] == '-' || b[i] == '+' || b[i] == '.' || b[i] == 'e' ||
                     b[i] == 'E'))
      i++;
    return i > s;
  }

  static bool IsSelectorSpelling(std::string_view k) {
    std::string low;
    for (char ch : k) {
      if (ch == ' ') return true;
      low += static_cast<char>(Lower(static_cast<uint8_t>(ch)));
    }
    return low == "name" || low == "arguments" || low == "uri" || low == "ref";
  }

  // ---- inspection: is any detector's need met in these bytes? ----
  bool AnyNeedMet(const uint8_t* p, size_t len) const {
    uint64_t present = 0;
    int digits = 0;
    for (size_t k = 0; k < len; k++) {
      const uint8_t c = Lower(p[k]);
      if (c >= '0' && c <= '9') digits++;
      for (uint8_t li : byFirst[c]) {
        if (present & (uint64_t{1} << li)) continue;
        const std::string& lit = literals[li];
        if (k + lit.size() > len) continue;
        size_t m = 1;
        while (m < lit.size() && Lower(p[k + m]) == static_cast<uint8_t>(lit[m])) m++;
        if (m == lit.size()) present |= uint64_t{1} << li;
      }
    }
    for (const Need& need : needs) {
      if (digits < need.digits) continue;
      bool met = true;
      for (uint64_t group : need.all) met = met && (present & group) != 0;
      if (met) return true;
    }
    return false;
  }

  // ---- argument rules (decide.ts checkArgs), "admitted" or not ----
  bool Admitted(const Tool& t, bool hasKeys) const {
    if (!t.hasRules || (t.deny.empty() && (t.allowAny || t.allow.empty()))) {
      if (t.hasRules && t.allowAny) return true;
      return !(strictArgs && hasKeys);
    }
    for (const Leaf& leaf : leaves) {
      if (leaf.skip) continue;
      const std::string_view* lp = pool.data() + leaf.pathAt;
      for (const PathRules& p : t.deny) {
        bool under = false;  // segsMatchPrefix: the pattern matches the path or a prefix of it
        for (size_t k = 0; k <= leaf.pathLen && !under; k++) under = SegsMatch(p.segs, 0, lp, 0, k, true);
        if (!under) continue;
        for (const Rule& r : p.rules) {
          if (r.type != kAny && r.type != leaf.type && !(leaf.joined && r.type == kString)) continue;
          if (r.re.Test(leaf.text)) return false;  // denied: JavaScript says so, with its reason
        }
      }
    }
    if (t.allowAny) return true;
    if (t.allow.empty()) return !(strictArgs && hasKeys);
    for (const Leaf& leaf : leaves) {
      if (leaf.skip || leaf.joined) continue;
      const std::string_view* lp = pool.data() + leaf.pathAt;
      bool admitted = false;
      for (size_t pi = 0; pi < t.allow.size() && !admitted; pi++) {
        const PathRules& p = t.allow[pi];
        if (!SegsMatch(p.segs, 0, lp, 0, leaf.pathLen, false)) continue;
        for (const Rule& r : p.rules) {
          if (r.type != kAny && r.type != leaf.type) continue;
          if (!r.re.Test(leaf.text)) continue;
          if (!r.admitsDotDot && HasDotDotSegment(leaf.text)) continue;
          admitted = true;
          break;
        }
      }
      if (!admitted) return false;
    }
    return true;
  }

  // params at line[start, end): the tool's index when the call is certainly allowed, else -1.
  int Judge1(const uint8_t* line, size_t start, size_t end) {
    b = line;
    i = start;
    n = end;
    if (i >= n || b[i] != '{') return -1;
    i++;
    std::string_view name;
    bool haveName = false, haveArgs = false;
    size_t argsAt = 0, argsEnd = 0;
    path.clear();
    pool.clear();
    leaves.clear();
    joinedTexts.clear();
    if (i < n && b[i] == '}') return -1;
    for (;;) {
      std::string_view k;
      if (!Str(&k) || i >= n || b[i] != ':') return -1;
      i++;
      if (k == "name" && !haveName) {
        if (!Str(&name)) return -1;
        haveName = true;
      } else if (k == "arguments" && !haveArgs) {
        argsAt = i;
        if (!Object(0, true)) return -1;
        argsEnd = i;
        haveArgs = true;
      } else {
        // A member the judge ignores (`_meta`, ...): skipped. A selector, or another spelling of one (case;
        // a space, which names.ts skeleton() strips), is JavaScript's to refuse.
        if (IsSelectorSpelling(k) || !Skip(0)) return -1;
      }
      if (i >= n) return -1;
      if (b[i] == ',') {
        i++;
        continue;
      }
      if (b[i] == '}' && i + 1 == n) break;
      return -1;
    }
    if (!haveName) return -1;
    auto it = byName.find(name);
    if (it == byName.end()) return -1;
    if (haveArgs && AnyNeedMet(b + argsAt, argsEnd - argsAt)) return -1;
    const bool hasKeys = haveArgs && argsEnd - argsAt > 2;
    return Admitted(tools[it->second], hasKeys) ? it->second : -1;
  }
};

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
