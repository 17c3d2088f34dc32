// Giving memory back after a load peak. V8 keeps the young generation it grew (its semi-spaces stay at their
// largest) and the old-space pages it can reuse; a critical memory-pressure notification makes it collect
// everything and shrink both at once. glibc then still keeps the freed pages of its arenas mapped: malloc_trim
// returns them to the kernel. Together RSS follows the load back down.
#include "memory.h"

#include <malloc.h>
#include <v8.h>

namespace leash {

Napi::Value ReleaseMemory(const Napi::CallbackInfo& info) {
  v8::Isolate* isolate = v8::Isolate::GetCurrent();
  if (isolate != nullptr) isolate->MemoryPressureNotification(v8::MemoryPressureLevel::kCritical);
  return Napi::Boolean::New(info.Env(), malloc_trim(0) == 1);
}

}  // namespace leash
