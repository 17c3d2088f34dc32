#pragma once
#include <napi.h>

namespace leash {
Napi::Value NftRead(const Napi::CallbackInfo& info);
}  // namespace leash
