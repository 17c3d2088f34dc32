// The gate's native judge of a call under rules over operations (src/tools/judge/native.ts builds it; the judge
// of the call's name and arguments is gatejudge_core.h, which asks this after it admitted them).
//
// JavaScript stays the definition (src/tools/judge/operations/rules.ts decideAction, paths.ts resolvePath). This
// answers "certainly allowed" only for a call whose one path argument it reads exactly as JavaScript does:
//   - the tool was registered by JavaScript with its mapping (one path argument, no base, no array, no URL, SQL,
//     command or listing; an operation other than fs.write and fs.delete, whose dangling symlinks JavaScript
//     follows), after JavaScript allowed a call to it;
//   - the path is absolute, normalised (no empty, `.` or `..` component, no trailing `/`), ASCII without escapes,
//     at most 200 bytes (a log line cuts longer ones), and the remembering walk (walkcache.h) remembers it as its
//     own reading: then JavaScript's resolvePath gives exactly [path];
//   - the rules allow it: no deny matches, the first match is an allow (or none matches and the default allows),
//     tried in the candidate order JavaScript's index gives, each glob run by the watcher's matcher (fsmatch.h
//     GlobCovers, engine/path.ts matchGlob's native twin) on the tokens JavaScript compiled;
//   - JavaScript registered the allow line for that tool and that rule (a template around the path).
// Anything else is -1: JavaScript judges it. tests/native/gatejudge-ops-diff.test.ts compares the two.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "fsmatch.h"
#include "pathmemory.h"

namespace leash {
namespace gatejudge {

enum Effect : int { kEffectAllow = 0, kEffectDeny = 1, kEffectAsk = 2 };

struct OpsGlob {
  std::string lit;  // the glob's leading literal: every path it covers starts with it
  CompiledGlob glob;  // the watcher's form of engine/path.ts tokens (fsmatch.h), built from JavaScript's tokens
};

struct OpsRule {
  int effect = kEffectDeny;
  // A rule with commands, hosts or methods never matches an action without them (rules.ts fieldMatches).
  bool never = false;
  bool anyResource = true;  // no `resources` field
  std::vector<OpsGlob> resources;
};

/** rules.ts OperationIndex for one operation: `withAlways` by top directory, `always` otherwise. */
struct OpsIndex {
  std::vector<int> always;
  std::unordered_map<std::string, std::vector<int>> withAlways;
};

constexpr int kNotSure = -2;
constexpr int kDefaultRule = -1;
constexpr size_t kMaxPath = 200;

/** An absolute path in the walk's normal form: no empty, `.` or `..` component, no trailing `/`, not `/`. */
inline bool PlainPath(std::string_view p) {
  if (p.size() < 2 || p.size() > kMaxPath || p[0] != '/' || p.back() == '/') return false;
  size_t s = 1;
  for (size_t k = 1; k <= p.size(); k++) {
    if (k < p.size() && p[k] != '/') continue;
    const std::string_view c = p.substr(s, k - s);
    if (c.empty() || c == "." || c == "..") return false;
    s = k + 1;
  }
  return true;
}

struct Ops {
  int def = kEffectDeny;
  std::vector<OpsRule> rules;
  std::vector<OpsIndex> byOp;  // by operation code (mappings.ts OPERATIONS order)
  PathMemory* memory = nullptr;
  size_t templates = 0;  // allow line templates handed out (gatejudge.cc)
  std::u32string wide;

  // `wide`: the path as code points (an ASCII path: one per byte), for the watcher's matcher.
  bool Matches(const OpsRule& r, std::string_view p, const std::u32string& wide) {
    if (r.never) return false;
    if (r.anyResource) return true;
    for (const OpsGlob& g : r.resources)
      if (p.compare(0, g.lit.size(), g.lit) == 0 && GlobCovers(g.glob, wide)) return true;
    return false;
  }

  // rules.ts decideAction for an action of operation `op` with the one path `p`: the allowing rule's index,
  // kDefaultRule for the default's allow, kNotSure for anything that is not an allow.
  int Decide(int op, std::string_view p) {
    if (op < 0 || static_cast<size_t>(op) >= byOp.size()) return kNotSure;
    const OpsIndex& e = byOp[op];
    const std::vector<int>* cand = &e.always;
    if (!e.withAlways.empty()) {
      const size_t end = p.find('/', 1);
      const std::string top(p.substr(1, end == std::string_view::npos ? std::string_view::npos : end - 1));
      auto f = e.withAlways.find(top);
      if (f != e.withAlways.end()) cand = &f->second;
    }
    wide.assign(p.begin(), p.end());
    int first = -1;
    for (int k : *cand) {
      const OpsRule& r = rules[k];
      if (!Matches(r, p, wide)) continue;
      if (r.effect == kEffectDeny) return kNotSure;  // every matching deny wins: JavaScript's to say
      if (first < 0) first = k;
    }
    if (first >= 0) return rules[first].effect == kEffectAllow ? first : kNotSure;
    return def == kEffectAllow ? kDefaultRule : kNotSure;
  }

  // The template registered for this tool and decision when the call is certainly allowed, else -1; `span` gets
  // the path's place in the line (the allow line is the template's two halves around it).
  int Answer(int op, const std::unordered_map<int, int>& templates, std::string_view p, const uint8_t* line,
             int32_t* span) {
    if (memory == nullptr || !PlainPath(p) || !memory->Remembers(std::string(p))) return -1;
    const int key = Decide(op, p);
    if (key == kNotSure) return -1;
    auto t = templates.find(key);
    if (t == templates.end()) return -1;
    span[0] = static_cast<int32_t>(reinterpret_cast<const uint8_t*>(p.data()) - line);
    span[1] = span[0] + static_cast<int32_t>(p.size());
    return t->second;
  }
};

}  // namespace gatejudge
}  // namespace leash
