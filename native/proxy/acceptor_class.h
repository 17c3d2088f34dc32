// Internal to native/proxy: the Acceptor class, whose parts are acceptor.cc (a connection's way through it: accept,
// peek, release or reset) and acceptor_setup.cc (the object's life and its listeners: listen, unlisten, close).
#pragma once
#include <napi.h>
#include <sys/socket.h>
#include <uv.h>

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "jsonline.h"
#include "fastpath.h"
#include "splicer.h"

namespace leash {
namespace acceptor {

class Acceptor;

struct Listener {
  Acceptor* owner = nullptr;
  uint32_t id = 0;
  uint32_t tag = 0;
  int fd = -1;
  uv_poll_t poll{};
  uv_timer_t backoff{};
  bool polling = false;
  bool closing = false;
  int open = 0;  // uv handles not yet closed
  // The address it is bound to: an accepted connection's local address, unless it is a wildcard.
  std::string local;
  int localPort = 0;
  bool wildcard = false;
  int family = AF_INET;
};

struct Conn {
  Acceptor* owner = nullptr;
  uint32_t id = 0;
  int fd = -1;
  uv_timer_t timer{};
  bool polling = false;  // in the acceptor's epoll set (peeking)
  bool timerInit = false;
  int open = 0;
  size_t maxBytes = 0;
  size_t seen = 0;
  bool lowat = false;
  // What accept read, kept for onAccept when the native verdict path hands the connection to JavaScript.
  uint32_t tag = 0;
  std::string la, pa, da, dstErr;
  int lport = 0, pport = 0, dport = 0, dstFamily = 0;
  // On the native verdict path (acceptor_fast.cc): peeked and decided here unless it goes to JavaScript.
  bool fast = false;
  uint32_t slot = 0;
  uint64_t t0 = 0;  // uv_hrtime at accept
  fast::Dst dst;
};

class Acceptor;

/** What a native pair's end needs (it may outlive the Acceptor): the pairs it counts and whether it is alive. */
struct FastShared {
  Acceptor* self = nullptr;  // null once the acceptor closed
  struct Held {
    uint32_t slot, uid;
  };
  std::unordered_map<uint32_t, Held> pairs;  // pump pair id -> its subject's count slot and uid
};

/** The address of `ss` as text (inet_ntop) and its port in `*port`; "" and 0 for another family. */
std::string AddrString(const sockaddr_storage& ss, int* port);

/** SO_LINGER 0 and close: the peer gets a reset. */
void ResetClose(int fd);

class Acceptor : public Napi::ObjectWrap<Acceptor> {
 public:
  static Napi::Function Define(Napi::Env env) {
    return DefineClass(env, "Acceptor",
                       {InstanceMethod("listen", &Acceptor::Listen), InstanceMethod("unlisten", &Acceptor::Unlisten),
                        InstanceMethod("peek", &Acceptor::Peek), InstanceMethod("release", &Acceptor::Release),
                        InstanceMethod("reset", &Acceptor::Reset), InstanceMethod("close", &Acceptor::Close),
                        InstanceMethod("size", &Acceptor::Size), InstanceMethod("fastConfig", &Acceptor::FastConfig),
                        InstanceMethod("setFast", &Acceptor::SetFast), InstanceMethod("cacheName", &Acceptor::CacheName),
                        InstanceMethod("abortSlot", &Acceptor::AbortSlot),
                        InstanceMethod("fastStats", &Acceptor::FastStats),
                        InstanceMethod("setLogFd", &Acceptor::SetLogFd),
                        InstanceMethod("fastTake", &Acceptor::FastTake)});
  }

  explicit Acceptor(const Napi::CallbackInfo& info);
  ~Acceptor() override;

 private:
  // acceptor_setup.cc: listeners and the object's end
  Napi::Value Listen(const Napi::CallbackInfo& info);
  Napi::Value Unlisten(const Napi::CallbackInfo& info);
  void CloseListener(Listener* l);
  Napi::Value Close(const Napi::CallbackInfo& info);
  void CloseEp();
  /** size() -> connections accepted and not yet released or reset. */
  Napi::Value Size(const Napi::CallbackInfo& info) { return Napi::Number::New(info.Env(), conns_.size()); }

  // acceptor.cc: a connection's way through (accept, peek, release or reset)
  static void StartListening(Listener* l);
  void OnListenReadable(Listener* l);
  Conn* Find(const Napi::CallbackInfo& info);
  Napi::Value Peek(const Napi::CallbackInfo& info);
  void OnConnEvents();
  void OnConnReadable(Conn* c, uint32_t events);
  void StopPeek(Conn* c);
  void PeekOver(Conn* c, const char* why, size_t have);
  void Drop(Conn* c);
  Napi::Value Release(const Napi::CallbackInfo& info);
  Napi::Value Reset(const Napi::CallbackInfo& info);
  Napi::Value Call(Napi::FunctionReference& fn, const std::initializer_list<napi_value>& args);
  void CallAccept(Conn* c);
  bool StartPeek(Conn* c, size_t maxBytes, uint64_t timeoutMs);

  // acceptor_fast.cc: the native verdict path
  Napi::Value FastConfig(const Napi::CallbackInfo& info);
  Napi::Value SetFast(const Napi::CallbackInfo& info);
  Napi::Value CacheName(const Napi::CallbackInfo& info);
  Napi::Value AbortSlot(const Napi::CallbackInfo& info);
  Napi::Value FastStats(const Napi::CallbackInfo& info);
  bool TryFast(Conn* c);
  void FastPeeked(Conn* c, size_t n);
  void FastHello(Conn* c, size_t n, const sni::Hello& h);
  void FastFallback(Conn* c, const char* why, size_t have);
  void FastDecide(Conn* c);
  void Count(uint32_t slot, int delta);
  void FlushLines();
  static void OnPairEnd(void* ctx, const pump::Done& d);

  // acceptor_lines.cc: the native path's allow lines, written to the decision log's file here
  bool UseLogFd(int fd);
  Napi::Value SetLogFd(const Napi::CallbackInfo& info);
  Napi::Value FastTake(const Napi::CallbackInfo& info);
  void AllowLine(uint32_t uid, const char* reason, const std::string& tail, double setupUs);
  void WriteAllows();

  struct EpPoll {
    uv_poll_t h;
    Acceptor* self;
    int ep;
  };

  uv_loop_t* loop_ = nullptr;
  int ep_ = -1;
  EpPoll* epPoll_ = nullptr;
  Napi::FunctionReference onAccept_, onPeek_, onError_;
  std::unique_ptr<Napi::AsyncContext> ctx_;
  std::vector<char> scratch_;
  int reserveFd_ = -1;  // a spare descriptor, given up to refuse connections when the process runs out
  uint32_t nextListener_ = 0;
  uint32_t nextConn_ = 0;
  std::unordered_map<uint32_t, Listener*> listeners_;
  std::unordered_map<uint32_t, Conn*> conns_;

  // The native verdict path (acceptor_fast.cc); off until fastConfig().
  bool fastOn_ = false;
  pump::Splicer* splicer_ = nullptr;
  Napi::ObjectReference splicerRef_;
  Napi::Reference<Napi::Value> countsRef_;
  int32_t* counts_ = nullptr;  // [active, opened, per-slot active...], shared with JavaScript's caps
  size_t countsLen_ = 0;
  int32_t maxTotal_ = 0, maxPer_ = 0;
  size_t peekBytes_ = 16384;
  uint64_t peekTimeoutMs_ = 5000;
  unsigned connectTimeoutMs_ = 10000;
  bool told_ = false;
  Napi::FunctionReference onLines_;
  std::unordered_map<uint32_t, std::shared_ptr<const fast::Entry>> fast_;  // by listener tag
  fast::Names names_;
  fast::OwnAddrs own_;
  std::shared_ptr<FastShared> shared_ = std::make_shared<FastShared>();
  std::string lines_;  // records for onLines, written at the end of the batch
  double stats_[4] = {0, 0, 0, 0};  // relayed, refused, to JavaScript, connect failed

  // The allow lines (acceptor_lines.cc): off (-1) unless fastConfig gave the decision log's descriptor.
  int logFd_ = -1;          // a dup of it
  bool logWrite_ = false;   // each allow line written (logging.allows all), else only counted
  bool wantSetups_ = false; // JavaScript observes set-up times
  std::string allowOut_;    // the batch's lines, written at its end or before any call into JavaScript
  IsoTime iso_;
  RefPool refs_;
  struct Counted {
    double allowed = 0, written = 0;
  };
  std::map<std::pair<uint32_t, const char*>, Counted> tally_;  // by uid and reason (NetReasonName's own strings)
  std::vector<double> setups_;
  int logErrno_ = 0;
  double logLost_ = 0;
};

}  // namespace acceptor
}  // namespace leash
