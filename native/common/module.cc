// The addon's one entry point: each subsystem registers its own exports (register.h).
#include <napi.h>

#include "register.h"

namespace {

Napi::Object Init(Napi::Env env, Napi::Object exports) {
  leash::RegisterCommon(env, exports);
  leash::RegisterProxy(env, exports);
  leash::RegisterWatcher(env, exports);
  leash::RegisterTools(env, exports);
  return exports;
}

}  // namespace

NODE_API_MODULE(leash_native, Init)
