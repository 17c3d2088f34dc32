// The journal's native protocol without libsystemd: one datagram per entry to journald's socket,
// a sealed memfd passed over the socket for an entry too large for a datagram.
#pragma once
#include <napi.h>

namespace leash {
Napi::Value JournalSend(const Napi::CallbackInfo& info);
}  // namespace leash
