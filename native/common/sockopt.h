#pragma once
#include <napi.h>
#include <sys/socket.h>

#include <string>

namespace leash {
Napi::Value OriginalDst(const Napi::CallbackInfo& info);
Napi::Value PeerCred(const Napi::CallbackInfo& info);
Napi::Value SetMark(const Napi::CallbackInfo& info);

/** An IPv4 or IPv6 literal and a port as a socket address; false when `ip` is neither. */
bool ParseSockaddr(const std::string& ip, int port, sockaddr_storage* ss, socklen_t* len);
}  // namespace leash
