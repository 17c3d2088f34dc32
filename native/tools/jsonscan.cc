// A fast, conservative pre-check for the MCP gate's JSON (src/tools/json.ts).
//
// scanJson(line, out) answers one question: is this line certainly a valid message that the
// gate's strict parser would accept AND that the gate's writer (stringifyAscii) would write back
// byte for byte? Only then may the gate forward the bytes it was given instead of its own
// re-serialisation. It answers 1 (yes, with the top-level facts the gate checks in `out`) or
// 0 (not sure): for 0 the gate runs its TypeScript parser, which stays the one definition of
// what is accepted and which error is reported. So this scanner may refuse anything it likes,
// but it must never say 1 for a line the TypeScript side would refuse or re-write differently;
// a differential test (tests/unit/mcp-jsonscan.test.ts) holds it to that.
//
// Canonical here means what stringifyAscii writes: no whitespace; strings of printable ASCII with
// `"` and `\` escaped, the five short escapes \b \t \n \f \r, every other control character and
// everything from U+007F up as a lowercase \uXXXX (a surrogate pair as two); integers of at most
// 15 digits without -0; no floats (their canonical text is the TypeScript side's business); no
// keys that are array indexes (a JS object lists those first, so the order would change); no
// escapes in keys; no duplicate keys.
#include "jsonscan.h"

#include <cstdint>
#include <cstring>
#include <string_view>
#include <unordered_set>
#include <vector>

namespace leash {
namespace {

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

}  // namespace

// createJsonScanner(out: Float64Array(8)) -> scan(line: Buffer) -> 1 | 0. The output array is
// bound once (a call per line then costs only the buffer lookup): out[0] flags, out[1] the
// integer id, out[2..3] the id string's span, out[4..5] the method's span, out[6..7] the span of
// params when it is an object (byte offsets in line).
namespace {

struct ScanState {
  Napi::Reference<Napi::Float64Array> keep;
  double* out;
  Scanner scanner;  // reused, so its key stack keeps its capacity
};

Napi::Value Scan(const Napi::CallbackInfo& info) {
  auto* st = static_cast<ScanState*>(info.Data());
  Napi::Env env = info.Env();
  if (info.Length() < 1 || !info[0].IsBuffer()) {
    Napi::TypeError::New(env, "scan(line: Buffer)").ThrowAsJavaScriptException();
    return env.Undefined();
  }
  auto buf = info[0].As<Napi::Buffer<uint8_t>>();
  double* out = st->out;
  out[0] = 0;
  Scanner& s = st->scanner;
  s.b = buf.Data();
  s.n = buf.Length();
  s.i = 0;
  s.keys.clear();
  bool ok;
  if (s.n > 0 && s.b[0] == '{')
    ok = s.Object(1, out);
  else
    ok = s.Value(0);
  ok = ok && s.i == s.n;
  // A line with a huge object must not leave its key stack allocated for the rest of the session.
  if (s.keys.capacity() > 4096) std::vector<std::string_view>().swap(s.keys);
  return Napi::Number::New(env, ok ? 1 : 0);
}

}  // namespace

Napi::Value CreateJsonScanner(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  if (info.Length() < 1 || !info[0].IsTypedArray() ||
      info[0].As<Napi::TypedArray>().TypedArrayType() != napi_float64_array ||
      info[0].As<Napi::TypedArray>().ElementLength() < 8) {
    Napi::TypeError::New(env, "createJsonScanner(out: Float64Array of at least 8)").ThrowAsJavaScriptException();
    return env.Undefined();
  }
  auto arr = info[0].As<Napi::Float64Array>();
  auto* st = new ScanState{Napi::Persistent(arr), arr.Data(), Scanner{}};
  Napi::Function fn = Napi::Function::New(env, Scan, "scanJson", st);
  // The state lives as long as the function.
  fn.AddFinalizer([](Napi::Env, ScanState* p) { delete p; }, st);
  return fn;
}

}  // namespace leash
