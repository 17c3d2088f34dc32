// Giving memory back: after a load peak the service's heap shrinks (V8 collects), but glibc keeps the freed
// pages of its arenas mapped; malloc_trim returns them to the kernel so RSS follows the load back down.
#include "memory.h"

#include <malloc.h>

namespace leash {

Napi::Value MallocTrim(const Napi::CallbackInfo& info) {
  return Napi::Boolean::New(info.Env(), malloc_trim(0) == 1);
}

}  // namespace leash
