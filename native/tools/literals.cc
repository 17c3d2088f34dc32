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

#include <memory>

#include "literals_core.h"

namespace leash {
namespace literals {

bool ReadLiterals(Napi::Env env, Napi::Value v, const char* who, Finder* f) {
  const std::string w(who);
  if (!v.IsArray()) {
    Napi::TypeError::New(env, w + "(literals: string[])").ThrowAsJavaScriptException();
    return false;
  }
  auto arr = v.As<Napi::Array>();
  if (arr.Length() == 0 || arr.Length() > kMaxLiterals) {
    Napi::RangeError::New(env, w + ": 1 to 256 literals").ThrowAsJavaScriptException();
    return false;
  }
  for (uint32_t i = 0; i < arr.Length(); i++) {
    Napi::Value e = arr.Get(i);
    if (!e.IsString()) {
      Napi::TypeError::New(env, w + ": literal " + std::to_string(i) + " is not a string").ThrowAsJavaScriptException();
      return false;
    }
    std::string s = e.As<Napi::String>().Utf8Value();
    if (s.size() < 2 || s.size() > kMaxLiteral) {
      Napi::RangeError::New(env, w + ": literal " + std::to_string(i) + " is not 2 to 64 bytes")
          .ThrowAsJavaScriptException();
      return false;
    }
    for (char& c : s) {
      if (static_cast<uint8_t>(c) >= 0x80) {
        Napi::RangeError::New(env, w + ": literal " + std::to_string(i) + " is not ASCII").ThrowAsJavaScriptException();
        return false;
      }
      c = static_cast<char>(Lower(static_cast<uint8_t>(c)));
    }
    const uint8_t a = static_cast<uint8_t>(s[0]), b = static_cast<uint8_t>(s[1]);
    f->pairs.set((static_cast<size_t>(a) << 8) | b);
    f->byFirst[a].push_back(std::move(s));
  }
  return true;
}

}  // namespace literals

namespace {

using literals::Finder;

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
  auto f = std::make_unique<Finder>();
  if (!literals::ReadLiterals(env, info.Length() < 1 ? env.Undefined() : info[0], "createLiteralFinder", f.get()))
    return env.Undefined();
  Finder* raw = f.release();
  Napi::Function fn = Napi::Function::New(env, Has, "hasLiteral", raw);
  fn.AddFinalizer([](Napi::Env, Finder* p) { delete p; }, raw);
  return fn;
}

}  // namespace leash
