// Native filesystem/command matching with the engine's semantics (see fsmatch.h).
#include "fsmatch.h"

#include <algorithm>

#include "errors.h"

namespace leash {

namespace {

const char* const kReasonNames[] = {"allow_entry", "mode_allow",   "deny_entry",        "not_allowed",
                                    "no_policy",   "engine_error", "interpreter_of", "interpreter_direct",
                                    "hardlinked",  "namespace_denied", "ask_entry",
                                    "approval_limit", "approval_unavailable", "approval_timeout",
                                    "approval_cancelled", "foreign_pid_namespace"};

bool IsGlob(std::string_view s) { return s.find_first_of("*?[") != std::string_view::npos; }

// UTF-8 -> code points. Invalid bytes map to U+DC80..U+DCFF (distinct, never '/').
std::u32string Decode(std::string_view s) {
  std::u32string out;
  out.reserve(s.size());
  size_t i = 0;
  while (i < s.size()) {
    unsigned char c = static_cast<unsigned char>(s[i]);
    int len = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
    char32_t cp = len == 1 ? c : len == 2 ? (c & 0x1F) : len == 3 ? (c & 0x0F) : (c & 0x07);
    bool ok = len > 0 && i + len <= s.size();
    for (int k = 1; ok && k < len; k++) {
      unsigned char cc = static_cast<unsigned char>(s[i + k]);
      if ((cc >> 6) != 2) ok = false;
      cp = (cp << 6) | (cc & 0x3F);
    }
    if (!ok) {
      out.push_back(0xDC00 + c);
      i++;
      continue;
    }
    out.push_back(cp);
    i += len;
  }
  return out;
}

// JavaScript's \s, for the command grammar's "no whitespace" rule.
bool IsJsSpace(char32_t c) {
  return c == ' ' || (c >= 0x09 && c <= 0x0D) || c == 0xA0 || c == 0x1680 || (c >= 0x2000 && c <= 0x200A) ||
         c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F || c == 0x3000 || c == 0xFEFF;
}

// Compiles a normalised glob into the tokens of src/engine/path.ts parseGlob.
// Returns false where the engine reports bad_glob (an unterminated class).
bool CompileGlob(const std::string& norm, CompiledGlob* g) {
  std::u32string p = Decode(norm);
  std::vector<std::u32string> segs;
  size_t i = 0;
  for (;;) {
    size_t j = p.find(U'/', i);
    if (j == std::u32string::npos) {
      segs.push_back(p.substr(i));
      break;
    }
    segs.push_back(p.substr(i, j - i));
    i = j + 1;
  }
  for (size_t k = 1; k < segs.size(); k++) {
    const std::u32string& seg = segs[k];
    if (seg == U"**") {
      g->toks.push_back({GlobTok::kGlobstar, 0, -1});
      continue;
    }
    g->toks.push_back({GlobTok::kLit, U'/', -1});
    for (size_t a = 0; a < seg.size(); a++) {
      char32_t ch = seg[a];
      if (ch == U'*') {
        if (a + 1 < seg.size() && seg[a + 1] == U'*') {
          while (a + 1 < seg.size() && seg[a + 1] == U'*') a++;
          g->toks.push_back({GlobTok::kAny, 0, -1});
        } else {
          g->toks.push_back({GlobTok::kStar, 0, -1});
        }
      } else if (ch == U'?') {
        g->toks.push_back({GlobTok::kQuestion, 0, -1});
      } else if (ch == U'[') {
        size_t j = a + 1;
        bool negate = false;
        if (j < seg.size() && (seg[j] == U'!' || seg[j] == U'^')) {
          negate = true;
          j++;
        }
        size_t bodyStart = j;
        if (j < seg.size() && seg[j] == U']') j++;
        while (j < seg.size() && seg[j] != U']') j++;
        if (j >= seg.size()) return false;
        // `x-y` is a range when both ends exist; a leading or trailing '-' is literal.
        struct Atom {
          char32_t c;
          bool dashOp;
        };
        std::vector<Atom> atoms;
        size_t blen = j - bodyStart;
        for (size_t m = 0; m < blen; m++) {
          char32_t c = seg[bodyStart + m];
          atoms.push_back({c, c == U'-' && m > 0 && m < blen - 1});
        }
        GlobClass cls{negate, {}};
        size_t q = 0;
        while (q < atoms.size()) {
          if (q + 2 < atoms.size() && atoms[q + 1].dashOp) {
            char32_t lo = atoms[q].c, hi = atoms[q + 2].c;
            cls.ranges.push_back({std::min(lo, hi), std::max(lo, hi)});  // a reversed range is swapped
            q += 3;
          } else {
            cls.ranges.push_back({atoms[q].c, atoms[q].c});
            q++;
          }
        }
        g->classes.push_back(std::move(cls));
        g->toks.push_back({GlobTok::kClass, 0, static_cast<int>(g->classes.size() - 1)});
        a = j;
      } else {
        g->toks.push_back({GlobTok::kLit, ch, -1});
      }
    }
  }
  return true;
}

bool InClass(const GlobClass& c, char32_t ch) {
  if (ch == U'/') return false;
  bool hit = false;
  for (const auto& r : c.ranges) hit = hit || (ch >= r.first && ch <= r.second);
  return hit != c.negate;
}

// Runs the tokens as a set of reachable positions (the engine's matchGlob): each token maps
// the positions where it may start to those where it may end in one pass, so a glob costs
// O(path length x tokens) and no path an agent makes can turn `**` into backtracking. The
// glob covers the path when a reachable end is the end of the path or a '/' (what is beneath
// a match is covered too).
bool GlobMatch(const CompiledGlob& g, const std::u32string& s) {
  thread_local std::vector<uint8_t> cur, nxt;
  size_t n = s.size();
  cur.assign(n + 1, 0);
  nxt.assign(n + 1, 0);
  cur[0] = 1;
  for (const GlobTok& t : g.toks) {
    std::fill(nxt.begin(), nxt.end(), 0);
    bool alive = false;
    switch (t.kind) {
      case GlobTok::kLit:
      case GlobTok::kQuestion:
      case GlobTok::kClass:
        for (size_t i = 0; i < n; i++) {
          if (!cur[i]) continue;
          char32_t c = s[i];
          bool ok = t.kind == GlobTok::kLit ? c == t.c
                    : t.kind == GlobTok::kQuestion ? c != U'/'
                                                   : InClass(g.classes[t.cls], c);
          if (ok) {
            nxt[i + 1] = 1;
            alive = true;
          }
        }
        break;
      case GlobTok::kStar: {  // any run without '/'
        uint8_t r = 0;
        for (size_t i = 0; i <= n; i++) {
          r = (cur[i] || (r && s[i - 1] != U'/')) ? 1 : 0;
          nxt[i] = r;
          alive = alive || r;
        }
        break;
      }
      case GlobTok::kAny: {  // `**` inside a segment: any run
        uint8_t r = 0;
        for (size_t i = 0; i <= n; i++) {
          if (cur[i]) r = 1;
          nxt[i] = r;
          alive = alive || r;
        }
        break;
      }
      case GlobTok::kGlobstar: {  // a `**` segment: nothing, or '/' and any run
        bool seen = false;
        for (size_t i = 0; i <= n; i++) {
          bool v = cur[i] || seen;
          nxt[i] = v ? 1 : 0;
          alive = alive || v;
          if (cur[i] && i < n && s[i] == U'/') seen = true;
        }
        break;
      }
    }
    if (!alive) return false;
    cur.swap(nxt);
  }
  for (size_t i = 0; i <= n; i++)
    if (cur[i] && (i == n || s[i] == U'/')) return true;
  return false;
}

// The literal directory part of a glob before its first wildcard ("" for the root).
std::string GlobPrefix(const std::string& glob) {
  size_t first = glob.find_first_of("*?[");
  if (first == std::string::npos) first = glob.size();
  size_t slash = glob.rfind('/', first);
  return glob.substr(0, slash == std::string::npos ? 0 : slash);
}

bool PathEntryOk(const std::string& e) {
  if (e.empty() || e.find('\0') != std::string::npos || e[0] != '/') return false;
  return true;
}

bool CommandEntryOk(const std::string& e) {
  if (e.empty() || e[0] == '~') return false;
  for (char32_t c : Decode(e)) {
    if (IsJsSpace(c) || c <= 0x1F || c == 0x7F) return false;
  }
  if (e.find('/') != std::string::npos) {
    std::string n;
    if (!NormalizePath(e, &n)) return false;
    return n != "/";
  }
  if (e.find_first_of("*?[") != std::string::npos) return false;
  return e != "." && e != "..";
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

bool GlobCovers(const CompiledGlob& g, const std::u32string& path) { return GlobMatch(g, path); }

bool NormalizePath(std::string_view p, std::string* out) {
  if (p.empty() || p[0] != '/') return false;
  std::vector<std::string_view> segs;
  size_t i = 1;
  while (i <= p.size()) {
    size_t j = p.find('/', i);
    if (j == std::string_view::npos) j = p.size();
    std::string_view seg = p.substr(i, j - i);
    if (seg == "..") {
      if (!segs.empty()) segs.pop_back();
    } else if (!seg.empty() && seg != ".") {
      segs.push_back(seg);
    }
    i = j + 1;
  }
  out->clear();
  if (segs.empty()) {
    *out = "/";
    return true;
  }
  out->reserve(p.size());
  for (auto s : segs) {
    out->push_back('/');
    out->append(s);
  }
  return true;
}

void PathList::Add(const std::string& entry) {
  if (!PathEntryOk(entry)) return;
  std::string norm;
  NormalizePath(entry, &norm);
  if (IsGlob(norm)) {
    CompiledGlob g;
    g.rule = entry;
    if (!CompileGlob(norm, &g)) return;  // bad_glob: inert
    std::string prefix = GlobPrefix(norm);
    if (prefix.empty()) {
      rootGlobs_.push_back(std::move(g));
    } else {
      nodes_[prefix].globs.push_back(std::move(g));
    }
    return;
  }
  texts_.push_back(std::make_unique<std::string>(entry));
  const std::string* text = texts_.back().get();
  literals_.push_back({norm, text});
  if (norm == "/") {
    if (!rootRule_) rootRule_ = text;
    return;
  }
  Node& n = nodes_[norm];
  if (!n.rule) n.rule = text;
}

namespace {
const std::string* TestGlobs(const std::vector<CompiledGlob>& globs, std::string_view path,
                             std::u32string* decoded) {
  for (const CompiledGlob& g : globs) {
    if (decoded->empty()) *decoded = Decode(path);
    if (GlobMatch(g, *decoded)) return &g.rule;
  }
  return nullptr;
}
}  // namespace

const std::string* PathList::Find(std::string_view path) const {
  const std::string* best = rootRule_;
  std::u32string decoded;
  if (!rootGlobs_.empty()) {
    if (const std::string* r = TestGlobs(rootGlobs_, path, &decoded)) best = r;
  }
  if (nodes_.empty()) return best;
  std::string key;
  key.reserve(path.size());
  for (size_t i = 0; i <= path.size(); i++) {
    char c = i < path.size() ? path[i] : '/';
    if (c == '/' && i > 0) {
      key.assign(path.substr(0, i));
      auto it = nodes_.find(key);
      if (it != nodes_.end()) {
        if (it->second.rule) best = it->second.rule;
        if (!it->second.globs.empty()) {
          if (const std::string* r = TestGlobs(it->second.globs, path, &decoded)) best = r;
        }
      }
    }
  }
  return best;
}

void CommandList::Add(const std::string& entry) {
  if (!CommandEntryOk(entry)) return;
  if (entry.find('/') != std::string::npos) {
    std::string n;
    NormalizePath(entry, &n);
    paths_.emplace(n, entry);
  } else {
    names_.emplace(entry, entry);
  }
}

const std::string* CommandList::Find(std::string_view binary) const {
  if (!paths_.empty()) {
    auto it = paths_.find(std::string(binary));
    if (it != paths_.end()) return &it->second;
  }
  if (names_.empty()) return nullptr;
  size_t slash = binary.rfind('/');
  auto it = names_.find(std::string(slash == std::string_view::npos ? binary : binary.substr(slash + 1)));
  return it == names_.end() ? nullptr : &it->second;
}

namespace {
MatchVerdict ByLists(bool whitelist, const std::string* denied, const std::string* allowed) {
  if (denied) return {false, Reason::kDenyEntry, denied};
  if (!whitelist) return {true, Reason::kModeAllow, nullptr};
  if (allowed) return {true, Reason::kAllowEntry, allowed};
  return {false, Reason::kNotAllowed, nullptr};
}
}  // namespace

MatchVerdict MatchPathPolicy(const FsPolicy* p, bool failOpen, std::string_view path) {
  if (!p) return {failOpen, Reason::kNoPolicy, nullptr};
  std::string norm;
  if (!NormalizePath(path, &norm)) return {p->failOpen, Reason::kEngineError, nullptr};
  const std::string* d = p->fsDeny.Find(norm);
  if (d || !p->fsWhitelist) return ByLists(p->fsWhitelist, d, nullptr);
  return ByLists(true, nullptr, p->fsAllow.Find(norm));
}

MatchVerdict MatchCommandPolicy(const FsPolicy* p, bool failOpen, std::string_view binary, bool asInterpreter) {
  if (!p) return {failOpen, Reason::kNoPolicy, nullptr};
  std::string norm;
  if (binary.empty()) return {p->failOpen, Reason::kEngineError, nullptr};
  if (binary.find('/') == std::string_view::npos) {
    norm = std::string(binary);  // a bare name, as `leash check commands ls` passes it
  } else if (!NormalizePath(binary, &norm)) {
    return {p->failOpen, Reason::kEngineError, nullptr};
  }
  const std::string* d = p->cmdDeny.Find(norm);
  if (d || !p->cmdWhitelist) return ByLists(p->cmdWhitelist, d, nullptr);
  if (p->hasInterpreters) {
    if (const std::string* i = p->cmdInterpreters.Find(norm))
      return {asInterpreter, asInterpreter ? Reason::kInterpreterOf : Reason::kInterpreterDirect, i};
  }
  return ByLists(true, nullptr, p->cmdAllow.Find(norm));
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
  p->shadow = o.Get("shadow").StrictEquals(Napi::Boolean::New(env, true));
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
  for (const auto& e : StringArray(fo.Get("allow"))) p->fsAllow.Add(e);
  for (const auto& e : StringArray(fo.Get("deny"))) p->fsDeny.Add(e);
  for (const auto& e : StringArray(co.Get("allow"))) p->cmdAllow.Add(e);
  for (const auto& e : StringArray(co.Get("deny"))) p->cmdDeny.Add(e);
  for (const auto& e : StringArray(co.Get("interpreters"))) {
    if (e.empty() || e[0] != '/') continue;  // the engine's interpreterEntryOk: absolute paths only
    p->cmdInterpreters.Add(e);
    p->hasInterpreters = true;
  }
  for (const auto& e : StringArray(fo.Get("ask"))) p->fsAsk.Add(e), p->hasAsk = true;
  for (const auto& e : StringArray(co.Get("ask"))) p->cmdAsk.Add(e), p->hasAsk = true;
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
  if (kind == "interpreter") return VerdictObject(env, MatchCommandPolicy(p, failOpen, subject, true));
  return Usage(env, "nativeMatch: kind must be 'filesystem', 'commands' or 'interpreter'");
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
    MatchVerdict m = kind == "commands"      ? MatchCommandPolicy(p, failOpen, subject)
                     : kind == "interpreter" ? MatchCommandPolicy(p, failOpen, subject, true)
                                             : MatchPathPolicy(p, failOpen, subject);
    std::string s = std::string(m.allow ? "allow" : "block") + "|" + ReasonName(m.reason) + "|" +
                    (m.rule ? *m.rule : std::string("\x01null"));
    out.Set(i, Napi::String::New(env, s));
  }
  return out;
}

}  // namespace leash
