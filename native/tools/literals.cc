// One pass over a buffer for a fixed set of short ASCII literals, case-insensitively (ASCII letters
// only; any other byte compares as itself). The MCP gate asks it of every answer it might redact:
// "does this line contain any literal every secret match contains?" (src/engine/inspect.ts). The
// JavaScript form lower-cased a latin1 copy of the line and searched it once per literal (32
// passes and two copies per answer); this is one pass and no copy.
//
// Method: a bitmap over the (lower-cased) first two bytes of every literal. At each position the
// pair is looked up; only on a hit are the literals with that pair compared in full. Literals must
// be 2..64 bytes of ASCII (checked when the finder is made).
#include "literals.h"

#include <array>
#include <bitset>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

namespace leash {
namespace {

constexpr size_t kMaxLiterals = 256;
constexpr size_t kMaxLiteral = 64;

inline uint8_t Lower(uint8_t c) { return (c >= 'A' && c <= 'Z') ? static_cast<uint8_t>(c | 0x20) : c; }

struct Finder {
  std::bitset<65536> pairs;
  // Literals grouped by their first byte (lower case), stored lower case.
  std::array<std::vector<std::string>, 256> byFirst;

  bool Has(const uint8_t* b, size_t n) const {
    if (n < 2) return false;
    uint8_t prev = Lower(b[0]);
    for (size_t i = 1; i < n; i++) {
      const uint8_t cur = Lower(b[i]);
      if (pairs.test((static_cast<size_t>(prev) << 8) | cur)) {
        const size_t start = i - 1;
        for (const std::string& lit : byFirst[prev]) {
          const size_t len = lit.size();
          if (start + len > n || static_cast<uint8_t>(lit[1]) != cur) continue;
          size_t k = 2;
          while (k < len && Lower(b[start + k]) == static_cast<uint8_t>(lit[k])) k++;
          if (k == len) return true;
        }
      }
      prev = cur;
    }
    return false;
  }
};

Napi::Value Has(const Napi::CallbackInfo& info) {
  auto* f = static_cast<Finder*>(info.Data());
  Napi::Env env = info.Env();
  if (info.Length() < 1 || !info[0].IsBuffer()) {
    Napi::TypeError::New(env, "has(buf: Buffer)").ThrowAsJavaScriptException();
    return env.Undefined();
  }
  auto buf = info[0].As<Napi::Buffer<uint8_t>>();
  return Napi::Number::New(env, f->Has(buf.Data(), buf.Length()) ? 1 : 0);
}

}  // namespace

Napi::Value CreateLiteralFinder(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  if (info.Length() < 1 || !info[0].IsArray()) {
    Napi::TypeError::New(env, "createLiteralFinder(literals: string[])").ThrowAsJavaScriptException();
    return env.Undefined();
  }
  auto arr = info[0].As<Napi::Array>();
  if (arr.Length() == 0 || arr.Length() > kMaxLiterals) {
    Napi::RangeError::New(env, "createLiteralFinder: 1 to 256 literals").ThrowAsJavaScriptException();
    return env.Undefined();
  }
  auto f = std::make_unique<Finder>();
  for (uint32_t i = 0; i < arr.Length(); i++) {
    Napi::Value v = arr.Get(i);
    if (!v.IsString()) {
      Napi::TypeError::New(env, "createLiteralFinder: literal " + std::to_string(i) + " is not a string")
          .ThrowAsJavaScriptException();
      return env.Undefined();
    }
    std::string s = v.As<Napi::String>().Utf8Value();
    if (s.size() < 2 || s.size() > kMaxLiteral) {
      Napi::RangeError::New(env, "createLiteralFinder: literal " + std::to_string(i) + " is not 2 to 64 bytes")
          .ThrowAsJavaScriptException();
      return env.Undefined();
    }
    for (char& c : s) {
      if (static_cast<uint8_t>(c) >= 0x80) {
        Napi::RangeError::New(env, "createLiteralFinder: literal " + std::to_string(i) + " is not ASCII")
            .ThrowAsJavaScriptException();
        return env.Undefined();
      }
      c = static_cast<char>(Lower(static_cast<uint8_t>(c)));
    }
    const uint8_t a = static_cast<uint8_t>(s[0]), b = static_cast<uint8_t>(s[1]);
    f->pairs.set((static_cast<size_t>(a) << 8) | b);
    f->byFirst[a].push_back(std::move(s));
  }
  Finder* raw = f.release();
  Napi::Function fn = Napi::Function::New(env, Has, "hasLiteral", raw);
  fn.AddFinalizer([](Napi::Env, Finder* p) { delete p; }, raw);
  return fn;
}

}  // namespace leash
