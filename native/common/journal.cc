// journalSend(socketPath, entry) -> 0 | errno: sends one journal entry (already serialised in the
// native protocol: `KEY=value\n` fields, or `KEY\n<le64 length><bytes>\n` for values with a
// newline) as systemd's sd_journal_sendv does, minus libsystemd:
//  - one SOCK_DGRAM datagram to the socket (journald's `socket`);
//  - when the kernel refuses the size (EMSGSIZE, ENOBUFS), the entry is written to a memfd that is
//    sealed (no write, grow, shrink) and its descriptor is sent in an empty datagram (SCM_RIGHTS).
// Never blocks: a journald that does not keep up costs a dropped entry (EAGAIN returned, the
// caller counts it), never a stalled enforcer. Errors are returned, not thrown: the journal is
// the view, the decision log is the record.
#include "journal.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>

#include "errors.h"

namespace leash {
namespace {

int g_fd = -1;  // one socket per process, made on first use (the JS thread is the only caller)

bool Address(const std::string& path, sockaddr_un* addr, socklen_t* len) {
  if (path.empty() || path.size() >= sizeof addr->sun_path || path[0] != '/') return false;
  memset(addr, 0, sizeof *addr);
  addr->sun_family = AF_UNIX;
  memcpy(addr->sun_path, path.data(), path.size());
  *len = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + path.size());
  return true;
}

int SendFd(const sockaddr_un& addr, socklen_t alen, const char* data, size_t size) {
#ifndef MFD_NOEXEC_SEAL
#define MFD_NOEXEC_SEAL 0x0008U
#endif
  // Not executable (host.memfd_noexec = 2 refuses a memfd without this); kernels before 6.3 do
  // not know the flag (EINVAL) and get the plain one.
  int mfd = memfd_create("leash-journal", MFD_CLOEXEC | MFD_ALLOW_SEALING | MFD_NOEXEC_SEAL);
  if (mfd < 0 && errno == EINVAL) mfd = memfd_create("leash-journal", MFD_CLOEXEC | MFD_ALLOW_SEALING);
  if (mfd < 0) return errno;
  size_t off = 0;
  while (off < size) {
    ssize_t n = write(mfd, data + off, size - off);
    if (n < 0) {
      if (errno == EINTR) continue;
      int err = errno;
      close(mfd);
      return err;
    }
    off += static_cast<size_t>(n);
  }
  if (fcntl(mfd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_WRITE | F_SEAL_SEAL) < 0) {
    int err = errno;
    close(mfd);
    return err;
  }
  alignas(cmsghdr) char ctrl[CMSG_SPACE(sizeof(int))] = {};
  msghdr mh{};
  mh.msg_name = const_cast<sockaddr_un*>(&addr);
  mh.msg_namelen = alen;
  mh.msg_control = ctrl;
  mh.msg_controllen = sizeof ctrl;
  cmsghdr* c = CMSG_FIRSTHDR(&mh);
  c->cmsg_level = SOL_SOCKET;
  c->cmsg_type = SCM_RIGHTS;
  c->cmsg_len = CMSG_LEN(sizeof(int));
  memcpy(CMSG_DATA(c), &mfd, sizeof(int));
  ssize_t n = sendmsg(g_fd, &mh, MSG_NOSIGNAL | MSG_DONTWAIT);
  int err = n < 0 ? errno : 0;
  close(mfd);
  return err;
}

}  // namespace

Napi::Value JournalSend(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  if (info.Length() < 2 || !info[0].IsString() || !info[1].IsBuffer()) {
    return Usage(env, "journalSend(socketPath: string, entry: Buffer)");
  }
  std::string path = info[0].As<Napi::String>().Utf8Value();
  Napi::Buffer<char> entry = info[1].As<Napi::Buffer<char>>();
  sockaddr_un addr;
  socklen_t alen;
  if (!Address(path, &addr, &alen)) return Napi::Number::New(env, EINVAL);
  if (g_fd < 0) {
    g_fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (g_fd < 0) return Napi::Number::New(env, errno);
    // As sd_journal does: a send buffer as large as the kernel allows, so most entries fit a datagram.
    int size = 8 * 1024 * 1024;
    setsockopt(g_fd, SOL_SOCKET, SO_SNDBUF, &size, sizeof size);
  }
  ssize_t n = sendto(g_fd, entry.Data(), entry.Length(), MSG_NOSIGNAL | MSG_DONTWAIT,
                     reinterpret_cast<sockaddr*>(&addr), alen);
  if (n >= 0) return Napi::Number::New(env, 0);
  int err = errno;
  if (err == EMSGSIZE || err == ENOBUFS) err = SendFd(addr, alen, entry.Data(), entry.Length());
  return Napi::Number::New(env, err);
}

}  // namespace leash
