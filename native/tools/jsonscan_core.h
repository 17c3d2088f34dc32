// The MCP gate's conservative canonical-JSON scanner (see jsonscan.cc for what "canonical" means), shared by
// the line scanner (jsonscan.cc), the answer reader there, and the native judge's request reader (gatejudge.cc).
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string_view>
#include <unordered_set>
#include <vector>

namespace leash {
namespace jsonscan {


constexpr int kMaxDepth = 512;  // MAX_DEPTH of json.ts

// Top-level facts, as bits of out[0].
enum : uint32_t {
  kTopObject = 1u << 0,
  kJsonrpcOk = 1u << 1,  // "jsonrpc":"2.0"
  kHasId = 1u << 2,
  kHasMethod = 1u << 3,
  kHasParams = 1u << 4,
  kHasResult = 1u << 5,
  kHasError = 1u << 6,
  kErrorObject = 1u << 7,
  kOtherKey = 1u << 8,  // a top-level key that is not one of the six envelope names
  kIdInt = 1u << 9,
  kIdString = 1u << 10,  // with no escapes: out[2..3] is its span inside the quotes
  kMethodString = 1u << 11,  // with no escapes: out[4..5]
  kParamsObject = 1u << 12,
};

struct Scanner {
  const uint8_t* b;
  size_t n;
  size_t i = 0;
  // Keys of the objects being read (a stack: each object's keys follow its parent's).
  std::vector<std::string_view> keys;

  static bool Hex(uint8_t c, unsigned* v) {
    if (c >= '0' && c <= '9') *v = *v * 16 + (c - '0');
    else if (c >= 'a' && c <= 'f') *v = *v * 16 + (c - 'a' + 10);
    else return false;  // upper-case hex is valid JSON but not what the writer produces
    return true;
  }
  bool U4(size_t at, unsigned* v) {
    if (at + 6 > n || b[at] != '\\' || b[at + 1] != 'u') return false;
    *v = 0;
    for (size_t k = at + 2; k < at + 6; k++)
      if (!Hex(b[k], v)) return false;
    return true;
  }

  // A canonical string starting at the quote; *escaped says whether it held any escape.
  bool String(bool* escaped) {
    i++;
    *escaped = false;
    for (;;) {
      if (i >= n) return false;
      uint8_t c = b[i];
      if (c == '"') {
        i++;
        return true;
      }
      if (c < 0x20 || c >= 0x7f) return false;  // raw control (invalid) or non-ASCII (re-written)
      if (c != '\\') {
        i++;
        continue;
      }
      *escaped = true;
      if (i + 1 >= n) return false;
      uint8_t e = b[i + 1];
      if (e == '"' || e == '\\' || e == 'b' || e == 'f' || e == 'n' || e == 'r' || e == 't') {
        i += 2;
        continue;
      }
      unsigned u;
      if (!U4(i, &u)) return false;  // \/ and anything else are re-written or invalid
      if (u >= 0xd800 && u <= 0xdbff) {
        unsigned lo;
        if (!U4(i + 6, &lo) || lo < 0xdc00 || lo > 0xdfff) return false;
        i += 12;
        continue;
      }
      if (u >= 0xdc00 && u <= 0xdfff) return false;  // a lone low surrogate
      if (u >= 0x20 && u < 0x7f) return false;  // written raw
      if (u == 0x08 || u == 0x09 || u == 0x0a || u == 0x0c || u == 0x0d) return false;  // short escape
      i += 6;
    }
  }

  // A canonical integer (at most 15 digits, not -0); floats and longer numbers are refused.
  bool Number(double* value) {
    size_t start = i;
    bool neg = false;
    if (b[i] == '-') {
      neg = true;
      i++;
    }
    if (i >= n) return false;
    size_t ds = i;
    if (b[i] == '0') {
      i++;
    } else if (b[i] >= '1' && b[i] <= '9') {
      while (i < n && b[i] >= '0' && b[i] <= '9') i++;
    } else {
      return false;
    }
    if (i - ds > 15) return false;
    if (i < n && (b[i] == '.' || b[i] == 'e' || b[i] == 'E' || (b[i] >= '0' && b[i] <= '9'))) return false;
    double v = 0;
    for (size_t k = ds; k < i; k++) v = v * 10 + (b[k] - '0');
    if (neg && v == 0) return false;  // -0 is written as 0
    (void)start;
    *value = neg ? -v : v;
    return true;
  }

  bool Literal(const char* w, size_t len) {
    if (i + len > n || std::memcmp(b + i, w, len) != 0) return false;
    i += len;
    return true;
  }

  // An array index key ("0", "7", "4294967294"): a JS object would list it first.
  static bool IndexLike(std::string_view k) {
    if (k.empty() || k.size() > 10) return false;
    if (k.size() > 1 && k[0] == '0') return false;
    uint64_t v = 0;
    for (char c : k) {
      if (c < '0' || c > '9') return false;
      v = v * 10 + static_cast<uint64_t>(c - '0');
    }
    return v <= 4294967294ull;
  }

  bool Value(int depth) {
    if (i >= n) return false;
    uint8_t c = b[i];
    if (c == '"') {
      bool esc;
      return String(&esc);
    }
    if (c == '{') return Object(depth + 1, nullptr);
    if (c == '[') return Array(depth + 1);
    if (c == '-' || (c >= '0' && c <= '9')) {
      double v;
      return Number(&v);
    }
    if (c == 't') return Literal("true", 4);
    if (c == 'f') return Literal("false", 5);
    if (c == 'n') return Literal("null", 4);
    return false;
  }

  bool Array(int depth) {
    if (depth > kMaxDepth) return false;
    i++;
    if (i < n && b[i] == ']') {
      i++;
      return true;
    }
    for (;;) {
      if (!Value(depth)) return false;
      if (i >= n) return false;
      if (b[i] == ',') {
        i++;
        continue;
      }
      if (b[i] == ']') {
        i++;
        return true;
      }
      return false;
    }
  }

  // An object; with `top`, records the envelope facts.
  bool Object(int depth, double* top) {
    if (depth > kMaxDepth) return false;
    i++;
    if (i < n && b[i] == '}') {
      i++;
      if (top) top[0] = kTopObject;
      return true;
    }
    // Keys seen so far: a short list is scanned, a long one hashed.
    const size_t base = keys.size();
    std::unordered_set<std::string_view>* many = nullptr;
    struct Drop {
      std::vector<std::string_view>& keys;
      size_t base;
      std::unordered_set<std::string_view>*& many;
      ~Drop() {
        keys.resize(base);
        delete many;
      }
    } drop{keys, base, many};
    uint32_t flags = 0;
    for (;;) {
      if (i >= n || b[i] != '"') return false;
      size_t ks = i + 1;
      bool esc;
      if (!String(&esc) || esc) return false;
      std::string_view key(reinterpret_cast<const char*>(b + ks), i - 1 - ks);
      if (IndexLike(key)) return false;
      const size_t count = keys.size() - base;
      if (count < 16) {
        for (size_t k = base; k < keys.size(); k++)
          if (keys[k] == key) return false;
      } else {
        if (many == nullptr) many = new std::unordered_set<std::string_view>(keys.begin() + base, keys.end());
        if (!many->insert(key).second) return false;
      }
      keys.push_back(key);
      if (i >= n || b[i] != ':') return false;
      i++;
      size_t vs = i;
      if (top) {
        if (key == "jsonrpc") {
          flags |= kJsonrpcOk * (i + 5 <= n && std::memcmp(b + i, "\"2.0\"", 5) == 0);
        } else if (key == "id") {
          flags |= kHasId;
          if (i < n && b[i] == '"') {
            if (!String(&esc)) return false;
            if (!esc) {
              flags |= kIdString;
              top[2] = static_cast<double>(vs + 1);
              top[3] = static_cast<double>(i - 1);
            }
            goto next;
          }
          if (i < n && (b[i] == '-' || (b[i] >= '0' && b[i] <= '9'))) {
            if (!Number(&top[1])) return false;
            flags |= kIdInt;
            goto next;
          }
        } else if (key == "method") {
          flags |= kHasMethod;
          if (i < n && b[i] == '"') {
            if (!String(&esc)) return false;
            if (!esc) {
              flags |= kMethodString;
              top[4] = static_cast<double>(vs + 1);
              top[5] = static_cast<double>(i - 1);
            }
            goto next;
          }
        } else if (key == "params") {
          flags |= kHasParams;
          if (i < n && b[i] == '{') {
            if (!Value(depth)) return false;
            flags |= kParamsObject;
            top[6] = static_cast<double>(vs);
            top[7] = static_cast<double>(i);
            goto next;
          }
        } else if (key == "result") {
          flags |= kHasResult;
        } else if (key == "error") {
          flags |= kHasError;
          if (i < n && b[i] == '{') flags |= kErrorObject;
        } else {
          flags |= kOtherKey;
        }
      }
      if (!Value(depth)) return false;
    next:
      if (i >= n) return false;
      if (b[i] == ',') {
        i++;
        continue;
      }
      if (b[i] == '}') {
        i++;
        if (top) top[0] = static_cast<double>(flags | kTopObject);
        return true;
      }
      return false;
    }
  }
};

// Flags a plain request or response has (and has not) in `top[0]`: what src/tools/gate/scan.ts asks.
constexpr uint32_t kRequestNeed = kTopObject | kJsonrpcOk | kMethodString;
constexpr uint32_t kRequestNot = kHasResult | kHasError | kOtherKey;
constexpr uint32_t kResponseNeed = kTopObject | kJsonrpcOk | kHasId;
constexpr uint32_t kResponseNot = kHasMethod | kHasParams | kOtherKey;

// One line, whole: true when it is certainly valid and canonical, with its top-level facts in top[0..7].
inline bool ScanLine(Scanner& s, const uint8_t* b, size_t n, double* top) {
  top[0] = 0;
  s.b = b;
  s.n = n;
  s.i = 0;
  s.keys.clear();
  bool ok;
  if (s.n > 0 && s.b[0] == '{')
    ok = s.Object(1, top);
  else
    ok = s.Value(0);
  ok = ok && s.i == s.n;
  // A line with a huge object must not leave its key stack allocated for the rest of the session.
  if (s.keys.capacity() > 4096) std::vector<std::string_view>().swap(s.keys);
  return ok;
}

// The whole lines (each ending in LF) from byte `at` of b[0, n), scanned one at a time while `take(k, start, end, top)`
// accepts the k-th (its facts in top): how many it took, at most `max`. An empty line, one that is not canonical or
// not taken, and a last line without its LF end the run.
template <class Take>
size_t ScanLines(Scanner& s, const uint8_t* b, size_t n, size_t at, size_t max, Take&& take) {
  size_t k = 0;
  double top[8];
  while (k < max && at < n) {
    const void* lf = std::memchr(b + at, '\n', n - at);
    if (lf == nullptr) break;
    const size_t end = static_cast<size_t>(static_cast<const uint8_t*>(lf) - b);
    if (end == at || !ScanLine(s, b + at, end - at, top) || !take(k, at, end, top)) break;
    k++;
    at = end + 1;
  }
  return k;
}

}  // namespace jsonscan
}  // namespace leash
