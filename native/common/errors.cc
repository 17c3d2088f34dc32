#include "errors.h"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <string>

namespace leash {

const char* ErrnoName(int err) {
  // glibc's strerrorname_np is 2.32+; Debian 12 has 2.36.
  const char* n = strerrorname_np(err);
  return n ? n : "EUNKNOWN";
}

Napi::Error ErrnoError(Napi::Env env, int err, const char* syscall) {
  std::string msg = std::string(syscall) + ": " + strerror(err);
  Napi::Error e = Napi::Error::New(env, msg);
  e.Set("code", Napi::String::New(env, ErrnoName(err)));
  e.Set("errno", Napi::Number::New(env, -err));
  e.Set("syscall", Napi::String::New(env, syscall));
  return e;
}

Napi::Value Usage(Napi::Env env, const char* usage) {
  Napi::TypeError::New(env, usage).ThrowAsJavaScriptException();
  return env.Undefined();
}

}  // namespace leash
