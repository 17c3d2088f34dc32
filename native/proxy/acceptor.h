// The proxy's listeners and first-bytes peek, on Node's event loop (uv_poll), without net.Socket objects.
#pragma once
#include <napi.h>

namespace leash {
/** Adds the Acceptor class to the module's exports. */
void InitAcceptor(Napi::Env env, Napi::Object exports);
}  // namespace leash
