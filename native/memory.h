#pragma once
#include <napi.h>

namespace leash {
// mallocTrim() -> true when memory was returned to the kernel.
Napi::Value MallocTrim(const Napi::CallbackInfo& info);
}  // namespace leash
