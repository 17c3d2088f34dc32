// Internal to native/proxy: one direction of a spliced connection (in -> out), moved by copy for its first small
// messages and by splice(2) through a pooled pipe from its first full read on. The pump's loop (splice_loop.cc)
// runs a direction when its socket has news.
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>

namespace leash {
namespace pump {

/**
 * One direction: in -> pipe -> out. Half-close: EOF on `in` becomes shutdown(out, SHUT_WR). The pipe is held
 * only while it holds bytes (the out side would block): an idle direction holds none, so a spliced connection
 * costs its two sockets, not six descriptors, and the pipes in use are bounded by the directions in flight.
 */
struct Dir {
  int in = -1;
  int out = -1;
  int pipe[2] = {-1, -1};
  size_t cap = 65536;
  size_t inPipe = 0;
  bool eofIn = false;
  bool done = false;
  bool growTried = false;
  uint64_t bytes = 0;
  // A direction starts by copying (recv/send through a buffer of the pump's) and turns to splice(2) once a read
  // fills that buffer: a connection's first messages (a TLS handshake) are small, and for them a copy costs two
  // calls where splice costs three (in, out, and the read that finds the socket empty). A short recv() means the
  // socket was emptied, so no read to EAGAIN follows: with EPOLLET the next arrival is a new edge. Only a FIN that
  // came with the data (EPOLLRDHUP) has no edge of its own, so once one is seen the direction reads on to EOF.
  bool copy = true;
  bool finSeen = false;
  // TCP urgent data waits in `in` (EPOLLPRI). Reads stop at its mark: recv() returns the bytes before it (a short
  // read that has not emptied the socket) and skips the urgent byte on the next call, while splice(2) never reads
  // past the mark at all (tcp_read_sock stops there and says EAGAIN for good). So from EPOLLPRI on, the direction
  // copies and reads on to EAGAIN, which means the mark was passed; then it may turn to splice again. The urgent
  // byte itself is not relayed (it is out of band; nginx drops it too), the bytes around it are.
  bool urgent = false;
  // The last Pump returned kWaitOut: a writable event on `out` is news for this direction only then.
  bool blocked = false;
  // This direction's EOF is the pair's last and the pump closes both sockets right after (splice_loop.cc Run): the
  // close sends the FIN, so no shutdown(out) first. Both sockets have been read to EOF by then, so the close
  // cannot turn into a reset (unread data would).
  bool closeAfter = false;
  // Bytes read but not yet accepted by `out` (it would block): at most one buffer, held only while `out` is full.
  std::unique_ptr<char[]> pend;
  size_t pendOff = 0;
  size_t pendLen = 0;
};

// The copy buffer: a full read of it means bulk, and the direction turns to splice.
constexpr size_t kCopyMax = 16 * 1024;

// kBulk (PumpCopy only): a read filled the copy buffer; the direction goes on by splice.
enum class Step { kWaitIn, kWaitOut, kDone, kError, kBulk };

/** Moves what can be moved now; kWaitIn/kWaitOut when a socket would block, kDone at EOF (after shutdown). */
Step Pump(Dir& d, char* buf, int* err);

/** Returns an empty pipe to the pool (or closes it); a pipe holding bytes is never reused. */
void ReleasePipe(Dir& d);

}  // namespace pump
}  // namespace leash
