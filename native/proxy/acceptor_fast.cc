// The acceptor's native verdict path (issue 43): a connection whose answer needs no JavaScript is peeked, judged
// (fastpath.h), connected and spliced here, and its decision line handed to JavaScript as finished text in one
// call per batch of events. JavaScript's part per connection is writing that line (the decision log keeps its one
// writer, its allow tally and its order) and the metrics; what this path cannot decide goes to onAccept exactly
// as a connection that never came this way, with nothing decided or written.
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>
#include <uv.h>

#include <cerrno>
#include <chrono>
#include <cstdio>

#include "acceptor_class.h"
#include "errors.h"
#include "sockopt.h"

namespace leash {
namespace acceptor {

namespace {

const napi_type_tag kPolicyTag = {0x6c6561736e65746dULL, 0x6e65746d61746368ULL};  // netmatch_napi.cc's handle

struct PolicyHandle {
  std::shared_ptr<const NetPolicy> policy;
};


}  // namespace

/**
 * fastConfig({splicer, counts: Int32Array, maxTotal, maxPerSubject, peekBytes, peekTimeoutMs, connectTimeoutMs,
 * told, onLines(records), logFd?, logWrite?, setups?}): turns the native path on. `splicer` must be inline on this
 * loop; `counts` is the caps' array ([active, opened, then one cell per subject slot]), updated here for the
 * connections this path holds. With `logFd` its allow lines are written here (acceptor_lines.cc; `logWrite` false:
 * counted only), their counts and set-up times pulled with fastTake.
 */
Napi::Value Acceptor::FastConfig(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  const char* usage =
      "fastConfig({splicer, counts: Int32Array, maxTotal, maxPerSubject, peekBytes, peekTimeoutMs, connectTimeoutMs, "
      "told, onLines, logFd?, logWrite?, setups?})";
  if (info.Length() < 1 || !info[0].IsObject()) return Usage(env, usage);
  Napi::Object o = info[0].As<Napi::Object>();
  Napi::Value sp = o.Get("splicer"), counts = o.Get("counts"), lines = o.Get("onLines");
  if (!sp.IsObject() || !pump::Splicer::IsSplicer(sp.As<Napi::Object>()) || !counts.IsTypedArray() ||
      counts.As<Napi::TypedArray>().TypedArrayType() != napi_int32_array || !lines.IsFunction())
    return Usage(env, usage);
  auto* s = pump::Splicer::Unwrap(sp.As<Napi::Object>());
  auto ta = counts.As<Napi::Int32Array>();
  if (!s->Inline() || ta.ElementLength() < 3) return Usage(env, usage);
  splicer_ = s;
  splicerRef_ = Napi::Persistent(sp.As<Napi::Object>());
  countsRef_ = Napi::Persistent(counts);
  counts_ = ta.Data();
  countsLen_ = ta.ElementLength();
  maxTotal_ = o.Get("maxTotal").ToNumber().Int32Value();
  maxPer_ = o.Get("maxPerSubject").ToNumber().Int32Value();
  peekBytes_ = static_cast<size_t>(o.Get("peekBytes").ToNumber().Int64Value());
  peekTimeoutMs_ = static_cast<uint64_t>(o.Get("peekTimeoutMs").ToNumber().Int64Value());
  connectTimeoutMs_ = o.Get("connectTimeoutMs").ToNumber().Uint32Value();
  told_ = o.Get("told").ToBoolean().Value();
  onLines_ = Napi::Persistent(lines.As<Napi::Function>());
  // logFd: the decision log's descriptor, for allow lines written here (acceptor_lines.cc); absent: JavaScript's.
  Napi::Value logFd = o.Get("logFd");
  logWrite_ = o.Get("logWrite").ToBoolean().Value();
  wantSetups_ = o.Get("setups").ToBoolean().Value();
  if (logFd.IsNumber() && !UseLogFd(logFd.As<Napi::Number>().Int32Value())) {
    ErrnoError(env, errno, "dup").ThrowAsJavaScriptException();
    return env.Undefined();
  }
  shared_->self = this;
  fastOn_ = true;
  return env.Undefined();
}

/**
 * setFast(tag, uid, handle|null, echAllow, slot): the listener's subject for the native path, replaced whole (the
 * next connection judges with it; one being judged keeps the snapshot it loaded). null: none of its connections
 * take the native path (no policy, a shadowed policy, a decide that is not the engine's).
 */
Napi::Value Acceptor::SetFast(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  const char* usage = "setFast(tag, uid, handle|null, echAllow, slot)";
  if (info.Length() < 5 || !info[0].IsNumber() || !info[1].IsNumber() || !info[4].IsNumber()) return Usage(env, usage);
  uint32_t tag = info[0].As<Napi::Number>().Uint32Value();
  Napi::Value h = info[2];
  if (h.IsNull() || h.IsUndefined()) {
    fast_.erase(tag);
    return env.Undefined();
  }
  if (!h.IsExternal() || !h.As<Napi::External<PolicyHandle>>().CheckTypeTag(&kPolicyTag)) return Usage(env, usage);
  auto e = std::make_shared<fast::Entry>();
  e->uid = info[1].As<Napi::Number>().Uint32Value();
  e->policy = h.As<Napi::External<PolicyHandle>>().Data()->policy;
  e->echAllow = info[3].ToBoolean().Value();
  e->slot = info[4].As<Napi::Number>().Uint32Value();
  if (!e->policy || e->policy->shadow || 2 + static_cast<size_t>(e->slot) >= countsLen_) return Usage(env, usage);
  fast_[tag] = std::move(e);
  return env.Undefined();
}

/** cacheName(name, v4[], v6[], expiresMs): the resolver's answer for a name, readable here until it expires. */
Napi::Value Acceptor::CacheName(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  const char* usage = "cacheName(name, v4: string[], v6: string[], expiresMs)";
  if (info.Length() < 4 || !info[0].IsString() || !info[1].IsArray() || !info[2].IsArray() || !info[3].IsNumber())
    return Usage(env, usage);
  fast::Names::Answer a;
  // Date.now() against the loop's clock: the answer's lifetime is kept, its epoch moved to uv_now's.
  double left = info[3].As<Napi::Number>().DoubleValue() - static_cast<double>(
                    std::chrono::duration_cast<std::chrono::milliseconds>(
                        std::chrono::system_clock::now().time_since_epoch()).count());
  if (!(left > 0)) return env.Undefined();
  a.expiresMs = static_cast<int64_t>(uv_now(loop_)) + static_cast<int64_t>(left);
  for (int fam = 0; fam < 2; fam++) {
    Napi::Array list = info[1 + fam].As<Napi::Array>();
    for (uint32_t i = 0; i < list.Length(); i++) {
      Napi::Value v = list.Get(i);
      if (!v.IsString()) return Usage(env, usage);
      std::string s = v.As<Napi::String>().Utf8Value();
      NetAddr addr;
      // An answer this cannot read the way JavaScript does leaves the name to JavaScript.
      if (!ParseNetAddr(s, &addr, true) || addr.family != (fam == 0 ? 4 : 6)) return env.Undefined();
      (fam == 0 ? a.v4 : a.v6).push_back(s);
      (fam == 0 ? a.a4 : a.a6).push_back(addr);
    }
  }
  names_.Set(info[0].As<Napi::String>().Utf8Value(), std::move(a));
  return env.Undefined();
}

/** abortSlot(slot): ends every native pair of a subject (its listeners closed), as relay.end does for the rest. */
Napi::Value Acceptor::AbortSlot(const Napi::CallbackInfo& info) {
  if (info.Length() < 1 || !info[0].IsNumber()) return Usage(info.Env(), "abortSlot(slot)");
  uint32_t slot = info[0].As<Napi::Number>().Uint32Value();
  if (splicer_)
    for (auto& [id, s] : shared_->pairs)
      if (s.slot == slot) splicer_->AbortId(id);
  return info.Env().Undefined();
}

/** fastStats() -> [relayed, refused, handed to JavaScript, connect failed]: the native path's counts. */
Napi::Value Acceptor::FastStats(const Napi::CallbackInfo& info) {
  Napi::Array a = Napi::Array::New(info.Env(), 4);
  for (uint32_t i = 0; i < 4; i++) a.Set(i, Napi::Number::New(info.Env(), stats_[i]));
  return a;
}

void Acceptor::Count(uint32_t slot, int delta) {
  counts_[0] += delta;
  counts_[2 + slot] += delta;
}

/** A new connection: peeked here when the native path may decide it (its caps counted here); else false. */
bool Acceptor::TryFast(Conn* c) {
  if (!fastOn_ || c->dstFamily == 0) return false;
  auto it = fast_.find(c->tag);
  if (it == fast_.end()) return false;
  const fast::Entry& e = *it->second;
  // A v4-mapped destination (an IPv6 listener's IPv4 peer) is spelled otherwise by JavaScript's plainIp.
  if (!ParseNetAddr(c->da, &c->dst.addr, true) || c->dst.addr.family != c->dstFamily) return false;
  c->dst.ip = c->da;
  c->dst.port = c->dport;
  // Over a cap: JavaScript refuses it and reports the cap.
  if (counts_[0] >= maxTotal_ || counts_[2 + e.slot] >= maxPer_) return false;
  if (fast::Arrival(e, c->dst, &own_, static_cast<int64_t>(uv_now(loop_))) != fast::Step::kPeek) return false;
  if (!StartPeek(c, peekBytes_, peekTimeoutMs_)) return false;
  Count(e.slot, 1);
  counts_[1]++;
  c->fast = true;
  c->slot = e.slot;
  c->t0 = uv_hrtime();
  return true;
}

/** Bytes peeked on the native path: wait for more, decide, or hand the connection to JavaScript. */
void Acceptor::FastPeeked(Conn* c, size_t n) {
  FastHello(c, n, sni::Parse(reinterpret_cast<const uint8_t*>(scratch_.data()), n));
}

void Acceptor::FastHello(Conn* c, size_t n, const sni::Hello& h) {
  if (h.kind == sni::Kind::kMore) {
    if (n >= c->maxBytes) return FastFallback(c, "limit", n);
    int lowat = static_cast<int>(n + 1);
    setsockopt(c->fd, SOL_SOCKET, SO_RCVLOWAT, &lowat, sizeof lowat);
    c->lowat = true;
    return;
  }
  if (h.kind == sni::Kind::kOther) return FastFallback(c, nullptr, n);
  auto it = fast_.find(c->tag);
  if (it == fast_.end()) return FastFallback(c, nullptr, n);
  std::shared_ptr<const fast::Entry> e = it->second;  // the snapshot this connection is judged by
  fast::Plan plan = fast::Decide(*e, c->dst, h, names_, &own_, static_cast<int64_t>(uv_now(loop_)), told_);
  if (plan.step == fast::Step::kJs) return FastFallback(c, nullptr, n);
  StopPeek(c);
  const double setupUs = static_cast<double>(uv_hrtime() - c->t0) / 1000.0;
  const int fd = c->fd;
  const uint32_t slot = c->slot;
  const int port = c->dst.port;
  c->fast = false;
  Drop(c);
  char head[64];
  if (plan.step == fast::Step::kRefuse) {
    // The line, then the reset (JavaScript's forgetter: the reset and the conntrack entry's delete), at once.
    Count(slot, -1);
    stats_[1]++;
    snprintf(head, sizeof head, "b%.1f %d %u\t", setupUs, fd, e->uid);
    lines_.append(head).append(plan.tail);
    return FlushLines();
  }
  if (logFd_ >= 0) {
    AllowLine(e->uid, plan.reason, plan.tail, setupUs);
  } else {
    snprintf(head, sizeof head, "a%.1f\t", setupUs);
    lines_.append(head).append(plan.tail);
  }
  sockaddr_storage ss{};
  socklen_t len = 0;
  int err = EINVAL;
  uint32_t id = 0;
  if (ParseSockaddr(plan.target, port, &ss, &len))
    id = splicer_->ConnectNative(fd, ss, len, connectTimeoutMs_, pump::NativeEnd{&Acceptor::OnPairEnd, shared_}, &err);
  if (id == 0) {
    // No socket for the upstream (EMFILE, ...): refused, as relay.spliceFd does.
    Count(slot, -1);
    stats_[3]++;
    snprintf(head, sizeof head, "e%d %d %u\t\n", err, fd, e->uid);
    lines_.append(head);
    return FlushLines();
  }
  shared_->pairs[id] = {slot, e->uid};
  stats_[0]++;
}

/**
 * The native path gives a connection up: its count goes back and JavaScript gets onAccept, as if it had just
 * been accepted. A peek that ended (`why`: closed, timeout, limit) is reported to JavaScript's peek at once;
 * bytes still waiting wake JavaScript's peek by themselves.
 */
void Acceptor::FastFallback(Conn* c, const char* why, size_t have) {
  StopPeek(c);
  Count(c->slot, -1);
  counts_[1]--;
  c->fast = false;
  stats_[2]++;
  uint32_t id = c->id;
  CallAccept(c);
  auto it = conns_.find(id);
  if (why == nullptr || it == conns_.end() || !it->second->polling) return;
  PeekOver(it->second, why, have);
}

/** Hands the batch's records to JavaScript (one call): lines to write, refusals to reset, failures to report. */
void Acceptor::FlushLines() {
  WriteAllows();  // first: the file keeps the order of decisions
  if (lines_.empty()) return;
  Napi::Env env = Env();
  Napi::HandleScope scope(env);
  Napi::String text = Napi::String::New(env, lines_);
  lines_.clear();
  Call(onLines_, {text});
}

/** A native pair ended: its count goes back; a pair that did not end cleanly goes to JavaScript to be reset. */
void Acceptor::OnPairEnd(void* ctx, const pump::Done& d) {
  auto* sh = static_cast<FastShared*>(ctx);
  auto it = sh->pairs.find(d.id);
  if (it == sh->pairs.end()) return;  // never registered as this acceptor's
  const uint32_t slot = it->second.slot, uid = it->second.uid;
  sh->pairs.erase(it);
  Acceptor* self = sh->self;
  if (self == nullptr) {
    // The acceptor is gone (the proxy closed): nothing to count or report; the descriptors are ours to close.
    if (!d.closed) {
      ResetClose(d.a);
      close(d.b);
    }
    return;
  }
  self->Count(slot, -1);
  if (d.closed) return;
  char head[96];
  snprintf(head, sizeof head, "x%d %d %d %d %u\t\n", d.err, d.connected ? 1 : 0, d.a, d.b, uid);
  self->lines_.append(head);
  self->FlushLines();
}

}  // namespace acceptor
}  // namespace leash
