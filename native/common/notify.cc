// sd_notify without libsystemd: one datagram to $NOTIFY_SOCKET.
#include "notify.h"

#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <string>

#include "errors.h"

namespace leash {

/**
 * sdNotify(state) -> boolean
 * Sends `state` (e.g. "READY=1\nSTATUS=…") to $NOTIFY_SOCKET. Returns false, doing
 * nothing, when the variable is unset (not under systemd); throws on a send error.
 * A leading '@' names an abstract socket, as systemd documents.
 */
Napi::Value SdNotify(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  if (info.Length() < 1 || !info[0].IsString()) return Usage(env, "sdNotify(state: string)");
  std::string state = info[0].As<Napi::String>().Utf8Value();
  const char* path = getenv("NOTIFY_SOCKET");
  if (path == nullptr || path[0] == '\0') return Napi::Boolean::New(env, false);

  size_t plen = strlen(path);
  sockaddr_un addr{};
  if (plen >= sizeof addr.sun_path || (path[0] != '/' && path[0] != '@')) {
    ErrnoError(env, EINVAL, "sd_notify").ThrowAsJavaScriptException();
    return env.Undefined();
  }
  addr.sun_family = AF_UNIX;
  memcpy(addr.sun_path, path, plen);
  if (path[0] == '@') addr.sun_path[0] = '\0';
  socklen_t alen = offsetof(sockaddr_un, sun_path) + plen;

  int fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    ErrnoError(env, errno, "socket").ThrowAsJavaScriptException();
    return env.Undefined();
  }
  ssize_t n = sendto(fd, state.data(), state.size(), MSG_NOSIGNAL,
                     reinterpret_cast<sockaddr*>(&addr), alen);
  int err = errno;
  close(fd);
  if (n < 0) {
    ErrnoError(env, err, "sendto").ThrowAsJavaScriptException();
    return env.Undefined();
  }
  return Napi::Boolean::New(env, true);
}

}  // namespace leash
