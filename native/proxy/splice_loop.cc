// The splice pump's loop (part of the Splicer, splicer.h): an event on a pair's socket runs the direction that has
// news, a finished pair is reported to JavaScript (directly inline, through a ThreadSafeFunction from its own thread).
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>
#include <uv.h>

#include <cerrno>
#include <cstdio>

#include "splicer.h"

namespace leash {
namespace pump {

/** Inline mode: the events ready now, then the onDone calls of the pairs they finished. */
void Splicer::OnInline() {
  epoll_event events[128];
  int n = epoll_wait(epfd_, events, 128, 0);
  for (int i = 0; i < n; i++) Dispatch(events[i]);
  Collect();
}

/** Inline mode: frees the pairs finished (after the batch that may still name them) and reports them. */
void Splicer::Collect() {
  for (Pair* p : graveyard_) delete p;
  graveyard_.clear();
  DeliverDone();
}

void Splicer::DeliverDone() {
  if (!pendingNative_.empty()) {
    // Native pairs first: their hooks call no JavaScript unless a pair failed.
    std::vector<std::pair<Done, NativeEnd>> nat;
    nat.swap(pendingNative_);
    for (auto& [d, hook] : nat) hook.fn(hook.ctx.get(), d);
  }
  if (pending_.empty() || finalizing_) {
    pending_.clear();
    return;
  }
  Napi::Env env = Env();
  Napi::HandleScope scope(env);
  std::vector<Done> batch;
  batch.swap(pending_);
  for (const Done& d : batch) {
    onDone_.MakeCallback(env.Global(),
                         {Napi::Number::New(env, d.id), Napi::Number::New(env, d.err), Napi::Number::New(env, d.ab),
                          Napi::Number::New(env, d.ba), Napi::Boolean::New(env, d.connected),
                          Napi::Boolean::New(env, d.closed)},
                         *ctx_);
    if (env.IsExceptionPending()) {
      Napi::Error e = env.GetAndClearPendingException();
      fprintf(stderr, "leash splice: onDone threw: %s\n", e.Message().c_str());
    }
  }
}

void Splicer::Wake() {
  uint64_t one = 1;
  ssize_t r = write(wake_, &one, sizeof one);
  (void)r;
}

void Splicer::StopTimer(Pair* p) {
  if (p->timer == nullptr) return;
  uv_timer_stop(p->timer);
  uv_close(reinterpret_cast<uv_handle_t*>(p->timer), [](uv_handle_t* h) { delete reinterpret_cast<uv_timer_t*>(h); });
  p->timer = nullptr;
}

void Splicer::Finish(Pair* p, int err) {
  if (p->finished) return;
  p->finished = true;
  StopTimer(p);
  const bool closed = p->closeOnClean && err == 0 && p->connected;
  if (closed) {
    // The last references: closing them takes them out of the epoll set as well.
    close(p->ab.in);
    close(p->ba.in);
  } else {
    epoll_ctl(epfd_, EPOLL_CTL_DEL, p->ab.in, nullptr);
    epoll_ctl(epfd_, EPOLL_CTL_DEL, p->ba.in, nullptr);
  }
  ReleasePipe(p->ab);
  ReleasePipe(p->ba);
  {
    std::lock_guard<std::mutex> lock(mu_);
    live_.erase(p->id);
  }
  const Done done{p->id, err, static_cast<double>(p->ab.bytes), static_cast<double>(p->ba.bytes), p->connected,
                  closed};
  if (inline_) {
    if (p->hook.fn) {
      Done nd = done;
      nd.a = p->ab.in;
      nd.b = p->ba.in;
      pendingNative_.emplace_back(nd, std::move(p->hook));
    } else {
      pending_.push_back(done);
    }
    graveyard_.push_back(p);
    return;
  }
  auto* d = new Done(done);
  napi_status st = tsfn_.BlockingCall(d, [](Napi::Env env, Napi::Function fn, Done* done) {
    fn.Call({Napi::Number::New(env, done->id), Napi::Number::New(env, done->err), Napi::Number::New(env, done->ab),
             Napi::Number::New(env, done->ba), Napi::Boolean::New(env, done->connected),
             Napi::Boolean::New(env, done->closed)});
    delete done;
  });
  if (st != napi_ok) delete d;
  graveyard_.push_back(p);
}

void Splicer::Rearm(Pair* p, int side, bool outArmed, bool inOff) {
  epoll_event ev{};
  // EPOLLPRI goes with EPOLLIN: a segment's wake-up carries both in its key, so either one left armed lets every
  // segment through (reported as EPOLLOUT, the state the socket is in). Urgent data that came meanwhile is still
  // seen: the splice stops at its mark, the direction then waits to read, and the MOD that arms both reports it.
  ev.events = EPOLLRDHUP | EPOLLET | (inOff ? 0u : EPOLLIN | EPOLLPRI) | (outArmed ? EPOLLOUT : 0u);
  ev.data.u64 = Tag(p, side);
  // MOD re-checks readiness: a socket that became writable (or readable) in between still reports.
  epoll_ctl(epfd_, EPOLL_CTL_MOD, side == 0 ? p->ab.in : p->ba.in, &ev);
}

/**
 * After a Pump of the direction reading socket `side`: waitOut arms EPOLLOUT on the other socket (kept from then
 * on) and drops EPOLLIN on this one; anything else takes EPOLLIN back. One epoll_ctl per change, none otherwise.
 */
void Splicer::Sync(Pair* p, int side, bool waitOut) {
  bool& inOff = side == 0 ? p->inOffA : p->inOffB;
  if (waitOut) {
    bool& outArmed = side == 0 ? p->outArmedB : p->outArmedA;
    if (!outArmed) {
      outArmed = true;
      Rearm(p, 1 - side, true, side == 0 ? p->inOffB : p->inOffA);
    }
  }
  if (inOff == waitOut) return;
  inOff = waitOut;
  Rearm(p, side, side == 0 ? p->outArmedA : p->outArmedB, inOff);
}

void Splicer::Dispatch(const epoll_event& ev) {
  if (ev.data.u64 == 0) {
    uint64_t v;
    while (read(wake_, &v, sizeof v) > 0) {
    }
    TakeQueued();
    return;
  }
  Run(reinterpret_cast<Pair*>(ev.data.u64 & ~uint64_t{1}), static_cast<int>(ev.data.u64 & 1), ev.events);
}

/**
 * An event on one socket of a pair: readable moves the direction that reads it, writable the one that writes
 * it (an error or hang-up both). Each direction runs only when its own socket has news, so a small exchange
 * costs no reads of a socket that has nothing.
 */
void Splicer::Run(Pair* p, int side, uint32_t events) {
  if (p->finished) return;
  Dir& from = side == 0 ? p->ab : p->ba;  // reads this socket
  Dir& to = side == 0 ? p->ba : p->ab;    // writes to it
  const bool bad = events & (EPOLLHUP | EPOLLERR);
  if (events & (EPOLLRDHUP | EPOLLHUP)) from.finSeen = true;
  if (events & EPOLLPRI) from.urgent = true;
  bool runFrom = bad || (events & (EPOLLIN | EPOLLPRI | EPOLLRDHUP));
  // A socket armed for EPOLLOUT reports it with every event: news only for a direction that waits to write.
  bool runTo = bad || ((events & EPOLLOUT) && to.blocked);
  if (p->connecting) {
    // What the client sends waits in its socket until the upstream is connected.
    if (side == 0) return;
    if (!(events & (EPOLLOUT | EPOLLHUP | EPOLLERR))) return;
    // Writable without an error or hang-up: connected (a failed connect always reports EPOLLERR). Refused or timed
    // out: SO_ERROR says which (and is cleared by reading it); nginx asks it on every connect, one call more.
    if (bad) {
      int soerr = 0;
      socklen_t sl = sizeof soerr;
      getsockopt(p->ab.out, SOL_SOCKET, SO_ERROR, &soerr, &sl);
      if (soerr != 0) return Finish(p, soerr);
      if (!(events & EPOLLOUT)) return Finish(p, ECONNREFUSED);
    }
    p->connecting = false;
    p->connected = true;
    if (p->timer != nullptr) {
      StopTimer(p);
    } else {
      unsigned zero = 0;
      setsockopt(p->ab.out, IPPROTO_TCP, TCP_USER_TIMEOUT, &zero, sizeof zero);
    }
    // What the client sent meanwhile (its events were passed over), and the server's bytes if they are here
    // already (later ones are an edge of their own).
    runTo = true;
  }
  int err = 0;
  // The direction that ends last ends the pair: closed here when it ends cleanly, with no shutdown first.
  const bool closing = p->closeOnClean && p->connected;
  from.closeAfter = closing && to.done;
  to.closeAfter = closing && from.done;
  if (runFrom) {
    Step s = Pump(from, copyBuf_.data(), &err);
    if (s == Step::kError) return Finish(p, err);
    from.blocked = s == Step::kWaitOut;
    if (s != Step::kDone) Sync(p, side, from.blocked);
  }
  if (runTo) {
    to.closeAfter = closing && from.done;  // `from` may have ended just now
    Step s = Pump(to, copyBuf_.data(), &err);
    if (s == Step::kError) return Finish(p, err);
    to.blocked = s == Step::kWaitOut;
    if (s != Step::kDone) Sync(p, 1 - side, to.blocked);
  }
  if (p->ab.done && p->ba.done) Finish(p, 0);
}

void Splicer::Loop() {
  epoll_event events[128];
  while (!stop_.load()) {
    int n = epoll_wait(epfd_, events, 128, -1);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) break;
    for (int i = 0; i < n; i++) Dispatch(events[i]);
    // A pair finished in this batch may still have an event further down the same batch:
    // free it only after the batch.
    for (Pair* p : graveyard_) delete p;
    graveyard_.clear();
  }
  std::vector<Pair*> rest;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto& kv : live_) rest.push_back(kv.second);
  }
  for (Pair* p : rest) Finish(p, ECANCELED);
  for (Pair* p : graveyard_) delete p;
  graveyard_.clear();
}

void Splicer::TakeQueued() {
  std::deque<uint32_t> aborts;
  {
    std::lock_guard<std::mutex> lock(mu_);
    aborts.swap(aborts_);
  }
  for (uint32_t id : aborts) {
    Pair* p = nullptr;
    {
      std::lock_guard<std::mutex> lock(mu_);
      auto it = live_.find(id);
      if (it != live_.end()) p = it->second;
    }
    if (p) Finish(p, ECANCELED);
  }
}

}  // namespace pump
}  // namespace leash
