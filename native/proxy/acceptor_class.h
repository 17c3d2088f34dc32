// Internal to native/proxy: the Acceptor class, whose parts are acceptor.cc (a connection's way through it: accept,
// peek, release or reset) and acceptor_setup.cc (the object's life and its listeners: listen, unlisten, close).
#pragma once
#include <napi.h>
#include <sys/socket.h>
#include <uv.h>

#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

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
                        InstanceMethod("size", &Acceptor::Size)});
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
};

}  // namespace acceptor
}  // namespace leash
