#pragma once
#include <napi.h>

namespace leash {
Napi::Value OriginalDst(const Napi::CallbackInfo& info);
Napi::Value PeerCred(const Napi::CallbackInfo& info);
}  // namespace leash
