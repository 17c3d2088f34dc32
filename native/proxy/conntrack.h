#pragma once
#include <napi.h>

namespace leash {
Napi::Value ConntrackRequest(const Napi::CallbackInfo& info);
Napi::Value ConntrackDelete(const Napi::CallbackInfo& info);
}  // namespace leash
