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
#include <memory>

#include "jsonscan_core.h"
#include "literals_core.h"

namespace leash {

using jsonscan::Scanner;

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
  const bool ok = jsonscan::ScanLine(st->scanner, buf.Data(), buf.Length(), st->out);
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

bool ChunkArgs(const Napi::CallbackInfo& info, const char* usage, const uint8_t** b, size_t* n, size_t* at) {
  if (info.Length() < 2 || !info[0].IsBuffer() || !info[1].IsNumber()) {
    Napi::TypeError::New(info.Env(), usage).ThrowAsJavaScriptException();
    return false;
  }
  auto buf = info[0].As<Napi::Buffer<uint8_t>>();
  *b = buf.Data();
  *n = buf.Length();
  const double a = info[1].As<Napi::Number>().DoubleValue();
  *at = a >= 0 && a <= static_cast<double>(*n) ? static_cast<size_t>(a) : SIZE_MAX;
  return true;
}

// createAnswerReader(out: Float64Array(3 * K), literals: string[]) -> read(chunk: Buffer, at: number) -> n.
// From byte `at` of a chunk from the server, the whole lines (each ending in LF) that are plain answers, which the
// gate forwards as they came when it waits for their id (src/tools/gate/server.ts): canonical, jsonrpc "2.0", an
// integer id, exactly one of result and error (an object), no other member. For the k-th: out[3k] the offset just
// after its LF, out[3k+1] its id, out[3k+2] 1 when it holds one of the literals (it may hold a secret), else 0.
// Stops before the first other line, at the chunk's end, or after K lines; one call instead of two per answer.
namespace {

struct AnswerReader {
  Napi::Reference<Napi::Float64Array> keep;
  double* out;
  size_t max;
  Scanner scanner;
  literals::Finder finder;
};

Napi::Value ReadAnswers(const Napi::CallbackInfo& info) {
  auto* r = static_cast<AnswerReader*>(info.Data());
  Napi::Env env = info.Env();
  const uint8_t* b;
  size_t n, at;
  if (!ChunkArgs(info, "read(chunk: Buffer, at: number)", &b, &n, &at)) return env.Undefined();
  if (at == SIZE_MAX) return Napi::Number::New(env, 0);
  const size_t k = jsonscan::ScanLines(r->scanner, b, n, at, r->max, [&](size_t i, size_t s, size_t e, double* top) {
    const uint32_t f = static_cast<uint32_t>(top[0]);
    if ((f & jsonscan::kResponseNeed) != jsonscan::kResponseNeed || (f & jsonscan::kResponseNot) != 0) return false;
    const bool result = (f & jsonscan::kHasResult) != 0, error = (f & jsonscan::kHasError) != 0;
    if (result == error || (error && (f & jsonscan::kErrorObject) == 0) || (f & jsonscan::kIdInt) == 0) return false;
    r->out[3 * i] = static_cast<double>(e + 1);
    r->out[3 * i + 1] = top[1];
    r->out[3 * i + 2] = r->finder.Has(b + s, e - s) ? 1 : 0;
    return true;
  });
  return Napi::Number::New(env, static_cast<double>(k));
}

}  // namespace

Napi::Value CreateAnswerReader(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  if (info.Length() < 2 || !info[0].IsTypedArray() ||
      info[0].As<Napi::TypedArray>().TypedArrayType() != napi_float64_array ||
      info[0].As<Napi::TypedArray>().ElementLength() < 3) {
    Napi::TypeError::New(env, "createAnswerReader(out: Float64Array of 3 * K, literals)").ThrowAsJavaScriptException();
    return env.Undefined();
  }
  auto arr = info[0].As<Napi::Float64Array>();
  auto r = std::make_unique<AnswerReader>();
  if (!literals::ReadLiterals(env, info[1], "createAnswerReader", &r->finder)) return env.Undefined();
  r->keep = Napi::Persistent(arr);
  r->out = arr.Data();
  r->max = arr.ElementLength() / 3;
  AnswerReader* raw = r.release();
  Napi::Function fn = Napi::Function::New(env, ReadAnswers, "readAnswers", raw);
  fn.AddFinalizer([](Napi::Env, AnswerReader* p) { delete p; }, raw);
  return fn;
}

}  // namespace leash
