// The MCP gate's native judge of a plain tools/call (src/tools/judge/native.ts builds it).
//
// The gate's JavaScript judge stays the definition: it judges every call this code does not answer,
// and it alone ever denies. This code answers only "certainly allowed" for a call whose every step it
// can take exactly as JavaScript does, and -1 ("not sure") for anything else:
//   - params is an object of `name` (a string without escapes), optionally `arguments` (an object), and
//     members the judge ignores (`_meta`); no selector or other spelling of one;
//   - the name was registered by JavaScript after it judged the name allowed (the registry's verdict
//     depends on the name alone), with the tool's argument rules in native form;
//   - no detector's need (src/engine/needs.ts DETECTOR_NEEDS) is met anywhere in the arguments'
//     bytes: keys and values, so inspection would find nothing;
//   - the arguments hold no escape, no number other than an integer, nest at most 64 deep, no array of more
//     than 1,024 elements;
//   - the argument rules admit them as decide.ts checkArgs does (deny on every value, then allow at
//     exactly its path, `..` only where the pattern spells it out, strict_args), with patterns that are
//     a literal or deterministic atoms (src/tools/judge/linear-regex.ts NativeRegex).
// The line was accepted by the JSON scanner first (jsonscan.cc): canonical, ASCII, no duplicate key;
// this code still checks every byte it reads and answers -1 on anything unexpected.
// tests/native/gatejudge-diff.test.ts compares it with the JavaScript judge on generated calls. Under rules
// over operations it then asks opsjudge_core.h about the call's path (an answer is then a template's index).
//
// This header is the judge itself, plain C++ (native/tools/gatejudge.cc binds it to JavaScript).
#pragma once

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

#include "opsjudge_core.h"

namespace leash {
namespace gatejudge {

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
  // Under rules over operations (opsjudge_core.h): the operation's code, its path argument, and the allow line
  // templates JavaScript registered, by rule index (kDefaultRule: the default's allow).
  int op = -1;
  std::string arg;
  std::unordered_map<int, int> templates;
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
inline const std::vector<std::string>& IndexNames() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> v;
    for (size_t k = 0; k < kMaxElements; k++) v.push_back(std::to_string(k));
    return v;
  }();
  return names;
}

// decide.ts segsMatch: glob segments (`*` one, `**` any number) against path[ti, len), exactly;
// `fold` compares the path's ASCII letters lower-cased (deny patterns are stored lower case).
inline bool SegsMatch(const std::vector<std::string>& pat, size_t pi, const std::string_view* path, size_t ti, size_t len,
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
inline bool HasDotDotSegment(std::string_view t) {
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
  std::array<std::vector<uint8_t>, 256> byFirst;  // indices of the literals of 2 bytes or more, by first byte
  std::bitset<65536> pairs;                        // their first two bytes: only a pair here is compared further
  std::array<uint64_t, 256> oneByte{};             // the literals of one byte, as a mask by that byte
  std::vector<Need> needs;
  std::deque<std::string> names;  // owns the bytes the map's keys view
  std::unordered_map<std::string_view, int> byName;
  std::vector<Tool> tools;
  std::unique_ptr<Ops> ops;  // rules over operations: every call answered must pass them too
  int32_t* span = nullptr;   // where Ops::Answer puts the path's place in the line

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
      present |= oneByte[c];
      if (k + 1 >= len || !pairs.test((static_cast<size_t>(c) << 8) | Lower(p[k + 1]))) continue;
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
    const Tool& t = tools[it->second];
    if (!Admitted(t, hasKeys)) return -1;
    if (ops == nullptr) return it->second;
    // Under rules over operations: the path argument (a string at the top), answered by its template's index.
    if (t.op < 0) return -1;
    for (const Leaf& leaf : leaves)
      if (leaf.pathLen == 1 && leaf.type == kString && pool[leaf.pathAt] == t.arg)
        return ops->Answer(t.op, t.templates, leaf.text, b, span);
    return -1;
  }
};

}  // namespace gatejudge
}  // namespace leash
