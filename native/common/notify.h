#pragma once
#include <napi.h>

namespace leash {
Napi::Value SdNotify(const Napi::CallbackInfo& info);
}  // namespace leash
