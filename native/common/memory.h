#pragma once
#include <napi.h>

namespace leash {
// releaseMemory() -> true when malloc_trim returned pages to the kernel. A full, memory-reducing V8 collection
// (critical memory pressure), then malloc_trim(0). Main thread only.
Napi::Value ReleaseMemory(const Napi::CallbackInfo& info);
}  // namespace leash
