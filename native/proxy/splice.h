// A splice(2) pump: moves bytes between two sockets inside the kernel, on a native thread.
#pragma once
#include <napi.h>

namespace leash {
/** Adds the Splicer class to the module's exports. */
void InitSplice(Napi::Env env, Napi::Object exports);
}  // namespace leash
