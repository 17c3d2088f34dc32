// Native filesystem/command matching with the engine's semantics (see fsmatch.h).
#include "fsmatch.h"

#include <algorithm>

#include "errors.h"

namespace leash {

namespace {

const char* const kReasonNames[] = {"allow_entry", "mode_allow", "deny_entry", "not_allowed", "no_policy",
                                    "engine_error"};

bool IsGlob(std::string_view s) { return s.find_first_of("*?[") != std::string_view::npos; }

// Parses a bracket class starting at p[i] == '['. Returns the index after ']' and
// whether c matched, or npos when the class is unterminated (then '[' is literal).
size_t MatchClass(std::string_view p, size_t i, char c, bool* matched) {
  size_t j = i + 1;
  bool negate = false;
  if (j < p.size() && (p[j] == '!' || p[j] == '^')) {
    negate = true;
    j++;
  }
  bool hit = false;
  bool first = true;
  while (j < p.size() && (first || p[j] != ']')) {
    first = false;
    char lo = p[j];
    if (j + 2 < p.size() && p[j + 1] == '-' && p[j + 2] != ']') {
      char hi = p[j + 2];
      if (c >= lo && c <= hi) hit = true;
      j += 3;
    } else {
      if (c == lo) hit = true;
      j++;
    }
  }
  if (j >= p.size()) return std::string_view::npos;
  *matched = (hit != negate) && c != '/';
  return j + 1;
}

// Glob match of a whole normalised path: `*` and `?` and classes stay within one
// segment; `**` crosses segments, and `/**/` also matches a single `/`.
bool GlobAt(std::string_view p, size_t pi, std::string_view s, size_t si) {
  while (pi < p.size()) {
    char c = p[pi];
    if (c == '*') {
      if (pi + 1 < p.size() && p[pi + 1] == '*') {
        size_t pj = pi + 2;
        while (pj < p.size() && p[pj] == '*') pj++;
        bool segStart = pi == 0 || p[pi - 1] == '/';
        if (segStart && pj < p.size() && p[pj] == '/' && GlobAt(p, pj + 1, s, si)) return true;
        if (pj == p.size()) return true;
        for (size_t k = si; k <= s.size(); k++) {
          if (GlobAt(p, pj, s, k)) return true;
        }
        return false;
      }
      size_t pj = pi + 1;
      if (pj == p.size()) return s.find('/', si) == std::string_view::npos;
      for (size_t k = si; k <= s.size(); k++) {
        if (GlobAt(p, pj, s, k)) return true;
        if (k < s.size() && s[k] == '/') break;
      }
      return false;
    }
    if (si >= s.size()) {
      // `/x/**` also matches `/x` itself: a trailing globstar segment may be empty.
      return p.substr(pi) == "/**" || (p.size() - pi > 3 && p.substr(pi, 3) == "/**" &&
                                       p.find_first_not_of('*', pi + 1) == std::string_view::npos);
    }
    if (c == '?') {
      if (s[si] == '/') return false;
      pi++;
      si++;
      continue;
    }
    if (c == '[') {
      bool m = false;
      size_t next = MatchClass(p, pi, s[si], &m);
      if (next != std::string_view::npos) {
        if (!m) return false;
        pi = next;
        si++;
        continue;
      }
    }
    if (s[si] != c) return false;
    pi++;
    si++;
  }
  return si == s.size();
}

std::string LiteralDir(std::string_view pattern) {
  size_t g = pattern.find_first_of("*?[");
  std::string_view lit = pattern.substr(0, g);
  size_t slash = lit.rfind('/');
  if (slash == std::string_view::npos || slash == 0) return "";
  return std::string(lit.substr(0, slash));
}

std::vector<std::string> StringArray(Napi::Value v) {
  std::vector<std::string> out;
  if (!v.IsArray()) return out;
  Napi::Array a = v.As<Napi::Array>();
  for (uint32_t i = 0; i < a.Length(); i++) {
    Napi::Value e = a.Get(i);
    if (e.IsString()) out.push_back(e.As<Napi::String>().Utf8Value());
  }
  return out;
}

}  // namespace

const char* ReasonName(Reason r) { return kReasonNames[static_cast<int>(r)]; }

std::string NormalizePath(std::string_view p) {
  std::vector<std::string_view> segs;
  size_t i = 0;
  while (i <= p.size()) {
    size_t j = p.find('/', i);
    if (j == std::string_view::npos) j = p.size();
    std::string_view seg = p.substr(i, j - i);
    if (seg.empty() || seg == ".") {
      // skip
    } else if (seg == "..") {
      if (!segs.empty()) segs.pop_back();
    } else {
      segs.push_back(seg);
    }
    i = j + 1;
  }
  if (segs.empty()) return "/";
  std::string out;
  out.reserve(p.size() + 1);
  for (auto s : segs) {
    out.push_back('/');
    out.append(s);
  }
  return out;
}

void PathList::Build(const std::vector<std::string>& entries) {
  texts_ = entries;
  for (size_t i = 0; i < entries.size(); i++) {
    const std::string& e = entries[i];
    std::string norm = NormalizePath(e);
    if (IsGlob(e)) {
      globs_.push_back({static_cast<int>(i), norm, LiteralDir(norm)});
    } else {
      plain_.emplace(norm, static_cast<int>(i));  // emplace keeps the first index
    }
  }
}

int PathList::Find(std::string_view path) const {
  int best = -1;
  if (!plain_.empty()) {
    // Every ancestor of the path (and the path itself) is a candidate exact/prefix entry.
    std::string key(path);
    for (;;) {
      auto it = plain_.find(key);
      if (it != plain_.end() && (best < 0 || it->second < best)) best = it->second;
      if (key == "/") break;
      size_t slash = key.rfind('/');
      key.resize(slash == 0 ? 1 : slash);
    }
  }
  for (const Glob& g : globs_) {
    if (best >= 0 && g.index > best) break;  // globs are in list order
    if (!g.literal.empty()) {
      if (path.size() < g.literal.size() || path.compare(0, g.literal.size(), g.literal) != 0) continue;
      if (path.size() > g.literal.size() && path[g.literal.size()] != '/') continue;
    }
    if (GlobAt(g.pattern, 0, path, 0)) {
      best = g.index;
      break;
    }
  }
  return best;
}

std::vector<std::string> PathList::Roots() const {
  std::vector<std::string> out;
  for (const auto& kv : plain_) out.push_back(kv.first);
  for (const Glob& g : globs_) out.push_back(g.literal.empty() ? "/" : g.literal);
  return out;
}

void CommandList::Build(const std::vector<std::string>& entries) {
  texts_ = entries;
  for (size_t i = 0; i < entries.size(); i++) {
    const std::string& e = entries[i];
    if (e.find('/') != std::string::npos) {
      paths_.emplace(NormalizePath(e), static_cast<int>(i));
    } else {
      names_.emplace(e, static_cast<int>(i));
    }
  }
}

int CommandList::Find(std::string_view normBinary, std::string_view base) const {
  int best = -1;
  if (!paths_.empty()) {
    auto it = paths_.find(std::string(normBinary));
    if (it != paths_.end()) best = it->second;
  }
  if (!names_.empty()) {
    auto it = names_.find(std::string(base));
    if (it != names_.end() && (best < 0 || it->second < best)) best = it->second;
  }
  return best;
}

std::vector<std::string> CommandList::Roots() const {
  std::vector<std::string> out;
  for (const auto& kv : paths_) out.push_back(kv.first);
  return out;
}

MatchVerdict MatchPathPolicy(const FsPolicy* p, bool failOpen, std::string_view path) {
  if (!p) return {failOpen, Reason::kNoPolicy, nullptr};
  std::string norm = NormalizePath(path);
  int d = p->fsDeny.Find(norm);
  if (d >= 0) return {false, Reason::kDenyEntry, &p->fsDeny.Text(d)};
  if (!p->fsWhitelist) return {true, Reason::kModeAllow, nullptr};
  int a = p->fsAllow.Find(norm);
  if (a >= 0) return {true, Reason::kAllowEntry, &p->fsAllow.Text(a)};
  return {false, Reason::kNotAllowed, nullptr};
}

MatchVerdict MatchCommandPolicy(const FsPolicy* p, bool failOpen, std::string_view binary) {
  if (!p) return {failOpen, Reason::kNoPolicy, nullptr};
  std::string norm = NormalizePath(binary);
  std::string_view base(norm);
  base = base.substr(base.rfind('/') + 1);
  int d = p->cmdDeny.Find(norm, base);
  if (d >= 0) return {false, Reason::kDenyEntry, &p->cmdDeny.Text(d)};
  if (!p->cmdWhitelist) return {true, Reason::kModeAllow, nullptr};
  int a = p->cmdAllow.Find(norm, base);
  if (a >= 0) return {true, Reason::kAllowEntry, &p->cmdAllow.Text(a)};
  return {false, Reason::kNotAllowed, nullptr};
}

std::shared_ptr<FsPolicy> FsPolicyFromJs(Napi::Env env, Napi::Value v) {
  if (!v.IsObject()) {
    Napi::TypeError::New(env, "policy must be an object").ThrowAsJavaScriptException();
    return nullptr;
  }
  Napi::Object o = v.As<Napi::Object>();
  auto p = std::make_shared<FsPolicy>();
  Napi::Value fm = o.Get("fail_mode");
  // Anything but exactly "open" is closed: a typo must not disable enforcement.
  p->failOpen = fm.IsString() && fm.As<Napi::String>().Utf8Value() == "open";
  Napi::Value fs = o.Get("filesystem");
  Napi::Value cmd = o.Get("commands");
  if (!fs.IsObject() || !cmd.IsObject()) {
    Napi::TypeError::New(env, "policy needs filesystem and commands").ThrowAsJavaScriptException();
    return nullptr;
  }
  Napi::Object fo = fs.As<Napi::Object>();
  Napi::Object co = cmd.As<Napi::Object>();
  Napi::Value fmode = fo.Get("mode");
  Napi::Value cmode = co.Get("mode");
  p->fsWhitelist = !(fmode.IsString() && fmode.As<Napi::String>().Utf8Value() == "blacklist");
  p->cmdWhitelist = !(cmode.IsString() && cmode.As<Napi::String>().Utf8Value() == "blacklist");
  p->fsAllow.Build(StringArray(fo.Get("allow")));
  p->fsDeny.Build(StringArray(fo.Get("deny")));
  p->cmdAllow.Build(StringArray(co.Get("allow")));
  p->cmdDeny.Build(StringArray(co.Get("deny")));
  return p;
}

namespace {

struct Handle {
  std::shared_ptr<FsPolicy> policy;
};

const FsPolicy* PolicyArg(Napi::Value v) {
  if (v.IsExternal()) return v.As<Napi::External<Handle>>().Data()->policy.get();
  return nullptr;
}

Napi::Object VerdictObject(Napi::Env env, const MatchVerdict& m) {
  Napi::Object o = Napi::Object::New(env);
  o.Set("action", Napi::String::New(env, m.allow ? "allow" : "block"));
  o.Set("reason", Napi::String::New(env, ReasonName(m.reason)));
  o.Set("rule", m.rule ? Napi::Value(Napi::String::New(env, *m.rule)) : env.Null());
  return o;
}

}  // namespace

Napi::Value CompileFsPolicy(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  if (info.Length() < 1) return Usage(env, "compileFsPolicy(policy: object)");
  auto p = FsPolicyFromJs(env, info[0]);
  if (!p) return env.Undefined();
  return Napi::External<Handle>::New(env, new Handle{p}, [](Napi::Env, Handle* h) { delete h; });
}

Napi::Value NativeMatch(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  if (info.Length() < 3 || !info[1].IsString() || !info[2].IsString())
    return Usage(env, "nativeMatch(handle|null, 'filesystem'|'commands', subject: string, failMode?)");
  const FsPolicy* p = PolicyArg(info[0]);
  bool failOpen = info.Length() > 3 && info[3].IsString() && info[3].As<Napi::String>().Utf8Value() == "open";
  std::string kind = info[1].As<Napi::String>().Utf8Value();
  std::string subject = info[2].As<Napi::String>().Utf8Value();
  if (kind == "filesystem") return VerdictObject(env, MatchPathPolicy(p, failOpen, subject));
  if (kind == "commands") return VerdictObject(env, MatchCommandPolicy(p, failOpen, subject));
  return Usage(env, "nativeMatch: kind must be 'filesystem' or 'commands'");
}

Napi::Value NativeMatchBatch(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  if (info.Length() < 3 || !info[1].IsArray() || !info[2].IsArray())
    return Usage(env, "nativeMatchBatch(handle|null, kinds: string[], subjects: string[], failMode?)");
  const FsPolicy* p = PolicyArg(info[0]);
  bool failOpen = info.Length() > 3 && info[3].IsString() && info[3].As<Napi::String>().Utf8Value() == "open";
  Napi::Array kinds = info[1].As<Napi::Array>();
  Napi::Array subjects = info[2].As<Napi::Array>();
  uint32_t n = std::min(kinds.Length(), subjects.Length());
  Napi::Array out = Napi::Array::New(env, n);
  for (uint32_t i = 0; i < n; i++) {
    std::string kind = kinds.Get(i).As<Napi::String>().Utf8Value();
    std::string subject = subjects.Get(i).As<Napi::String>().Utf8Value();
    MatchVerdict m = kind == "commands" ? MatchCommandPolicy(p, failOpen, subject)
                                        : MatchPathPolicy(p, failOpen, subject);
    std::string s = std::string(m.allow ? "allow" : "block") + "|" + ReasonName(m.reason) + "|" +
                    (m.rule ? *m.rule : std::string("\x01null"));
    out.Set(i, Napi::String::New(env, s));
  }
  return out;
}

}  // namespace leash
