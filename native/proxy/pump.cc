// One direction of a spliced connection (see pump.h): the copy mode, the pipe pool and splice(2).
#include "pump.h"

#include <fcntl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <mutex>
#include <vector>

namespace leash {
namespace pump {

namespace {

// Pipes start at the default 64 KiB and grow to 1 MiB once a direction has moved that much: growing
// every pipe up front cost ~190 us per connection (measured), which is most of a short connection's cost.
constexpr int kPipeSize = 1 << 20;
constexpr uint64_t kGrowAfter = 1 << 20;

// Empty pipes are shared: a direction takes one from the pool when it has bytes to move and gives it back
// as soon as it is empty again. The pool is bounded; pipe2() and close() per transfer would otherwise be a
// measurable part of a short connection's cost on this kind of VM.
constexpr size_t kPoolMax = 128;
struct PooledPipe {
  int fds[2];
  size_t cap;
};
std::mutex poolMu;
std::vector<PooledPipe> pool;

bool OpenPipe(Dir& d) {
  {
    std::lock_guard<std::mutex> lock(poolMu);
    if (!pool.empty()) {
      PooledPipe p = pool.back();
      pool.pop_back();
      d.pipe[0] = p.fds[0];
      d.pipe[1] = p.fds[1];
      d.cap = p.cap;
      return true;
    }
  }
  d.cap = 65536;
  return pipe2(d.pipe, O_CLOEXEC | O_NONBLOCK) == 0;
}

}  // namespace

/** Returns an empty pipe to the pool (or closes it); a pipe holding bytes is never reused. */
void ReleasePipe(Dir& d) {
  if (d.pipe[0] >= 0 && d.inPipe == 0) {
    std::lock_guard<std::mutex> lock(poolMu);
    if (pool.size() < kPoolMax) {
      pool.push_back({{d.pipe[0], d.pipe[1]}, d.cap});
      d.pipe[0] = d.pipe[1] = -1;
      return;
    }
  }
  for (int& fd : d.pipe) {
    if (fd >= 0) close(fd);
    fd = -1;
  }
}

namespace {

void MaybeGrow(Dir& d) {
  if (d.growTried || d.bytes < kGrowAfter || d.cap >= static_cast<size_t>(kPipeSize)) return;
  int got = fcntl(d.pipe[1], F_SETPIPE_SZ, kPipeSize);
  if (got > 0) d.cap = static_cast<size_t>(got);
  else d.growTried = true;  // over the user's pipe-buffer limit: keep the size it has
}


/** send() until `len` bytes are out or `out` would block; the count sent, or -1 with errno for a failure. */
ssize_t SendSome(int out, const char* buf, size_t len) {
  size_t off = 0;
  while (off < len) {
    ssize_t n = send(out, buf + off, len - off, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n > 0) {
      off += static_cast<size_t>(n);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno == EAGAIN) break;
    if (n == 0) errno = EPIPE;
    return -1;
  }
  return static_cast<ssize_t>(off);
}

/** The copy mode of Pump (see Dir). `buf` is the pump's kCopyMax buffer. */
Step PumpCopy(Dir& d, char* buf, int* err) {
  if (d.pendLen > 0) {
    ssize_t w = SendSome(d.out, d.pend.get() + d.pendOff, d.pendLen);
    if (w < 0) {
      *err = errno;
      return Step::kError;
    }
    d.bytes += static_cast<uint64_t>(w);
    d.pendOff += static_cast<size_t>(w);
    d.pendLen -= static_cast<size_t>(w);
    if (d.pendLen > 0) return Step::kWaitOut;
    d.pend.reset();
    d.pendOff = 0;
  }
  for (;;) {
    if (d.eofIn) {
      if (!d.closeAfter) shutdown(d.out, SHUT_WR);
      d.done = true;
      return Step::kDone;
    }
    ssize_t n = recv(d.in, buf, kCopyMax, MSG_DONTWAIT);
    if (n == 0) {
      d.eofIn = true;
      continue;
    }
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN) {
        d.urgent = false;  // everything, the urgent mark included, has been read
        return Step::kWaitIn;
      }
      *err = errno;
      return Step::kError;
    }
    ssize_t w = SendSome(d.out, buf, static_cast<size_t>(n));
    if (w < 0) {
      *err = errno;
      return Step::kError;
    }
    d.bytes += static_cast<uint64_t>(w);
    if (w < n) {
      // `out` is full: the rest waits here (at most one buffer) and nothing more is read until it is gone.
      d.pendLen = static_cast<size_t>(n - w);
      d.pend.reset(new char[d.pendLen]);
      memcpy(d.pend.get(), buf + w, d.pendLen);
      d.pendOff = 0;
      return Step::kWaitOut;
    }
    if (static_cast<size_t>(n) == kCopyMax && !d.urgent) {
      d.copy = false;
      return Step::kBulk;
    }
    // A short read emptied the socket: the next bytes are a new edge. A FIN that came with them is not, and a short
    // read at an urgent mark did not empty it.
    if (!d.finSeen && !d.urgent) return Step::kWaitIn;
  }
}

/** Sends what the pipe holds: true once it is empty, else false with `*step` kWaitOut or kError. */
bool DrainPipe(Dir& d, Step* step, int* err) {
  while (d.inPipe > 0) {
    ssize_t n = splice(d.pipe[0], nullptr, d.out, nullptr, d.inPipe, SPLICE_F_MOVE | SPLICE_F_NONBLOCK);
    if (n > 0) {
      d.inPipe -= static_cast<size_t>(n);
      d.bytes += static_cast<uint64_t>(n);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno == EAGAIN) {
      *step = Step::kWaitOut;
      return false;
    }
    *err = n < 0 ? errno : EPIPE;
    *step = Step::kError;
    return false;
  }
  return true;
}

}  // namespace

/** Moves what can be moved now; kWaitIn/kWaitOut when a socket would block, kDone at EOF (after shutdown). */
Step Pump(Dir& d, char* buf, int* err) {
  if (d.done) return Step::kDone;
  Step step = Step::kWaitOut;
  if (d.urgent && !d.copy) {
    // What the pipe holds goes first; then the copy reads past the mark (see Dir::urgent).
    if (!DrainPipe(d, &step, err)) return step;
    ReleasePipe(d);
  }
  if (d.copy || d.urgent) {
    Step s = PumpCopy(d, buf, err);
    if (s != Step::kBulk) return s;
  }
  for (;;) {
    if (!DrainPipe(d, &step, err)) return step;
    if (d.eofIn) {
      if (!d.closeAfter) shutdown(d.out, SHUT_WR);
      d.done = true;
      ReleasePipe(d);
      return Step::kDone;
    }
    // Out of descriptors (EMFILE/ENFILE) or memory: this connection fails, the pump and the others go on.
    if (d.pipe[0] < 0 && !OpenPipe(d)) {
      *err = errno;
      return Step::kError;
    }
    MaybeGrow(d);
    ssize_t n = splice(d.in, nullptr, d.pipe[1], nullptr, d.cap, SPLICE_F_MOVE | SPLICE_F_NONBLOCK);
    if (n > 0) {
      d.inPipe += static_cast<size_t>(n);
    } else if (n == 0) {
      d.eofIn = true;
    } else if (errno == EINTR) {
      continue;
    } else if (errno == EAGAIN) {
      ReleasePipe(d);  // empty here: it is the socket that has nothing; the pipe goes back to the pool
      return Step::kWaitIn;
    } else {
      *err = errno;
      return Step::kError;
    }
  }
}

}  // namespace pump
}  // namespace leash
